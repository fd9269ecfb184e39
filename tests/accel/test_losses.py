"""Tests for tfattn.accel.losses: the cross-entropy's written-out gradient, by hand and against TensorFlow.

That the fast masked loss equals `tfattn.model.masked_loss` (values and gradients) is in `test_tiers.py`.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel.losses import cross_entropy, masked_accuracy, masked_loss
from tfattn.model import masked_accuracy as reference_accuracy


def test_cross_entropy_by_hand():
    # logits (0, ln 3): softmax (1/4, 3/4). Label 1: loss ln(4/3), gradient (1/4, -1/4).
    logits = tf.Variable([[0.0, math.log(3.0)]])
    with tf.GradientTape() as tape:
        loss = cross_entropy(tf.constant([1]), logits)
    np.testing.assert_allclose(loss.numpy(), [math.log(4 / 3)], rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), [[0.25, -0.25]], rtol=1e-6)


@pytest.mark.parametrize("labels_dtype", ["int32", "int64"])
def test_cross_entropy_equals_tensorflow_values_and_gradients(labels_dtype):
    rng = np.random.default_rng(3)
    logits = tf.Variable(rng.normal(size=(3, 4, 7)).astype("float32") * 5)
    labels = tf.constant(rng.integers(0, 7, size=(3, 4)), labels_dtype)
    weights = tf.constant(rng.uniform(size=(3, 4)), tf.float32)  # an upstream gradient that is not all ones
    results = []
    for loss_fn in (cross_entropy, lambda y, x: tf.nn.sparse_softmax_cross_entropy_with_logits(y, x)):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, logits)
            total = tf.reduce_sum(loss * weights)
        results.append((loss.numpy(), tape.gradient(total, logits).numpy()))
    (ours, our_grad), (theirs, their_grad) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    np.testing.assert_allclose(our_grad, their_grad, atol=1e-6)
    assert np.abs(our_grad).max() > 0.1


def test_cross_entropy_of_large_logits_is_finite():
    # Without the max shift, exp(1000) overflows.
    logits = tf.constant([[1000.0, 0.0], [-1000.0, 1000.0]])
    np.testing.assert_allclose(cross_entropy(tf.constant([0, 0]), logits).numpy(), [0.0, 2000.0])


def test_masked_loss_by_hand_leaves_padding_out():
    # Vocab 2, logits (0, ln 3) everywhere: softmax (1/4, 3/4). Labels [[1, 0, 0]] (one real token,
    # two padding positions): loss -ln(3/4) = ln(4/3), whatever the padding positions' losses (ln 4).
    logits = tf.Variable(np.tile(np.array([0.0, math.log(3.0)], "float32"), (1, 3, 1)))  # (1, 3, 2)
    with tf.GradientTape() as tape:
        loss = masked_loss(tf.constant([[1, 0, 0]]), logits)
    assert float(loss) == pytest.approx(math.log(4 / 3), rel=1e-6)
    # The gradient is the real position's softmax - one_hot, (1/4, -1/4); padding gets none.
    np.testing.assert_allclose(tape.gradient(loss, logits), [[[0.25, -0.25], [0, 0], [0, 0]]], rtol=1e-6)
    assert float(masked_loss(tf.constant([[0, 0, 0]]), logits)) == 0.0  # no real token: 0, not NaN


def test_masked_accuracy_by_hand_and_as_the_reference():
    # Argmaxes (1, 0, 2) against labels (1, 2, 0=padding): one right of two real tokens.
    logits = tf.constant([[[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]]])
    labels = tf.constant([[1, 2, 0]])
    assert float(masked_accuracy(labels, logits)) == 0.5
    assert float(reference_accuracy(labels, logits)) == 0.5
    assert float(masked_accuracy(tf.constant([[0, 0, 0]]), logits)) == 0.0  # no real token: 0, not NaN
