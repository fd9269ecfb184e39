"""The attention zoo of `tfattn.layers.attention`: the cosine score, Luong's local attention (local-m,
local-p) and hard attention, against NumPy written from the papers (`attention_oracles`).

Luong, Pham, Manning 2015 (arXiv 1508.04025), section 3.2, eq. 9-10; Xu et al. 2015 (arXiv 1502.03044),
section 4.1. Sizes: batch 2, t_in 5, dq = dk 4 (the cosine and dot scores need them equal), dv 3,
hidden units 4. Sentence 0 has two padding positions (S = 3), sentence 1 none (S = 5).
"""

import operator

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.testing import TestCase

from attention_oracles import (np_aligned_positions, np_attention, np_cosine_scores, np_hard, np_local_attention,
                               np_scores, np_source_lengths, set_weights)
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import COSINE_GAIN, LuongAttention
from tfattn.layers.cell import AttentionCell
from tfattn.layers.decoder import Decoder

BATCH, T_IN, D, DV, UNITS = 2, 5, 4, 3, 4
MASK = np.array([[True, True, True, False, False], [True] * 5])
SCORES = ("dot", "general", "concat", "location", "cosine")


def fixed(shape, seed):
    """Small fixed weights with one decimal, e.g. 0.3 or -0.7."""
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).round(1).astype("float32")


def inputs(t_q, dtype="float32", seed=0):
    """query (batch, t_q, d), key (batch, t_in, d), value (batch, t_in, dv)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=s).astype(dtype) for s in ((BATCH, t_q, D), (BATCH, T_IN, D), (BATCH, T_IN, DV)))


def score_weights(score):
    """Every weight of a score by attribute path, in the shapes LuongAttention's docstring gives."""
    return {
        "dot": {},
        "general": {"w": fixed((D, D), 5)},
        "concat": {"w_query": fixed((D, UNITS), 6), "w_key": fixed((D, UNITS), 7), "v": fixed((UNITS,), 8)},
        "location": {"w": fixed((D, 7), 9)},  # max_length 7 > t_in
        "cosine": {"gain": np.array(3.0, "float32")},
    }[score]


LOCAL_P = {"w_p": fixed((D, UNITS), 11), "v_p": fixed((UNITS,), 12)}


def layer_with_weights(score, local=None, window=1, probability="soft", dtype=None, t_q=3):
    """A built LuongAttention with fixed weights, and those weights (path -> array)."""
    sizes = {"units": UNITS} if score == "concat" or local == "p" else {}  # (refused where it is unused)
    sizes.update({"window": window} if local else {})
    layer = LuongAttention(score, max_length=7, local=local, probability=probability, dtype=dtype, seed=1, **sizes)
    query, key, value = inputs(t_q)
    layer(query, value, key=key, value_mask=MASK)  # builds
    weights = {**score_weights(score), **(LOCAL_P if local == "p" else {})}
    set_weights(layer, weights) if probability == "soft" else _set_trainable(layer, weights)
    return layer, weights


def _set_trainable(layer, weights):
    """`set_weights`, for a hard layer (it also holds its draws' seed state, a non-trainable variable)."""
    for path, value in weights.items():
        operator.attrgetter(path)(layer).assign(value)
    assert len(layer.trainable_weights) == len(weights)


def oracle_scores(score, weights, query, key):
    if score == "cosine":
        return np_cosine_scores(weights["gain"], query, key)
    return np_scores(score, weights, query, key)


def oracle(score, weights, query, key, value, mask, local=None, window=1, positions=None):
    """Context and weights of the soft layer, from the papers, with the departures of local attention
    that `tfattn.layers.local` states (local-m's clip, the rounded centre: `np_local_attention`);
    `tests/layers/test_paper_departures.py` compares them with the paper's own rule."""
    scores = oracle_scores(score, weights, query, key)
    if local is None:
        return np_attention(scores, value, mask)
    lengths = np_source_lengths(mask, BATCH, T_IN)
    p = np_aligned_positions(local, query, lengths, positions, LOCAL_P["w_p"], LOCAL_P["v_p"])
    return np_local_attention(scores, value, mask, local, window, p, departures=True)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


# -- cosine -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t_q", [1, 3])
def test_cosine_matches_numpy(t_q):
    layer, weights = layer_with_weights("cosine", t_q=t_q)
    query, key, value = inputs(t_q)
    context, attention = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    want_context, want_attention = oracle("cosine", weights, query, key, value, MASK)
    np.testing.assert_allclose(attention, want_attention, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert (attention[0, :, 3:] == 0).all()


def test_cosine_by_hand():
    # q = (1, 0), keys (2, 0), (0, 3), (-1, 0): cosines 1, 0, -1; gain 10 -> softmax of (10, 0, -10).
    layer = LuongAttention("cosine")
    query, key = np.array([[[1.0, 0.0]]], "float32"), np.array([[[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]]], "float32")
    _, weights = layer(query, key)
    e = np.exp([10.0, 0.0, -10.0])
    np.testing.assert_allclose(to_numpy(weights)[0, 0], e / e.sum(), rtol=1e-5)


def test_cosine_has_one_gain_starting_at_ten_even_with_scale():
    for scale in (False, True):
        layer = LuongAttention("cosine", scale=scale)
        layer(*inputs(1)[:2])
        assert [w.path.split("/")[-1] for w in layer.weights] == ["gain"]
        assert float(to_numpy(layer.gain)) == COSINE_GAIN == 10.0


def test_cosine_zero_query_gives_uniform_weights_and_a_zero_key_scores_zero():
    layer, _ = layer_with_weights("cosine")
    query, key, value = inputs(3)
    query[0, 1] = 0.0  # sentence 0, step 1: a zero query
    key[1, 2] = 0.0  # sentence 1, position 2: a zero key
    with tf.GradientTape() as tape:
        q = tf.constant(query)
        tape.watch(q)
        context, weights = layer(q, value, key=key, value_mask=MASK)
        loss = tf.reduce_sum(context)
    weights = to_numpy(weights)
    assert np.isfinite(weights).all() and np.isfinite(to_numpy(context)).all()
    np.testing.assert_allclose(weights[0, 1], [1 / 3] * 3 + [0, 0], atol=1e-7)  # 3 real positions
    scores = np.log(weights[1])  # no padding in sentence 1: log-weights are scores minus a constant per row
    scores -= scores[:, 2:3]  # the zero key's score is 0
    want = np_cosine_scores(3.0, query, key)[1]
    np.testing.assert_allclose(scores, want, atol=1e-5)
    assert np.isfinite(to_numpy(tape.gradient(loss, q))).all()


def test_cosine_in_float16_with_large_vectors():
    # |x|^2 = 4 * 300^2 = 360,000 overflows float16 (max 65,504): the norms are taken in float32.
    layer, weights = layer_with_weights("cosine", dtype="float16")
    query, key, value = inputs(3)
    query, key = 300 * query, 300 * key
    context, attention = layer(query.astype("float16"), value.astype("float16"), key=key.astype("float16"),
                               value_mask=MASK)
    attention = to_numpy(attention)
    assert attention.dtype == "float16" and np.isfinite(attention).all() and np.isfinite(to_numpy(context)).all()
    _, want = oracle("cosine", weights, query, key, value, MASK)
    np.testing.assert_allclose(attention, want, atol=3e-3)


def test_cosine_needs_equal_query_and_key_sizes():
    with pytest.raises(ValueError, match="'cosine' score needs query and key of the same size"):
        LuongAttention("cosine")(np.ones((1, 1, 3)), np.ones((1, 2, 4)))


# -- local attention ----------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("local", ["m", "p"])
def test_local_matches_numpy(local, score, window):
    t_q = 6  # more steps than sentence 0's 3 words: local-m's p_t is clipped to S - 1 = 2
    layer, weights = layer_with_weights(score, local=local, window=window, t_q=t_q)
    query, key, value = inputs(t_q)
    context, attention = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    want_context, want_attention = oracle(score, weights, query, key, value, MASK, local, window)
    np.testing.assert_allclose(attention, want_attention, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert (attention[want_attention == 0] == 0).all(), "outside the window and on padding: exactly zero"
    assert (attention[0, :, 3:] == 0).all()
    assert (want_attention[1] == 0).any(), "the window leaves real positions out (sentence 1 has no padding)"


@pytest.mark.parametrize("shape", ["batch", "steps"])
def test_local_m_reads_query_positions(shape):
    layer, weights = layer_with_weights("general", local="m", window=1, t_q=2)
    query, key, value = inputs(2)
    positions = np.array([[4, 1], [3, 0]]) if shape == "batch" else np.array([4, 1])
    _, attention = layer(query, value, key=key, value_mask=MASK, query_positions=positions)
    _, want = oracle("general", weights, query, key, value, MASK, "m", 1, positions)
    np.testing.assert_allclose(to_numpy(attention), want, atol=1e-6)


def test_local_m_window_by_hand():
    # A zero query scores every position 0: uniform weights over the window's real positions.
    # S = 3 (sentence 0) and 5 (sentence 1), D = 1, steps t = 0, 2, 4:
    #   t=0: positions 0-1 -> 1/2 each;  t=2: 1-3 -> 1/3 (sentence 0: 1-2, 3 is padding -> 1/2);
    #   t=4: sentence 0 clips p_t to 2 -> 1-2 -> 1/2;  sentence 1: 3-4 -> 1/2.
    layer = LuongAttention("dot", local="m", window=1)
    _, weights = layer(np.zeros((2, 3, 4), "float32"), np.ones((2, 5, 4), "float32"), value_mask=MASK,
                       query_positions=np.array([0, 2, 4]))
    h, t = 1 / 2, 1 / 3
    want = [[[h, h, 0, 0, 0], [0, h, h, 0, 0], [0, h, h, 0, 0]],
            [[h, h, 0, 0, 0], [0, t, t, t, 0], [0, 0, 0, h, h]]]
    np.testing.assert_allclose(to_numpy(weights), want, atol=1e-7)


def test_local_p_window_and_gaussian_by_hand():
    # A zero query: p_t = S * sigmoid(0) = S / 2, and every score is 0. D = 1, sigma = 1/2.
    # Sentence 1, S = 5: p_t = 2.5 rounds half up to 3, window 2-4, softmax 1/3 each, times
    #   exp(-(s - 2.5)^2 / (2 * 1/4)): s=2, 3: exp(-0.5); s=4: exp(-4.5).
    # Sentence 0, S = 3: p_t = 1.5 rounds to 2, window 1-3, 3 is padding: 1/2 each at 1, 2, times exp(-0.5).
    layer = LuongAttention("dot", local="p", window=1)
    _, weights = layer(np.zeros((2, 1, 4), "float32"), np.ones((2, 5, 4), "float32"), value_mask=MASK)
    a, b = np.exp(-0.5), np.exp(-4.5)
    want = [[[0, a / 2, a / 2, 0, 0]], [[0, 0, a / 3, a / 3, b / 3]]]
    np.testing.assert_allclose(to_numpy(weights), want, rtol=1e-6)
    positions = layer.predict_positions(np.zeros((2, 1, 4), "float32"), value_mask=MASK)
    np.testing.assert_allclose(to_numpy(positions), [[1.5], [2.5]], rtol=1e-7)


@pytest.mark.parametrize("local", ["m", "p"])
def test_predict_positions_matches_numpy(local):
    layer, _ = layer_with_weights("general", local=local, t_q=6)
    query = inputs(6)[0]
    got = to_numpy(layer.predict_positions(query, value_mask=MASK))
    lengths = np_source_lengths(MASK, BATCH, T_IN)
    want = clipped(local, np_aligned_positions(local, query, lengths, None, LOCAL_P["w_p"], LOCAL_P["v_p"]), lengths)
    assert got.dtype == "float32" and got.shape == (BATCH, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Without a mask, S is source_length.
    no_mask = to_numpy(layer.predict_positions(query, source_length=T_IN))
    every = np.full(BATCH, 5.0)
    np.testing.assert_allclose(no_mask, clipped(local, np_aligned_positions(local, query, every, None, LOCAL_P["w_p"],
                                                                            LOCAL_P["v_p"]), every), rtol=1e-6)


def clipped(local, p, lengths):
    """local-m's p_t = t clipped to S - 1, the departure `tfattn.layers.local` states; local-p's as it is."""
    return np.minimum(p, lengths[:, None] - 1.0) if local == "m" else p


def test_local_without_a_mask_uses_every_position():
    layer, weights = layer_with_weights("dot", local="p", window=2, t_q=3)
    query, key, value = inputs(3)
    _, attention = layer(query, value, key=key)
    _, want = oracle("dot", weights, query, key, value, None, "p", 2)
    np.testing.assert_allclose(to_numpy(attention), want, atol=1e-6)


@pytest.mark.parametrize("local", ["m", "p"])
def test_local_in_float16(local):
    layer, weights = layer_with_weights("general", local=local, window=2, dtype="float16", t_q=4)
    query, key, value = inputs(4)
    context, attention = layer(query.astype("float16"), value.astype("float16"), key=key.astype("float16"),
                               value_mask=MASK)
    attention = to_numpy(attention)
    assert attention.dtype == "float16" and np.isfinite(attention).all()
    _, want = oracle("general", weights, query, key, value, MASK, local, 2)
    np.testing.assert_allclose(attention, want, atol=3e-3)
    assert (attention[want == 0] == 0).all()


def test_local_p_trains_its_position_weights():
    layer, _ = layer_with_weights("general", local="p", window=2)
    query, key, value = inputs(3)
    with tf.GradientTape() as tape:
        context, _ = layer(query, value, key=key, value_mask=MASK)
        loss = tf.reduce_sum(context * np.arange(DV, dtype="float32"))
    grads = tape.gradient(loss, [layer.w_p, layer.v_p])
    assert all(np.abs(to_numpy(g)).max() > 1e-4 for g in grads), "the Gaussian carries p_t's gradient"


def test_query_mask_zeroes_local_and_hard_rows():
    for kwargs in (dict(local="m"), dict(local="p"), dict(probability="hard")):
        layer = LuongAttention("dot", **kwargs)
        query, key, value = inputs(3)
        query_mask = np.array([[True, False, True], [True, True, False]])
        context, weights = map(to_numpy, layer(query, value, value_mask=MASK, query_mask=query_mask, key=key))
        assert (weights[~query_mask] == 0).all() and (context[~query_mask] == 0).all()


# -- hard attention -----------------------------------------------------------------------------------


@pytest.mark.parametrize("local", [None, "m", "p"])
@pytest.mark.parametrize("score", ["general", "cosine", "concat"])
def test_hard_at_inference_is_the_one_hot_argmax(score, local):
    layer, weights = layer_with_weights(score, local=local, window=1, probability="hard", t_q=4)
    query, key, value = inputs(4)
    context, attention = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    _, soft = oracle(score, weights, query, key, value, MASK, local, 1)
    want = np_hard(soft)
    np.testing.assert_array_equal(attention, want)  # exactly one-hot
    assert set(np.unique(attention)) <= {0.0, 1.0} and (attention.sum(-1) == 1).all()
    np.testing.assert_array_equal(context, np.einsum("bqk,bkd->bqd", want, value))  # the chosen value itself


def test_bahdanau_hard_at_inference_is_the_one_hot_argmax():
    layer = BahdanauAttention(UNITS, probability="hard")
    query, key, value = inputs(3)
    layer(query, value, key=key, value_mask=MASK)
    weights = {"query_dense.kernel": fixed((D, UNITS), 1), "key_dense.kernel": fixed((D, UNITS), 2),
               "v": fixed((UNITS,), 3)}
    _set_trainable(layer, weights)
    _, attention = layer(query, value, key=key, value_mask=MASK)
    _, soft = np_attention(np_scores("bahdanau", weights, query, key), value, MASK)
    np.testing.assert_array_equal(to_numpy(attention), np_hard(soft))


def test_hard_draws_follow_the_softmax():
    # 4000 draws of each of two rows at once (one batch): the frequencies of each position are within
    # 5 standard deviations (sqrt(p (1 - p) / n) <= 0.008) of the soft weights; padding is never drawn.
    n = 4000
    layer, weights = layer_with_weights("general", probability="hard", t_q=1)
    query, key, value = inputs(1)
    query[:] *= 0.5  # weights spread over the positions
    tile = lambda x: np.repeat(x, n, axis=0)  # noqa: E731  (2n, ...): rows 0..n-1 are sentence 0
    _, attention = layer(tile(query), tile(value), key=tile(key), value_mask=tile(MASK), training=True)
    attention = to_numpy(attention)[:, 0]  # (2n, t_in)
    assert set(np.unique(attention)) == {0.0, 1.0} and (attention.sum(-1) == 1).all()
    frequencies = np.stack([attention[:n].mean(0), attention[n:].mean(0)])  # (batch, t_in)
    _, soft = oracle("general", weights, query, key, value, MASK)
    soft = soft[:, 0]
    assert (frequencies[0, 3:] == 0).all(), "padding is never drawn"
    assert soft.min(where=MASK, initial=1) > 0.01, "every real position is likely enough to be seen"
    np.testing.assert_allclose(frequencies, soft, atol=5 * np.sqrt(0.25 / n))
    assert (np.argmax(attention[:n], -1) != np.argmax(soft[0])).any(), "training draws, not the argmax"


def test_hard_draws_are_seeded():
    query, key, _ = inputs(3)
    draws = []
    for _ in range(2):
        layer = LuongAttention("dot", probability="hard", seed=7)
        draws.append([to_numpy(layer(query, key, training=True)[1]) for _ in range(3)])
    for first, second in zip(*draws):
        np.testing.assert_array_equal(first, second)  # the same seed, the same draws
    assert any(not np.array_equal(draws[0][0], d) for d in draws[0][1:]), "each call draws anew"


def test_hard_never_draws_padding_and_a_fully_masked_row_stays_zero():
    layer = LuongAttention("dot", probability="hard", seed=3)
    query, value, _ = inputs(3)
    query = 5 * query
    mask = np.array([[False] * 5, [False, True, False, True, False]])
    for training in (False, True):
        for _ in range(20):
            context, weights = map(to_numpy, layer(query, value, value_mask=mask, training=training))
            assert (weights[0] == 0).all() and (context[0] == 0).all()
            assert (weights[1][:, ~mask[1]] == 0).all() and (weights[1].sum(-1) == 1).all()


def hard_and_soft_gradients(local, loss_of):
    """d loss_of(context) / d (query, score weights) of the hard layer (straight-through, at its
    argmax) and of the soft layer with the same weights, and the hard layer's context."""
    query, key, value = inputs(3)
    grads = {}
    for probability in ("soft", "hard"):
        layer, _ = layer_with_weights("general", local=local, window=2, probability=probability)
        q = tf.Variable(query)
        with tf.GradientTape() as tape:
            context, weights = layer(q, value, key=key, value_mask=MASK)
            loss = loss_of(context)
        grads[probability] = [to_numpy(g) for g in tape.gradient(loss, [q, *layer.trainable_weights])]
        if probability == "hard":
            assert set(np.unique(to_numpy(weights))) == {0.0, 1.0}
            hard_context = context
    return grads["soft"], grads["hard"], hard_context


@pytest.mark.parametrize("local", [None, "p"])
def test_straight_through_equals_the_soft_gradient_for_a_loss_linear_in_the_context(local):
    # loss = sum(context * R) is linear in the context: dL/dcontext = R whatever the weights, so the
    # straight-through gradient through the scores (query and score weights) equals the soft layer's.
    # This holds for such a loss only (next test). Through `value` directly it differs (one-hot vs soft).
    r = np.random.default_rng(5).normal(size=(BATCH, 3, DV)).astype("float32")
    soft, hard, _ = hard_and_soft_gradients(local, lambda context: tf.reduce_sum(context * r))
    for s, h in zip(soft, hard):
        assert np.abs(s).max() > 1e-4
        np.testing.assert_allclose(h, s, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("local", [None, "p"])
def test_straight_through_is_biased_for_a_loss_not_linear_in_the_context(local):
    # loss = sum(tanh(context)^2): straight-through takes dL/dcontext at the one-hot context c_hard and
    # passes it through the soft weights' Jacobian: J_soft^T dL/dc(c_hard). The soft gradient is
    # J_soft^T dL/dc(c_soft). They differ wherever dL/dc does, so straight-through is biased here: the
    # soft gradient is computed by autodiff of the soft layer, and the straight-through one equals the
    # soft layer's backward pass fed with dL/dc at c_hard, 2 tanh(c_hard) (1 - tanh(c_hard)^2).
    def loss_of(context):
        return tf.reduce_sum(tf.tanh(context) ** 2)

    soft, hard, c_hard = hard_and_soft_gradients(local, loss_of)
    t = tf.tanh(c_hard)
    at_hard = 2 * t * (1 - t * t)  # (batch, t_q, dv): dL/dc at the hard context
    linear, _, _ = hard_and_soft_gradients(local, lambda context: tf.reduce_sum(context * tf.stop_gradient(at_hard)))
    for s, h, j in zip(soft, hard, linear):
        np.testing.assert_allclose(h, j, rtol=1e-5, atol=1e-6)
    gap = np.abs(hard[0] - soft[0]).max()  # d loss / d query
    assert gap > 0.2 * np.abs(soft[0]).max() > 0, (gap, np.abs(soft[0]).max())


def test_the_soft_gradient_matches_finite_differences():
    # The soft gradient the straight-through one is compared with above, against central differences.
    layer, _ = layer_with_weights("general", local="p", window=2)
    query, key, value = (x.astype("float64") for x in inputs(3))
    r = np.random.default_rng(5).normal(size=(BATCH, 3, DV))

    def loss(q):
        return float(np.sum(to_numpy(layer(q.astype("float32"), value.astype("float32"), key=key.astype("float32"),
                                           value_mask=MASK)[0]) * r))

    q = tf.Variable(query.astype("float32"))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(layer(q, value.astype("float32"), key=key.astype("float32"), value_mask=MASK)[0] * r)
    grad = to_numpy(tape.gradient(total, q))
    eps = 1e-2
    for index in [(0, 0, 0), (0, 2, 3), (1, 1, 1), (1, 2, 2)]:
        bump = np.zeros_like(query)
        bump[index] = eps
        numeric = (loss(query + bump) - loss(query - bump)) / (2 * eps)
        assert grad[index] == pytest.approx(numeric, rel=2e-2, abs=2e-3), index


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(local="x"), "local='x'"),
    (dict(local="global"), "local='global'"),
    (dict(local="m", window=0), "window=0"),
    (dict(local="p", window=-2), "window=-2"),
    (dict(local="p", window=2.5), "window=2.5"),
    (dict(probability="sparse"), "probability='sparse'"),
    (dict(probability="hard", dropout=0.1), "dropout=0.1"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LuongAttention(**kwargs)


def test_bahdanau_hard_is_accepted_and_a_bad_probability_refused():
    assert BahdanauAttention(4, probability="hard").probability == "hard"
    with pytest.raises(ValueError, match="probability='soft '"):
        BahdanauAttention(4, probability="soft ")


def test_local_with_the_bahdanau_style_decoder_is_refused():
    with pytest.raises(ValueError, match="attention='bahdanau'.*local='p'"):
        Decoder(13, 4, 6, attention="bahdanau", attention_layer=LuongAttention(local="p"))
    Decoder(13, 4, 6, attention="bahdanau", attention_layer=LuongAttention(probability="hard"))  # hard is fine


def test_attention_cell_refuses_local_m_and_runs_local_p_and_hard():
    with pytest.raises(ValueError, match="local='m'"):
        AttentionCell(keras.layers.GRUCell(4), LuongAttention("dot", local="m"))
    memory = inputs(1)[1]
    for layer in (LuongAttention("dot", local="p", window=1), LuongAttention("dot", probability="hard")):
        cell = AttentionCell(keras.layers.GRUCell(4), layer, alignment_history=True, memory_length=T_IN)
        rnn = keras.layers.RNN(cell, return_sequences=True)
        outputs = rnn(np.ones((2, 3, 2), "float32"), initial_state=cell.initial_state(memory, MASK))
        _, alignments = map(to_numpy, cell.split_outputs(outputs))
        assert (alignments[0, :, 3:] == 0).all() and np.isfinite(alignments).all()
        if layer.probability == "hard":
            assert set(np.unique(alignments)) == {0.0, 1.0} and (alignments.sum(-1) == 1).all()
        else:
            assert ((alignments > 0).sum(-1) <= 3).all()  # 2D + 1 positions at most


def test_predict_positions_errors():
    with pytest.raises(ValueError, match="local=None"):
        LuongAttention().predict_positions(np.ones((1, 2, 4)), value_mask=MASK[:1])
    layer, _ = layer_with_weights("dot", local="p")
    with pytest.raises(ValueError, match="source_length=None"):
        layer.predict_positions(np.ones((1, 2, 4), "float32"))
    with pytest.raises(ValueError, match=r"query_positions must have shape \(batch, t_q\)"):
        LuongAttention("dot", local="m")(np.ones((2, 3, 4)), np.ones((2, 5, 4)), query_positions=np.zeros((2, 4)))


# -- Keras: config, saving, functional models, Keras' own harness ------------------------------------

ZOO = {
    "cosine": dict(score="cosine"),
    "local-m-general": dict(score="general", local="m", window=2),
    "local-p-concat": dict(score="concat", local="p", window=3, units=5),
    "hard-dot": dict(score="dot", probability="hard", seed=4),
    "hard-local-p-cosine": dict(score="cosine", local="p", probability="hard"),
}


@pytest.mark.parametrize("name", ZOO)
def test_get_config_round_trip(name):
    layer = LuongAttention(**ZOO[name])
    config = layer.get_config()
    assert {k: config[k] for k in ZOO[name]} == ZOO[name]
    assert config["probability"] == ZOO[name].get("probability", "soft")
    again = LuongAttention.from_config(config)
    assert again.get_config() == config


@pytest.mark.parametrize("name", ZOO)
def test_keras_file_round_trip_in_a_functional_model(name, tmp_path):
    query_in, value_in = keras.Input((None, D)), keras.Input((None, D))
    mask_in = keras.Input((None,), dtype="bool")
    context, weights = LuongAttention(**ZOO[name])(query_in, value_in, value_mask=mask_in)
    model = keras.Model([query_in, value_in, mask_in], [context, weights])
    query, _, value = inputs(3)
    value = inputs(3)[1]  # dv = d, so that the dot and cosine scores apply
    got = [to_numpy(x) for x in model([query, value, MASK])]
    assert (got[1][0, :, 3:] == 0).all()
    path = str(tmp_path / "zoo.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    for a, b in zip(got, loaded([query, value, MASK])):
        np.testing.assert_allclose(to_numpy(b), a, atol=1e-6)


class KerasHarness(TestCase):
    pass


@pytest.mark.parametrize("name", ZOO)
def test_keras_run_layer_test(name):
    query, key, _ = inputs(3)
    harness = KerasHarness()
    harness.run_layer_test(
        LuongAttention, init_kwargs=ZOO[name], input_data=(query, key),
        expected_output_shape=((BATCH, 3, D), (BATCH, 3, T_IN)),
        expected_num_seed_generators=1 if ZOO[name].get("probability") == "hard" else 0,
        supports_masking=True, run_training_check=True, run_mixed_precision_check=True)
