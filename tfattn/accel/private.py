"""The private TensorFlow and Keras APIs the fast tier needs, in one place.

- `adam_slots`: Keras 3's `Adam` keeps each variable's first and second moments in the private lists
  `_momentums` and `_velocities`, indexed by `_get_variable_index`; `FusedAdam` updates them in place.
- `noinline`: the function attribute `_noinline`, which TensorFlow's graph optimizer honours by
  keeping a function call instead of inlining its body (`branch.cond`).

`tests/accel/test_private.py` checks each against what TensorFlow and Keras do today, so a release
that changes one fails there, by name, rather than somewhere inside a training step or an export.
"""

import tensorflow as tf


def adam_slots(optimizer, variable):
    """`(m, v)`: the first and second moment variables a built Keras `Adam` keeps for `variable`."""
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def noinline(fn):
    """`fn` as a `tf.function` whose calls TensorFlow keeps as calls (never inlined into the caller)."""
    return tf.function(fn, experimental_attributes={"_noinline": True})
