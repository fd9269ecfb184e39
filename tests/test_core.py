"""Tests for tfattn.core: the masked loss's label smoothing, by hand and against Keras' own
`CategoricalCrossentropy(label_smoothing=...)`, on both tiers (`tfattn.accel.losses` is the fast one)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import losses as fast_losses
from tfattn.core import check_label_smoothing, masked_loss, smoothing_targets

LOSSES = {"reference": masked_loss, "fast": fast_losses.masked_loss}


def test_the_uniform_share_leaves_out_padding_and_start():
    # Vocab 6: ids 0 (padding) and 2 ([START]) are never labels; the other 4 get 1/4 each.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(smoothing_targets(6)), [0, 0.25, 0, 0.25, 0.25, 0.25])


@pytest.mark.parametrize("tier", LOSSES)
def test_smoothed_loss_and_gradient_by_hand(tier):
    # Vocab 4, logits (0, 0, 0, ln 3): softmax (1/6, 1/6, 1/6, 1/2). Label 3, e = 0.1; the share goes
    # to ids 1 and 3 (1/2 each). Loss = 0.9 (-ln 1/2) + 0.1 (ln 6 + ln 2) / 2; the gradient is
    # softmax - 0.9 one_hot(3) - 0.1 (0, 1/2, 0, 1/2) = (1/6, 1/6 - 0.05, 1/6, 1/2 - 0.9 - 0.05).
    # The second position is padding: no loss, no gradient.
    logits = tf.Variable([[[0.0, 0.0, 0.0, math.log(3.0)], [5.0, 1.0, 2.0, 3.0]]])
    with tf.GradientTape() as tape:
        loss = LOSSES[tier](tf.constant([[3, 0]]), logits, label_smoothing=0.1)
    want = 0.9 * math.log(2.0) + 0.1 * (math.log(6.0) + math.log(2.0)) / 2
    assert float(loss) == pytest.approx(want, rel=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(),
                               [[[1 / 6, 1 / 6 - 0.05, 1 / 6, 0.5 - 0.95], [0, 0, 0, 0]]], atol=1e-6)


@pytest.mark.parametrize("tier", LOSSES)
@pytest.mark.parametrize("epsilon", [0.1, 0.3])
def test_smoothed_loss_equals_keras_categorical_crossentropy(tier, epsilon):
    """Keras spreads `e` over every class. With the logits of padding and [START] so low that their
    probability is 0, the softmax over the whole vocabulary is the softmax over the other ids, and
    Keras on those ids alone computes the same smoothed loss and gradient."""
    rng = np.random.default_rng(0)
    vocab = 9
    allowed = np.array([k for k in range(vocab) if k not in (0, 2)])
    logits = rng.normal(size=(3, 5, vocab)).astype("float32") * 3
    logits[..., [0, 2]] = -1e4  # exp underflows to exactly 0 in float32
    labels = rng.choice(allowed, size=(3, 5))
    labels[0, 3:] = 0  # padding
    mask = labels != 0
    variable = tf.Variable(logits)
    with tf.GradientTape(persistent=True) as tape:
        ours = LOSSES[tier](tf.constant(labels), variable, label_smoothing=epsilon)
        keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=epsilon, reduction=None)
        one_hot = (labels[..., None] == allowed).astype("float32")  # (3, 5, 7): the label among the allowed ids
        per_token = keras_loss(one_hot, tf.gather(variable, allowed, axis=-1))  # (3, 5)
        theirs = tf.reduce_sum(per_token * mask) / mask.sum()
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5)
    got, want = tape.gradient(ours, variable).numpy(), tape.gradient(theirs, variable).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.abs(want).max() > 0.01


@pytest.mark.parametrize("tier", LOSSES)
def test_no_smoothing_is_the_negative_log_likelihood(tier):
    logits = tf.constant(np.random.default_rng(1).normal(size=(2, 3, 7)), tf.float32)
    labels = tf.constant([[1, 4, 0], [6, 3, 5]])
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits).numpy()
    want = nll[labels.numpy() != 0].mean()
    assert float(LOSSES[tier](labels, logits)) == pytest.approx(want, rel=1e-6)
    assert abs(float(LOSSES[tier](labels, logits, label_smoothing=0.1)) - want) > 1e-3  # not ignored


@pytest.mark.parametrize("value", [-0.1, 1.0, 2, float("nan"), "0.1", True])
def test_label_smoothing_outside_0_1_is_refused(value):
    with pytest.raises(ValueError, match="label_smoothing must be a float in \\[0, 1\\)"):
        check_label_smoothing(value)


def test_a_vocabulary_with_no_label_left_is_refused():
    with pytest.raises(ValueError, match="Received: vocab=2"):
        smoothing_targets(2)
