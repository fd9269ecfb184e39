"""The private TensorFlow and Keras APIs of `tfattn.accel.private` still mean what the fast tier needs."""

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
