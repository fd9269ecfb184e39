"""Training precision: Keras dtype policies, loss scaling for float16, and the tier each policy runs.

    "float32"         every weight and every computation in float32 (the default)
    "mixed_float16"   weights in float32, layers compute in float16; the loss is scaled (Keras'
                      `LossScaleOptimizer`) so that small gradients do not underflow in float16
    "mixed_bfloat16"  weights in float32, layers compute in bfloat16 (float32's range: no scaling)

In every policy the loss is computed in float32 (`tfattn.model.masked_loss` casts the logits), the
attention masks fill with a large negative that float16 holds (`tfattn.layers.attention.large_negative`),
and the variables, checkpoints and exports stay float32: an export of a mixed-precision run is
made from a float32 model holding the same weights, so it serves in float32.

The model's layers take their policy when they are made: build the model inside `precision_scope`.
"""

import contextlib

import keras

from tfattn.config import resolve_accel

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def check_precision(precision):
    """Returns `precision` if it is one of `PRECISIONS`; a `ValueError` naming it otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}. Received: precision={precision!r}")
    return precision


@contextlib.contextmanager
def precision_scope(precision):
    """Layers made inside the block compute in `precision` (Keras' global dtype policy, put back after).

    Example:

    >>> with precision_scope("mixed_bfloat16"):
    ...     model = make_model(ModelConfig(units=16), 30, 30)
    >>> model.decoder.compute_dtype
    'bfloat16'
    """
    check_precision(precision)
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def tier_for(precision, accel=None, model=None):
    """Whether the fast tier (`tfattn.accel`) trains under `precision`: the one place that decides.

    The fast tier's written-out recurrent steps, gradients and fused Adam are tested equal to the
    reference tier in float32 only, so a mixed policy trains with the reference tier (the layers'
    own calls, autodiff and Keras' Adam), whatever the switch or `accel` say; float32 follows them.

    Args:
        precision: str. One of `PRECISIONS`, or any Keras dtype policy name (a model's
            `dtype_policy.name`, as `Seq2Seq.train_step` passes it): all but `"float32"` take the
            reference tier.
        accel: bool or None, as everywhere (`None` follows `tfattn.config`).
        model: optional model: one the fast tier has no code for takes the reference tier
            (`tfattn.config.resolve_accel`).

    Returns:
        bool: `True` for the fast tier.
    """
    return resolve_accel(accel, model) and precision == "float32"


def with_loss_scaling(optimizer, precision):
    """`optimizer` wrapped in Keras' `LossScaleOptimizer` under `"mixed_float16"`; as is otherwise."""
    if check_precision(precision) == "mixed_float16":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def loss_scale(optimizer):
    """The factor the optimizer scales the loss by (1.0 without loss scaling)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.dynamic_scale
    return 1.0
