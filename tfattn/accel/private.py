"""The private TensorFlow and Keras APIs tfattn needs (the fast tier, and the distributed step), in one place.

- `adam_slots`: Keras 3's `Adam` keeps each variable's first and second moments in the private lists
  `_momentums` and `_velocities`, indexed by `_get_variable_index`; `FusedAdam` updates them in place.
- `without_gradient_sum`: under a `tf.distribute` strategy, Keras 3's TensorFlow optimizer sums the
  replicas' gradients in `apply_gradients` by its private method `_all_reduce_sum_gradients`; the
  distributed step (`tfattn.training.distributed`) sums them before, to clip the sum, and turns
  that second sum off.
- `seed_states`: a Keras `SeedGenerator` keeps `[seed, draws so far]` in a variable that Keras names
  `seed_generator_state`; the distributed step shifts the seed on each replica (its own dropout).
- `noinline`: the function attribute `_noinline`, which TensorFlow's graph optimizer honours by
  keeping a function call instead of inlining its body (`branch.cond`).
- `cluster_wait`: `MultiWorkerMirroredStrategy` waits for every worker when it is made, for as long
  as the class attribute `_check_health_initial_timeout` of its private `CollectiveAllReduceExtended`
  says (0: for ever); the run bounds it by `--worker-timeout`.

`tests/accel/test_private.py` checks each against what TensorFlow and Keras do today, so a release
that changes one fails there, by name, rather than somewhere inside a training step or an export.
"""

import contextlib
import functools

import tensorflow as tf


def adam_slots(optimizer, variable):
    """`(m, v)`: the first and second moment variables a built Keras `Adam` keeps for `variable`."""
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


@functools.cache
def without_gradient_sum(optimizer_class):
    """A subclass of the Keras optimizer class `optimizer_class` that, in a replica of a
    `tf.distribute` strategy, applies the gradients it is given as they are, where Keras' own sums
    them over the replicas first (an all-reduce): for gradients that are the sum already."""

    class WithoutGradientSum(optimizer_class):
        def _all_reduce_sum_gradients(self, grads_and_vars):
            return list(grads_and_vars)

    # Keras names an optimizer, and so its variables, after its class: the same names as Keras' own.
    WithoutGradientSum.__name__ = WithoutGradientSum.__qualname__ = optimizer_class.__name__
    return WithoutGradientSum


def seed_states(layer):
    """The state variables, `[seed, draws so far]`, of the Keras seed generators of `layer` and of
    the layers in it (its dropout)."""
    return [v for v in layer.variables if v.path.split("/")[-1] == "seed_generator_state"]


def noinline(fn):
    """`fn` as a `tf.function` whose calls TensorFlow keeps as calls (never inlined into the caller)."""
    return tf.function(fn, autograph=False, experimental_attributes={"_noinline": True})


@contextlib.contextmanager
def cluster_wait(seconds):
    """While the block runs, a `MultiWorkerMirroredStrategy` made in it waits at most `seconds` for
    the other workers (then raises `RuntimeError`), instead of for ever."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective

    extended = collective.CollectiveAllReduceExtended
    before = extended._check_health_initial_timeout
    extended._check_health_initial_timeout = max(1, int(seconds))
    try:
        yield
    finally:
        extended._check_health_initial_timeout = before
