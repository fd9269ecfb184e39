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
