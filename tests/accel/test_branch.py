"""tfattn.accel.branch.cond: `tf.cond`'s results, each branch one call of a function that is not inlined."""

import numpy as np
import tensorflow as tf

from tfattn.accel import branch


def test_gives_tf_conds_result_inside_a_function_and_eagerly():
    counter = tf.Variable(3.0)

    def loop_sum(x):  # a while loop that reads a variable, as the branches of the decoders do
        return tf.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + x * counter), (0, 0.0))[1]

    def both(x):
        return branch.cond(x > 0, lambda: loop_sum(x), lambda: x - 1.0)

    fn = tf.function(both)
    assert float(fn(tf.constant(2.0))) == 24.0  # 4 steps of 2 * 3
    assert float(fn(tf.constant(-2.0))) == -3.0
    assert float(both(tf.constant(2.0))) == 24.0  # eagerly: tf.cond itself
    counter.assign(1.0)
    assert float(fn(tf.constant(2.0))) == 8.0  # the variable is read at run time, not traced in


def test_each_branch_is_one_call_of_a_function_that_is_not_inlined():
    fn = tf.function(lambda x: branch.cond(x > 0, lambda: x * 2.0, lambda: x + 1.0))
    library = fn.get_concrete_function(tf.TensorSpec([], tf.float32)).graph.as_graph_def().library
    not_inlined = [f for f in library.function if f.attr["_noinline"].b]
    assert len(not_inlined) == 2  # the two bodies
    bodies = {f.signature.name for f in not_inlined}
    branches = [f for f in library.function if f.signature.name.startswith("cond_")]
    assert len(branches) == 2
    for f in branches:  # a branch is the call of one body, nothing else but its outputs' identities
        calls = [n for n in f.node_def if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
        assert len(calls) == 1 and calls[0].attr["f"].func.name in bodies
        assert {n.op for n in f.node_def} <= {"PartitionedCall", "StatefulPartitionedCall", "Identity", "NoOp"}


def test_nested_structures_and_shapes_come_back():
    fn = tf.function(lambda x: branch.cond(tf.shape(x)[0] == 1, lambda: {"a": x, "b": tf.shape(x)},
                                           lambda: {"a": x * 0.0, "b": tf.shape(x) + 1}))
    one, two = fn(tf.ones([1, 3])), fn(tf.ones([2, 3]))
    np.testing.assert_array_equal(one["a"], np.ones([1, 3]))
    assert one["b"].numpy().tolist() == [1, 3] and two["b"].numpy().tolist() == [3, 4]
    np.testing.assert_array_equal(two["a"], np.zeros([2, 3]))
