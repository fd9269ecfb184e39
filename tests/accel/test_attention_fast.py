"""Tests for tfattn.accel.attention: every score of both layers equals the layer's own `call`,
outputs and gradients, for one decoder step and for several query steps, with padding.

Sizes: batch 2, source positions 5 (sentence 0 has two padding positions), query and key size 4.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import attention as fast_attention
from tfattn.layers.attention import ScoredAttention
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention

LAYERS = {
    "bahdanau": lambda: BahdanauAttention(3),
    "bahdanau-normalized": lambda: BahdanauAttention(3, normalize=True),
    "luong-dot": lambda: LuongAttention("dot"),
    "luong-general-scaled": lambda: LuongAttention("general", scale=True),
    "luong-concat": lambda: LuongAttention("concat", units=3),
    "luong-location": lambda: LuongAttention("location", max_length=4),  # 5 positions: one past max_length
}
MASK = np.array([[True, True, True, False, False], [True] * 5])


def inputs(t_q, seed=0):
    rng = np.random.default_rng(seed)
    query = tf.constant(rng.normal(size=(2, t_q, 4)), tf.float32)
    value = tf.constant(rng.normal(size=(2, 5, 4)), tf.float32)
    return query, value


def built(make, query, value):
    layer = make()
    layer(query, value, value_mask=MASK)
    if isinstance(layer, BahdanauAttention) and layer.normalize:
        layer.b.assign([0.3, -0.2, 0.1])  # a bias that is not zero
    if isinstance(layer, LuongAttention) and layer.scale:
        layer.gain.assign(1.7)
    return layer


def results(attend, layer, query, value):
    """Context, weights and the gradients of a weighted sum of both w.r.t. query, value and weights."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([query, value])
        context, weights = attend(layer, query, value)
        total = tf.reduce_sum(context * tf.range(1.0, 1.0 + context.shape[-1])) + tf.reduce_sum(weights ** 2)
    grads = tape.gradient(total, [query, value, *layer.trainable_variables])
    return [context, weights, *grads]


def reference(layer, query, value):
    return layer(query, value, value_mask=MASK)


def fast(layer, query, value):
    memory = {"values": value, "keys": fast_attention.prepare_keys(layer, value), "mask": MASK}
    return fast_attention.attend(layer, query, memory)


@pytest.mark.parametrize("t_q", [1, 3])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_fast_attention_equals_the_layer_call(name, t_q):
    query, value = inputs(t_q)
    layer = built(LAYERS[name], query, value)
    expected = results(reference, layer, query, value)
    got = results(fast, layer, query, value)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    weights = got[1].numpy()
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)  # padding: exactly zero weight
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert np.abs(got[2].numpy()).max() > 1e-3  # the query's gradient is not trivially zero


def test_another_attention_class_runs_its_own_call():
    class Uniform(ScoredAttention):
        def compute_scores(self, query, keys):
            return tf.zeros([tf.shape(query)[0], tf.shape(query)[1], tf.shape(keys)[1]])

    query, value = inputs(1)
    context, weights = fast(Uniform(), query, value)
    np.testing.assert_allclose(weights.numpy()[0, 0], [1 / 3, 1 / 3, 1 / 3, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(context.numpy()[1, 0], value.numpy()[1].mean(0), rtol=1e-5)
