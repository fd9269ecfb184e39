"""Training precision: Keras dtype policies, loss scaling for float16, and what `"auto"` picks.

    "float32"         every weight and every computation in float32
    "mixed_float16"   weights in float32, layers compute in float16; the loss is scaled (Keras'
                      `LossScaleOptimizer`) so that small gradients do not underflow in float16
    "mixed_bfloat16"  weights in float32, layers compute in bfloat16 (float32's range: no scaling)
    "auto"            (the default) one of the two above by the machine, `AUTO`'s first row that
                      holds: bfloat16 where the hardware multiplies it fast, float32 elsewhere. A run
                      (`tfattn.runs`) resolves it before it makes its model, logs the choice and
                      writes it into its config.json; a `Trainer` given "auto" takes the model's own
                      policy (the model is made already).

In every policy the loss is computed in float32 (`tfattn.model.masked_loss` casts the logits), the
attention masks fill with a large negative that float16 holds (`tfattn.layers.attention.large_negative`),
and the variables, checkpoints and exports stay float32: an export of a mixed-precision run is
made from a float32 model holding the same weights, so it serves in float32.

The model's layers take their policy when they are made: build the model inside `precision_scope`.
"""

import contextlib

import keras

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")

# What `precision="auto"` picks, in order: the first row whose hardware feature the machine has
# (`features`); none: `AUTO_FALLBACK`. One row to add or remove to change the rule, e.g. after
# measuring `bench/precision.py` on a CPU with `avx512_bf16` (dot products of bfloat16 pairs) but
# no AMX.
AUTO = (
    ("gpu_bf16", "mixed_bfloat16"),  # a GPU of compute capability >= 8.0 (bfloat16 tensor cores)
    ("amx_bf16", "mixed_bfloat16"),  # a CPU with AMX's bfloat16 tile multiplies (oneDNN uses them)
)
AUTO_FALLBACK = "float32"
# The CPU flags that decide what bfloat16 costs, as /proc/cpuinfo names them (`cpu_flags`).
CPU_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


def check_precision(precision, auto=True):
    """Returns `precision` if it is one of `PRECISIONS` (or `"auto"`, when `auto`); a `ValueError`
    naming it otherwise."""
    choices = PRECISIONS + (("auto",) if auto else ())
    if precision not in choices:
        raise ValueError(f"precision must be one of {choices}. Received: precision={precision!r}")
    return precision


def cpu_flags(cpuinfo=None):
    """`{flag: bool}` for each of `CPU_FLAGS`, from the text of /proc/cpuinfo (`cpuinfo`, read from
    the machine when None; no flags where there is none to read)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    line = next((line for line in cpuinfo.splitlines() if line.split(":")[0].strip() in ("flags", "Features")), "")
    present = set(line.partition(":")[2].split())
    return {flag: flag in present for flag in CPU_FLAGS}


def gpu_computes_bfloat16():
    """Whether TensorFlow sees a GPU of compute capability 8.0 or more (Ampere and later)."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if capability and tuple(capability) >= (8, 0):
            return True
    return False


def features(cpuinfo=None, gpu_bf16=None):
    """The features `AUTO` reads: the CPU's flags (`cpu_flags(cpuinfo)`) and `"gpu_bf16"`
    (`gpu_computes_bfloat16()` when `gpu_bf16` is None)."""
    found = cpu_flags(cpuinfo)
    found["gpu_bf16"] = gpu_computes_bfloat16() if gpu_bf16 is None else bool(gpu_bf16)
    return found


def auto_precision(cpuinfo=None, gpu_bf16=None):
    """`(precision, reason)`: what `"auto"` picks on this machine (or on one of the `cpuinfo` text
    and `gpu_bf16` given) by `AUTO`, and one line saying why."""
    found = features(cpuinfo, gpu_bf16)
    for feature, precision in AUTO:
        if found.get(feature):
            return precision, f"{feature} present"
    shown = ", ".join(f"{flag} {'yes' if found[flag] else 'no'}" for flag in (*CPU_FLAGS, "gpu_bf16"))
    return AUTO_FALLBACK, f"no feature of the bfloat16 table ({shown})"


def resolve_precision(precision, cpuinfo=None, gpu_bf16=None):
    """`precision`, with `"auto"` replaced by `auto_precision`'s choice."""
    return auto_precision(cpuinfo, gpu_bf16)[0] if check_precision(precision) == "auto" else precision


@contextlib.contextmanager
def precision_scope(precision):
    """Layers made inside the block compute in `precision` (Keras' global dtype policy, put back after).

    Example:

    >>> with precision_scope("mixed_bfloat16"):
    ...     model = make_model(ModelConfig(units=16), 30, 30)
    >>> model.decoder.compute_dtype
    'bfloat16'
    """
    check_precision(precision, auto=False)
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
