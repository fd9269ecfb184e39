"""Argument checks shared by the layers: one `ValueError` that names the argument, the expected
shape in the package's axis names (`batch, t_q, t_in, t_out, units, ...`) and what was received.

Shapes are checked where they are known: eagerly, while tracing a `tf.function`, and on Keras'
symbolic tensors in a functional model. An axis whose size is unknown (`None`) is skipped. Token ids
are checked against the vocabulary where their values exist (`token_ids`: eager calls), and attention
inputs in integers are cast to floats (`as_float`).
"""

import numbers

import keras
import numpy as np
from keras import ops


def positive_int(name, value):
    """`value` as a Python int if it is a positive integer (NumPy integers too), else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
    return int(value)


def rate(name, value):
    """A dropout rate in [0, 1) as a Python float, else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1). Received: {name}={value!r}")
    return float(value)


def refuse_unused(name, value, default, applies, where, context):
    """Refuses an argument the layer would ignore: `value` other than its `default` where it does not
    apply (`applies` False). `where` says where it applies, `context` the arguments that decide it."""
    if value != default and not applies:
        raise ValueError(f"{name} applies to {where} only. Received: {name}={value!r} with {context}")


def as_float(name, x, dtype):
    """`x` as a floating-point tensor: as it is when it is one, cast to `dtype` when it holds integers
    or bools (as `keras.layers.Dense` computes on them), else a ValueError naming it. None stays None."""
    if x is None:
        return None
    kind = keras.backend.standardize_dtype(x.dtype)
    if keras.backend.is_float_dtype(kind):
        return x
    if keras.backend.is_int_dtype(kind) or kind == "bool":
        return ops.cast(x, dtype)
    raise ValueError(f"{name} must hold numbers: a float tensor, or integers, which are cast to {dtype}. "
                     f"Received: {name}.dtype={kind}")


def token_ids(name, ids, vocab_size):
    """Refuses token ids that an embedding of `vocab_size` rows would not look up as given, with a
    ValueError naming the first: below 0 (Keras' `Embedding` wraps them to rows from the end), from
    `vocab_size` on (its gather stops deep in TensorFlow on a CPU) or not whole (truncated).

    Checked where the values exist: NumPy arrays and eager tensors. Inside a traced function
    (`tf.function`, `jax.jit`) and on Keras' symbolic tensors they do not exist yet: not checked.
    """
    values = _values_now(ids)
    if values is None or values.size == 0:
        return
    expected = f"{name} must hold whole token ids from 0 to vocab_size - 1 = {vocab_size - 1}"
    if values.dtype.kind not in "iuf":
        raise ValueError(f"{expected}. Received: {name}.dtype={keras.backend.standardize_dtype(ids.dtype)}")
    bad = (values < 0) | (values >= vocab_size) | (values != np.floor(values))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{expected}. Received: {name}[{', '.join(map(str, where))}]={values[where].item()!r}")


def _values_now(x):
    """`x` as a NumPy array if its values exist now, else None."""
    try:
        return ops.convert_to_numpy(x)
    # A symbolic tf.Tensor in a tf.function (NotImplementedError), a KerasTensor (ValueError), a JAX
    # tracer (TracerArrayConversionError, a TypeError): values yet to be computed.
    except (NotImplementedError, ValueError, TypeError):
        return None


def static_shape(x):
    """The shape of a tensor, a Keras symbolic tensor or a NumPy array as a tuple (None if unknown)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        raise ValueError(f"expected a tensor. Received: {x!r}")
    return tuple(d if isinstance(d, int) else None for d in shape)  # a symbolic size counts as unknown


class ShapeChecker:
    """Checks that every argument has the named axes and that an axis has one size across arguments.

    Example:

    >>> check = ShapeChecker()
    >>> check("query", query, ("batch", "t_q", "dq"))
    >>> check("value", value, ("batch", "t_in", "dv"))
    >>> check("value_mask", value_mask, ("batch", "t_in"))   # its t_in must equal value's
    """

    def __init__(self):
        self.sizes = {}  # axis name -> (size, the argument it was first seen in)

    def __call__(self, name, x, axes):
        if x is None:
            return
        shape = static_shape(x)
        expected = f"({', '.join(axes)})"
        if len(shape) != len(axes):
            raise ValueError(f"{name} must have shape {expected}, rank {len(axes)}. Received: {name}.shape={shape}")
        for axis, size in zip(axes, shape):
            if size is None:
                continue
            seen = self.sizes.setdefault(axis, (size, name))
            if seen[0] != size:
                raise ValueError(
                    f"{name} must have shape {expected} with {axis} = {seen[0]}, as in {seen[1]}. "
                    f"Received: {name}.shape={shape}"
                )
