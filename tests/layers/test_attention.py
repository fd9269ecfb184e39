"""Tests for tfattn.layers.attention: every score against NumPy, masking, errors and `.keras` saving.

Sizes are tiny and named after the axes that the package's docstrings and shape comments use: batch 2,
t_in 4, query size dq 3, key size dk 2 (so that `key=` and `value=` really differ), value size dv 5,
hidden size units 4.
"""

import math

import keras
import numpy as np
import pytest

from attention_oracles import np_attention, np_scores, set_weights
from tfattn.layers.attention import masked_softmax
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.options import SCORES

BATCH, T_IN, DQ, DK, DV, UNITS = 2, 4, 3, 2, 5, 4
# Sentence 0 has one padding position (the last); sentence 1 has none.
MASK = np.array([[True, True, True, False], [True, True, True, True]])

# How far a row of weights may sum from 1. Each weight exp_i / sum is rounded about five times (the exp,
# three additions over t_in = 4, the division), each by at most the unit roundoff u (2^-11 in float16,
# 2^-24 in float32), so its relative error is at most 5u and the row's sum is off by at most 5u.
ROW_SUM_ATOL = {"float32": 1e-6, "float16": 5 * 2.0**-11}

# Every variant the layers offer; "location" covers t_in < max_length (the weights are cropped),
# "location_short" covers t_in > max_length (positions past max_length get zero weight).
VARIANTS = ("bahdanau", "bahdanau_normalized", "dot", "general", "concat", "location", "location_short")
# (variant, scale): Bahdanau has no scale; every Luong score is checked with and without it.
CASES = [("bahdanau", False), ("bahdanau_normalized", False)] + [
    (variant, scale) for variant in VARIANTS[2:] for scale in (False, True)
]


def make_layer(variant, scale=False, dtype=None):
    if variant.startswith("bahdanau"):
        return BahdanauAttention(UNITS, normalize=variant == "bahdanau_normalized", dtype=dtype)
    if variant == "concat":
        return LuongAttention("concat", scale=scale, units=UNITS, dtype=dtype)
    if variant.startswith("location"):
        max_length = 2 if variant == "location_short" else 6
        return LuongAttention("location", scale=scale, max_length=max_length, dtype=dtype)
    return LuongAttention(variant, scale=scale, dtype=dtype)


def key_size(variant):
    return DQ if variant == "dot" else DK  # the dot score needs dk == dq


def make_inputs(t_q, dk=DK, dtype="float32", seed=0):
    """query (batch, t_q, dq), key (batch, t_in, dk), value (batch, t_in, dv)."""
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(BATCH, t_q, DQ)).astype(dtype)
    key = rng.normal(size=(BATCH, T_IN, dk)).astype(dtype)
    value = rng.normal(size=(BATCH, T_IN, DV)).astype(dtype)
    return query, key, value


def fixed(shape, seed):
    """Small fixed weights with one decimal, e.g. 0.3 or -0.7."""
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).round(1).astype("float32")


def fixed_weights(variant, scale):
    """The weights to set, by attribute path on the layer, with the shapes the layer must use."""
    dk = key_size(variant)
    if variant.startswith("bahdanau"):
        weights = {"query_dense.kernel": fixed((DQ, UNITS), 1), "key_dense.kernel": fixed((dk, UNITS), 2),
                   "v": fixed((UNITS,), 3)}
        if variant == "bahdanau_normalized":
            weights.update(g=np.array(2.0, "float32"), b=fixed((UNITS,), 4))
    elif variant == "dot":
        weights = {}
    elif variant == "general":
        weights = {"w": fixed((dk, DQ), 5)}  # (dk, dq): prepare_keys computes k @ w
    elif variant == "concat":
        weights = {"w_query": fixed((DQ, UNITS), 6), "w_key": fixed((dk, UNITS), 7), "v": fixed((UNITS,), 8)}
    else:
        max_length = 2 if variant == "location_short" else 6
        weights = {"w": fixed((DQ, max_length), 9)}  # (dq, max_length)
    if scale:
        weights["gain"] = np.array(2.0, "float32")
    return weights


# -- the NumPy reference ----------------------------------------------------------------------------


# -- scores -----------------------------------------------------------------------------------------


def test_dot_score_by_hand():
    # q = (ln 2, ln 3); keys (1, 0), (0, 1), (0, 0) -> scores ln 2, ln 3, 0 -> exp 2, 3, 1
    # -> weights 2/6, 3/6, 1/6. Values (6, 0), (0, 6), (6, 6) -> context (2 + 1, 3 + 1) = (3, 4).
    query = np.array([[[math.log(2), math.log(3)]]], "float32")  # (1, 1, 2)
    key = np.array([[[1, 0], [0, 1], [0, 0]]], "float32")  # (1, 3, 2)
    value = np.array([[[6, 0], [0, 6], [6, 6]]], "float32")  # (1, 3, 2)
    layer = LuongAttention("dot")
    context, weights = layer(query, value, key=key)
    np.testing.assert_allclose(weights, [[[1 / 3, 1 / 2, 1 / 6]]], atol=1e-6)
    np.testing.assert_allclose(context, [[[3, 4]]], atol=1e-5)
    # Masking the third position: exp 2, 3 -> 2/5, 3/5, 0; context (12/5, 18/5).
    context, weights = layer(query, value, key=key, value_mask=np.array([[True, True, False]]))
    np.testing.assert_allclose(weights, [[[2 / 5, 3 / 5, 0]]], atol=1e-6)
    np.testing.assert_allclose(context, [[[12 / 5, 18 / 5]]], atol=1e-5)
    # scale=True with gain 2: scores 2 ln 2, 2 ln 3, 0 -> exp 4, 9, 1 -> 4/14, 9/14, 1/14.
    scaled = LuongAttention("dot", scale=True)
    scaled(query, value, key=key)
    scaled.gain.assign(2.0)
    _, weights = scaled(query, value, key=key)
    np.testing.assert_allclose(weights, [[[4 / 14, 9 / 14, 1 / 14]]], atol=1e-6)


def test_scaled_dot_and_general_start_at_one_over_sqrt_query_size():
    # dq = 4: the gain starts at 1/2. Query (2 ln 2, 2 ln 3, 0, 0) against keys e1, e2, 0 scores
    # ln 2, ln 3, 0 -> exp 2, 3, 1 -> weights 2/6, 3/6, 1/6 (unscaled: 4/14, 9/14, 1/14).
    query = np.array([[[2 * math.log(2), 2 * math.log(3), 0, 0]]], "float32")  # (1, 1, 4)
    key = np.array([[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]], "float32")  # (1, 3, 4)
    layer = LuongAttention("dot", scale=True)
    _, weights = layer(query, key)
    assert float(layer.gain) == 0.5
    np.testing.assert_allclose(weights, [[[2 / 6, 3 / 6, 1 / 6]]], atol=1e-6)
    # general: 1/sqrt(dq) whatever the key size; the other scores keep their own starting gains.
    starts = {"general": 0.25, "concat": 1.0, "location": 1.0, "cosine": 10.0}
    for score, gain in starts.items():
        layer = LuongAttention(score, scale=True)
        layer(np.ones((1, 2, 16), "float32"), np.ones((1, 3, 16 if score == "cosine" else 6), "float32"))
        assert float(layer.gain) == gain, score


@pytest.mark.parametrize("t_q", [1, 3])
@pytest.mark.parametrize("variant, scale", CASES)
def test_scores_match_numpy(variant, scale, t_q):
    query, key, value = make_inputs(t_q, dk=key_size(variant))
    layer = make_layer(variant, scale)
    layer(query, value, key=key, value_mask=MASK)  # builds
    weights = fixed_weights(variant, scale)
    set_weights(layer, weights)
    context, attention = layer(query, value, key=key, value_mask=MASK)
    expected_context, expected_attention = np_attention(np_scores(variant, weights, query, key), value, MASK)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-6)
    np.testing.assert_allclose(context, expected_context, atol=1e-5)


@pytest.mark.parametrize("variant", ["bahdanau", "dot", "general", "concat", "location"])
def test_integer_inputs_are_cast_to_the_compute_dtype(variant):
    """Integer query, key and value attend as their float values do, as `keras.layers.Dense`
    computes on integers (the dot and general scores used to stop in TensorFlow's Softmax kernel)."""
    rng = np.random.default_rng(3)
    query = rng.integers(-2, 3, size=(BATCH, 1, DQ)).astype("int32")
    key = rng.integers(-2, 3, size=(BATCH, T_IN, key_size(variant))).astype("int64")
    value = rng.integers(-2, 3, size=(BATCH, T_IN, DV)).astype("int32")
    layer = make_layer(variant)
    layer(query.astype("float32"), value.astype("float32"), key=key.astype("float32"))  # builds
    weights = fixed_weights(variant, False)
    set_weights(layer, weights)
    context, attention = layer(query, value, key=key, value_mask=MASK)
    assert keras.backend.standardize_dtype(context.dtype) == "float32"
    expected_context, expected_attention = np_attention(np_scores(variant, weights, query, key), value, MASK)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-6)
    np.testing.assert_allclose(context, expected_context, atol=1e-5)


def test_an_input_that_holds_no_numbers_is_refused_by_name():
    query, key, value = make_inputs(1)
    with pytest.raises(ValueError, match=r"value must hold numbers: a float tensor, or integers, which are cast "
                                         r"to float32\. Received: value\.dtype=string"):
        LuongAttention("general")(query, value.astype(str), key=key)


def test_bahdanau_normalized_starts_with_g_sqrt_one_over_units_and_zero_b():
    layer = BahdanauAttention(UNITS, normalize=True)
    query, key, value = make_inputs(1)
    layer(query, value)
    np.testing.assert_allclose(layer.g.numpy(), math.sqrt(1 / UNITS), rtol=1e-6)
    np.testing.assert_array_equal(layer.b.numpy(), np.zeros(UNITS))


@pytest.mark.parametrize("normalize", [False, True])
def test_bahdanau_scoring_vector_and_prepared_keys_by_hand(normalize):
    # units 2, v = (3, 4): ||v|| = 5, so with g = 2 the scoring vector is 2 (3, 4) / 5 = (1.2, 1.6).
    # W2 = identity on dk 2 and b = (0.5, -1): the prepared keys are k, plus b when normalized.
    layer = BahdanauAttention(2, normalize=normalize)
    layer.build((1, 1, 2), (1, 2, 2))
    layer.v.assign([3.0, 4.0])
    layer.key_dense.kernel.assign(np.eye(2, dtype="float32"))
    key = np.array([[[1.0, 2.0], [-3.0, 0.0]]], "float32")  # (1, t_in 2, dk 2)
    if normalize:
        layer.g.assign(2.0)
        layer.b.assign([0.5, -1.0])
    expected_v, expected_keys = ([1.2, 1.6], [[[1.5, 1.0], [-2.5, -1.0]]]) if normalize else ([3.0, 4.0], key)
    np.testing.assert_allclose(layer.scoring_vector(), expected_v, rtol=1e-6)
    np.testing.assert_allclose(layer.prepare_keys(key), expected_keys, rtol=1e-6)


def test_concat_units_default_to_the_query_size():
    layer = LuongAttention("concat")
    query, key, value = make_inputs(1)
    layer(query, value, key=key)
    assert tuple(layer.w_query.shape) == (DQ, DQ)
    assert tuple(layer.w_key.shape) == (DK, DQ)
    assert tuple(layer.v.shape) == (DQ,)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    "gain",
    [
        None,
        2.0,
        0.5,
        -1.0,  # a negative learned gain must not revive positions past max_length
    ],
)
def test_location_positions_past_max_length_get_zero_weight(gain, dtype):
    query, key, value = make_inputs(3, dtype=dtype)
    layer = LuongAttention("location", scale=gain is not None, max_length=2, dtype=dtype)
    layer(query, value)
    if gain is not None:
        layer.gain.assign(gain)
    _, weights = layer(query, value)
    weights = weights.numpy()
    assert weights.shape == (BATCH, 3, T_IN)
    assert (weights[..., 2:] == 0).all()
    np.testing.assert_allclose(weights.astype("float64").sum(-1), 1.0, atol=ROW_SUM_ATOL[dtype])


def test_location_crops_its_weights_to_a_shorter_sentence():
    # max_length 6, t_in 2 then 4: the scores are the first t_in columns of W q.
    layer = LuongAttention("location", max_length=6)
    query, _, value = make_inputs(1)
    layer(query, value)
    w = fixed((DQ, 6), 0)
    layer.w.assign(w)
    for t_in in (2, 4):
        _, weights = layer(query, value[:, :t_in])
        _, expected = np_attention(query.astype("float64") @ w[:, :t_in], value[:, :t_in])
        np.testing.assert_allclose(weights, expected, atol=1e-6)


# -- masking ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("t_q", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_masked_positions_get_exactly_zero_and_rows_sum_to_one(variant, dtype, t_q):
    query, key, value = make_inputs(t_q, dk=key_size(variant), dtype=dtype)
    # Large query values push the masked position's score up: it must still get exactly 0.
    query = query * np.asarray(4, dtype)
    layer = make_layer(variant, scale=True, dtype=dtype)
    context, weights = layer(query, value, key=key, value_mask=MASK)
    weights = weights.numpy()
    assert weights.shape == (BATCH, t_q, T_IN)
    assert context.shape == (BATCH, t_q, DV)
    assert (weights[0, :, 3] == 0.0).all()
    assert np.isfinite(weights).all() and np.isfinite(context.numpy()).all()
    np.testing.assert_allclose(weights.astype("float64").sum(-1), 1.0, atol=ROW_SUM_ATOL[dtype])


@pytest.mark.parametrize("variant", VARIANTS)
def test_float16_layer_returns_float16(variant):
    query, key, value = make_inputs(1, dk=key_size(variant), dtype="float16")
    context, weights = make_layer(variant, dtype="float16")(query, value, key=key, value_mask=MASK)
    assert context.dtype == "float16" and weights.dtype == "float16"


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_fully_masked_row_gives_zero_weights_and_zero_context(variant):
    query, key, value = make_inputs(2, dk=key_size(variant))
    mask = np.array([[False] * T_IN, [True] * T_IN])
    context, weights = make_layer(variant)(query, value, key=key, value_mask=mask)
    assert (weights.numpy()[0] == 0).all() and (context.numpy()[0] == 0).all()
    np.testing.assert_allclose(weights.numpy()[1].sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_prepared_keys_give_the_same_result(variant):
    query, key, value = make_inputs(3, dk=key_size(variant))
    layer = make_layer(variant, scale=True)
    context, weights = layer(query, value, key=key, value_mask=MASK)
    context2, weights2 = layer(query, value, value_mask=MASK, prepared_keys=layer.prepare_keys(key))
    np.testing.assert_allclose(weights2, weights, rtol=0, atol=1e-7)
    np.testing.assert_allclose(context2, context, rtol=0, atol=1e-7)


@pytest.mark.parametrize("variant", VARIANTS)
def test_key_defaults_to_value(variant):
    query, _, value = make_inputs(3)
    value = value[..., :DQ]  # dv == dq so that the dot score works on the values themselves
    layer = make_layer(variant)
    context, weights = layer(query, value, value_mask=MASK)
    context2, weights2 = layer(query, value, key=value, value_mask=MASK)
    np.testing.assert_allclose(weights2, weights, rtol=0, atol=1e-7)
    np.testing.assert_allclose(context2, context, rtol=0, atol=1e-7)


# -- errors -----------------------------------------------------------------------------------------


def test_unknown_score_names_the_value_and_the_choices():
    with pytest.raises(ValueError) as error:
        LuongAttention("bilinear")
    message = str(error.value)
    assert "score='bilinear'" in message
    assert all(repr(score) in message for score in SCORES)


def test_dot_with_different_query_and_key_sizes_is_a_clear_error():
    query, key, value = make_inputs(1)  # dq 3, dk 2
    with pytest.raises(ValueError, match=r"'dot'.*query size 3, key size 2"):
        LuongAttention("dot")(query, value, key=key)


@pytest.mark.parametrize("units", [0, -3, 2.5, "4"])
def test_bahdanau_units_must_be_a_positive_int(units):
    with pytest.raises(ValueError, match=f"units={units!r}"):
        BahdanauAttention(units)


@pytest.mark.parametrize("max_length", [0, -1, 3.0])
def test_location_max_length_must_be_a_positive_int(max_length):
    with pytest.raises(ValueError, match=f"max_length={max_length!r}"):
        LuongAttention("location", max_length=max_length)


# -- saving -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant, scale", [c for c in CASES if c[1] or c[0].startswith("bahdanau")])
def test_keras_file_round_trip_in_a_functional_model(variant, scale, tmp_path):
    dk = key_size(variant)
    query_in = keras.Input((None, DQ), name="query")
    value_in = keras.Input((None, DV), name="value")
    key_in = keras.Input((None, dk), name="key")
    mask_in = keras.Input((None,), dtype="bool", name="mask")
    context, weights = make_layer(variant, scale)(query_in, value_in, key=key_in, value_mask=mask_in)
    model = keras.Model([query_in, value_in, key_in, mask_in], [context, weights])
    query, key, value = make_inputs(3, dk=dk)
    expected = model([query, value, key, MASK])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    for got, want in zip(loaded([query, value, key, MASK]), expected):
        np.testing.assert_array_equal(got, want)


def test_masked_softmax_by_hand():
    # Scores (0, ln 3, 5) with the last position masked: softmax over (0, ln 3) = (1/4, 3/4), then 0.
    scores = np.array([[[0.0, np.log(3.0), 5.0]], [[1.0, 1.0, 1.0]]], "float32")
    mask = np.array([[[True, True, False]], [[False, False, False]]])  # (batch, 1, t_in)
    weights = np.asarray(masked_softmax(scores, mask))
    np.testing.assert_allclose(weights[0, 0], [0.25, 0.75, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(weights[1, 0], [0.0, 0.0, 0.0])  # every position masked: all zeros
    # A mask of one row per sentence (batch, t_in) holds for every query step; one of the scores' rank
    # (the fast tier's written-out Bahdanau loop passes (batch, t_in) scores) is taken as it is.
    np.testing.assert_allclose(np.asarray(masked_softmax(scores, mask[:, 0])), weights, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(masked_softmax(scores[:, 0], mask[:, 0])), weights[:, 0], rtol=1e-6)

