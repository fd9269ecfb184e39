"""The private TensorFlow and Keras APIs of `tfattn.accel.private` still mean what the fast tier needs."""

import inspect

import keras
import numpy as np
import tensorflow as tf

from tfattn.accel import private


def test_adam_slots_are_the_moments_keras_adam_updates():
    variable = keras.Variable(np.array([1.0, -2.0, 3.0], np.float32))
    optimizer = keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.99)
    gradient = np.array([0.5, -1.0, 2.0], np.float32)
    optimizer.apply_gradients([(tf.constant(gradient), variable)])
    m, v = private.adam_slots(optimizer, variable)
    np.testing.assert_allclose(m.numpy(), 0.1 * gradient, rtol=1e-6)  # (1 - beta_1) g
    np.testing.assert_allclose(v.numpy(), 0.01 * gradient ** 2, rtol=1e-6)  # (1 - beta_2) g^2


def test_noinline_functions_stay_calls_in_the_caller_graph():
    inner = private.noinline(lambda x: x * 3.0)
    outer = tf.function(lambda x: inner(x) + 1.0)
    graph = outer.get_concrete_function(tf.TensorSpec([], tf.float32)).graph.as_graph_def()
    assert [f.attr["_noinline"].b for f in graph.library.function] == [True]
    assert any(n.op in ("PartitionedCall", "StatefulPartitionedCall") for n in graph.node)
    assert float(outer(tf.constant(2.0))) == 7.0


def test_keras_passes_the_gradients_through_the_method_without_gradient_sum_replaces():
    """Keras' TensorFlow optimizer sends the gradients through `_all_reduce_sum_gradients` before its
    update (outside a strategy that sum is over one replica); the subclass keeps Keras' name."""
    seen = []

    class Spy(private.without_gradient_sum(keras.optimizers.Adam)):
        def _all_reduce_sum_gradients(self, grads_and_vars):
            seen.append([float(g.numpy()[0]) for g, _ in grads_and_vars])
            return super()._all_reduce_sum_gradients(grads_and_vars)

    variable = keras.Variable(np.array([1.0], np.float32))
    optimizer = Spy(learning_rate=0.1)
    optimizer.apply_gradients([(tf.constant([0.5]), variable)])
    assert seen == [[0.5]]
    np.testing.assert_allclose(variable.numpy(), [0.9], rtol=1e-5)  # Adam's first step: the rate, against the sign
    assert private.without_gradient_sum(keras.optimizers.Adam).__name__ == "Adam"  # Keras names optimizers by it


def test_seed_states_are_the_seed_and_draw_count_of_a_layers_seed_generators():
    dropout = keras.layers.Dropout(0.5, seed=5)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), dropout])
    states = private.seed_states(model)
    assert len(states) == 1 and states[0] is dropout.seed_generator.state
    assert states[0].numpy().tolist() == [5, 0]  # [seed, draws so far]
    model(np.ones((1, 3), np.float32), training=True)
    assert states[0].numpy().tolist() == [5, 1]


def test_cluster_wait_bounds_the_wait_of_a_new_multiworker_strategy():
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective

    extended = collective.CollectiveAllReduceExtended
    assert extended._check_health_initial_timeout == 0  # TensorFlow's default: no bound
    with private.cluster_wait(7.5):
        assert extended._check_health_initial_timeout == 7
    assert extended._check_health_initial_timeout == 0
    # ... and the strategy's barrier reads it, as the timeout of its first all-reduce.
    source = inspect.getsource(extended._start_check_health_thread)
    assert "timeout_seconds=self._check_health_initial_timeout" in source
