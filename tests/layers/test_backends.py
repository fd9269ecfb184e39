"""The layers on either Keras backend: this module runs under TensorFlow in `make test` and under JAX
in `make test-jax` (`KERAS_BACKEND=jax`).

It imports no TensorFlow and reads every output with `keras.ops.convert_to_numpy`. Expected values
are float64 NumPy written from the papers' equations (never a layer's output on the other backend):
Bahdanau, Cho, Bengio 2014 (arXiv 1409.0473), Appendix A.1.2 and eq. 5-6; Luong, Pham, Manning 2015
(arXiv 1508.04025), eq. 7-9. Sizes as in test_attention.py: batch 2, t_in 4, dq 3, dk 2 (so that
`key=` and `value=` differ), dv 5, hidden units 4.
"""

import importlib.util
import operator
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from attention_oracles import (np_aligned_positions, np_attention, np_cosine_scores, np_hard, np_local_attention,
                               np_scores, np_source_lengths, set_weights)
from multihead_oracles import np_multihead, np_relative, np_sinusoids
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.positions import SinusoidalPositions
from tfattn.layers.transformer import TransformerDecoder, TransformerEncoder

BACKEND = keras.backend.backend()
BATCH, T_IN, DQ, DK, DV, UNITS = 2, 4, 3, 2, 5, 4
# Sentence 0 has one padding position (the last); sentence 1 has none.
MASK = np.array([[True, True, True, False], [True, True, True, True]])
# How far a row of weights may sum from 1: about five roundings of u each (2^-11 in float16, 2^-24 in
# float32), as test_attention.py works out.
ROW_SUM_ATOL = {"float32": 1e-6, "float16": 5 * 2.0**-11}

# "location" has max_length 6 > t_in (its scores are cropped); "location_short" has max_length 2 < t_in
# (positions 2 and 3 have no score and get zero weight).
VARIANTS = ("bahdanau", "bahdanau_normalized", "dot", "general", "concat", "location", "location_short")
# Bahdanau has no scale; each Luong score is checked with and without it.
CASES = [("bahdanau", False), ("bahdanau_normalized", False)] + [
    (variant, scale) for variant in VARIANTS[2:] for scale in (False, True)]


def to_numpy(x):
    return ops.convert_to_numpy(x)


def fixed(shape, seed):
    """Small fixed weights with one decimal, e.g. 0.3 or -0.7."""
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).round(1).astype("float32")


def key_size(variant):
    return DQ if variant == "dot" else DK  # the dot score needs dk == dq


def max_length(variant):
    return 2 if variant == "location_short" else 6


def make_layer(variant, scale=False, dtype=None):
    if variant.startswith("bahdanau"):
        return BahdanauAttention(UNITS, normalize=variant == "bahdanau_normalized", dtype=dtype)
    if variant.startswith("location"):
        return LuongAttention("location", scale=scale, max_length=max_length(variant), dtype=dtype)
    return LuongAttention(variant, scale=scale, units=UNITS if variant == "concat" else None, dtype=dtype)


def fixed_weights(variant, scale):
    """Every weight of the variant, by attribute path on the layer, in the shapes the docstrings give."""
    dk = key_size(variant)
    weights = {
        "bahdanau": {"query_dense.kernel": fixed((DQ, UNITS), 1), "key_dense.kernel": fixed((dk, UNITS), 2),
                     "v": fixed((UNITS,), 3)},
        "dot": {},
        "general": {"w": fixed((dk, DQ), 5)},  # (dk, dq)
        "concat": {"w_query": fixed((DQ, UNITS), 6), "w_key": fixed((dk, UNITS), 7), "v": fixed((UNITS,), 8)},
        "location": {"w": fixed((DQ, max_length(variant)), 9)},  # (dq, max_length)
    }[variant.split("_")[0]]
    if variant == "bahdanau_normalized":
        weights.update(g=np.array(2.0, "float32"), b=fixed((UNITS,), 4))
    if scale:
        weights["gain"] = np.array(2.0, "float32")
    return weights


def read_weights(layer, variant):
    """The layer's own (initial) weights as arrays, by the attribute paths that `fixed_weights` names."""
    paths = fixed_weights(variant, getattr(layer, "scale", False))
    return {path: to_numpy(operator.attrgetter(path)(layer)) for path in paths}


def make_inputs(t_q, dk=DK, dtype="float32", seed=0):
    """query (batch, t_q, dq), key (batch, t_in, dk), value (batch, t_in, dv)."""
    rng = np.random.default_rng(seed)
    shapes = [(BATCH, t_q, DQ), (BATCH, T_IN, dk), (BATCH, T_IN, DV)]
    return tuple(rng.normal(size=shape).astype(dtype) for shape in shapes)


# -- the NumPy reference, from the papers ------------------------------------------------------------


def assert_masked_softmax(weights, mask, dtype="float32"):
    """Padding gets exactly zero weight and each row sums to 1."""
    weights = np.asarray(weights)
    padding = np.broadcast_to(~mask[:, None, :], weights.shape)
    assert np.isfinite(weights).all()
    assert (weights[padding] == 0.0).all(), "padding must get exactly zero weight"
    np.testing.assert_allclose(weights.astype("float64").sum(-1), 1.0, atol=ROW_SUM_ATOL[dtype])


# -- attention --------------------------------------------------------------------------------------


@pytest.mark.parametrize("t_q", [1, 3])
@pytest.mark.parametrize("variant, scale", CASES)
def test_scores_match_numpy(variant, scale, t_q):
    query, key, value = make_inputs(t_q, dk=key_size(variant))
    layer = make_layer(variant, scale)
    layer(query, value, key=key, value_mask=MASK)  # builds
    weights = fixed_weights(variant, scale)
    set_weights(layer, weights)
    context, attention = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    want_context, want_attention = np_attention(np_scores(variant, weights, query, key), value, MASK)
    assert context.shape == (BATCH, t_q, DV) and attention.shape == (BATCH, t_q, T_IN)
    np.testing.assert_allclose(attention, want_attention, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert_masked_softmax(attention, MASK)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_gets_exactly_zero_weight_and_rows_sum_to_one(variant, dtype):
    query, key, value = make_inputs(3, dk=key_size(variant), dtype=dtype)
    query = query * np.asarray(4, dtype)  # large scores, at the padding position too
    context, weights = make_layer(variant, scale=True, dtype=dtype)(query, value, key=key, value_mask=MASK)
    context, weights = to_numpy(context), to_numpy(weights)
    assert context.dtype == dtype and weights.dtype == dtype
    assert np.isfinite(context).all()
    assert_masked_softmax(weights, MASK, dtype)
    if variant == "location_short":  # positions at or past max_length 2 get zero weight too
        assert (weights[..., 2:] == 0.0).all()


# Symbolic shapes: `Input((t_in,), batch_size=2)` has every size known; `Input((None,))` leaves the batch
# and the sentence length unknown until called.


@pytest.mark.parametrize("sizes", ["static", "dynamic"])
@pytest.mark.parametrize("variant", ["bahdanau", "general"])
def test_value_mask_is_taken_from_the_keras_mask_in_a_functional_model(variant, sizes):
    # Input -> Embedding(mask_zero=True) -> attention, no mask passed: id 0 is padding.
    vocab, t_q = 7, 2
    ids = np.array([[3, 4, 5, 0], [1, 2, 6, 4]])  # (batch, t_in): sentence 0's last id is padding
    shape = dict(batch_size=BATCH) if sizes == "static" else {}
    ids_in = keras.Input((T_IN,) if sizes == "static" else (None,), dtype="int32", **shape)
    query_in = keras.Input((t_q, DQ) if sizes == "static" else (None, DQ), **shape)
    embedding = keras.layers.Embedding(vocab, DQ, mask_zero=True)  # dv = dk = dq 3
    layer = make_layer(variant)
    context, weights = layer(query_in, embedding(ids_in))
    model = keras.Model([query_in, ids_in], [context, weights])
    query = make_inputs(t_q)[0]
    context, weights = map(to_numpy, model([query, ids]))
    values = to_numpy(embedding.embeddings)[ids]  # (batch, t_in, dv)
    want_context, want_weights = np_attention(np_scores(variant, read_weights(layer, variant), query, values),
                                              values, ids != 0)
    assert (weights[0, :, 3] == 0.0).all(), "the Keras mask's padding must get exactly zero weight"
    np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)


# -- the attention zoo: cosine, local-m, local-p, hard (dk = dq so that the cosine applies) ----------

ZOO = {
    "cosine": dict(score="cosine"),
    "local-m": dict(score="general", local="m", window=1),
    "local-p": dict(score="concat", local="p", window=1, units=UNITS),
    "hard": dict(score="general", probability="hard"),
    "hard-local-p-cosine": dict(score="cosine", local="p", window=1, probability="hard", units=UNITS),
}


def zoo_weights(kwargs):
    """Fixed weights of a zoo layer, by attribute path (dk = dq)."""
    weights = {"cosine": {"gain": np.array(3.0, "float32")}, "general": {"w": fixed((DQ, DQ), 5)},
               "concat": {"w_query": fixed((DQ, UNITS), 6), "w_key": fixed((DQ, UNITS), 7),
                          "v": fixed((UNITS,), 8)}}[kwargs["score"]]
    if kwargs.get("local") == "p":
        weights.update(w_p=fixed((DQ, UNITS), 11), v_p=fixed((UNITS,), 12))
    return weights


@pytest.mark.parametrize("name", ZOO)
def test_the_zoo_matches_numpy(name):
    kwargs = ZOO[name]
    t_q = 5  # more steps than sentence 0's 3 words: local-m clips p_t
    query, key, value = make_inputs(t_q, dk=DQ)
    layer = LuongAttention(**kwargs)
    layer(query, value, key=key, value_mask=MASK)  # builds
    weights = zoo_weights(kwargs)
    for path, array in weights.items():
        operator.attrgetter(path)(layer).assign(array)
    context, attention = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    if kwargs["score"] == "cosine":
        scores = np_cosine_scores(weights["gain"], query, key)
    else:
        scores = np_scores(kwargs["score"], weights, query, key)
    if "local" in kwargs:
        p = np_aligned_positions(kwargs["local"], query, np_source_lengths(MASK, BATCH, T_IN), None,
                                 weights.get("w_p"), weights.get("v_p"))
        want_context, want = np_local_attention(scores, value, MASK, kwargs["local"], kwargs["window"], p,
                                                departures=True)  # the clip and the rounding the layer states
        if kwargs["local"] == "m":
            p = np.minimum(p, np_source_lengths(MASK, BATCH, T_IN)[:, None] - 1.0)  # the clip
        np.testing.assert_allclose(to_numpy(layer.predict_positions(query, value_mask=MASK)), p, rtol=1e-6)
    else:
        want_context, want = np_attention(scores, value, MASK)
    if kwargs.get("probability") == "hard":
        want = np_hard(want)
        want_context = want @ value
        np.testing.assert_array_equal(attention, want)
    np.testing.assert_allclose(attention, want, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert (attention[want == 0] == 0).all()


def test_hard_draws_on_this_backend_are_one_hot_and_never_padding():
    layer = LuongAttention("dot", probability="hard", seed=2)
    query, key, value = make_inputs(3, dk=DQ)
    draws = [to_numpy(layer(query, key, value_mask=MASK, training=True)[1]) for _ in range(10)]
    for weights in draws:
        assert set(np.unique(weights)) == {0.0, 1.0} and (weights.sum(-1) == 1).all()
        assert (weights[0, :, 3] == 0).all()
    assert any(not np.array_equal(draws[0], d) for d in draws[1:])


# -- encoder and decoder ----------------------------------------------------------------------------

SOURCE_VOCAB, TARGET_VOCAB, EMB = 11, 13, 4
# Source sentence 0 has two padding positions; sentence 1 has none. t_in 5, t_out 4.
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])
SOURCE_MASK = SOURCE != 0
TARGET_IN = np.array([[1, 4, 9, 0], [1, 12, 3, 7]])
ENCODERS = [(rnn, bidirectional) for rnn in ("gru", "lstm") for bidirectional in (True, False)]


@pytest.mark.parametrize("rnn, bidirectional", ENCODERS)
def test_encoder_shapes_mask_and_zero_outputs_on_padding(rnn, bidirectional):
    outputs, state, mask = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn, bidirectional=bidirectional)(SOURCE)
    outputs, state, mask = to_numpy(outputs), {k: to_numpy(v) for k, v in state.items()}, to_numpy(mask)
    assert outputs.shape == (2, 5, UNITS)
    assert sorted(state) == (["h"] if rnn == "gru" else ["c", "h"])
    assert all(s.shape == (2, UNITS) for s in state.values())
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask, SOURCE_MASK)
    assert (outputs[0, 3:] == 0.0).all(), "the recurrent layers skip padding and output zeros there"


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_encoder_annotations_do_not_depend_on_padding(rnn):
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)
    outputs, state, _ = encoder(SOURCE)
    alone_outputs, alone_state, _ = encoder(SOURCE[:1, :3])  # (1, 3): the same sentence, no padding
    np.testing.assert_allclose(to_numpy(outputs)[0, :3], to_numpy(alone_outputs)[0], atol=1e-5)
    for name in state:
        np.testing.assert_allclose(to_numpy(state[name])[0], to_numpy(alone_state[name])[0], atol=1e-5)


# (style, input_feeding, rnn, attention layer factory or None for the style's default). Luong without
# input feeding runs the Keras RNN layer over the whole target; every other case is the scanned step.
DECODERS = {
    "bahdanau-gru": ("bahdanau", True, "gru", None),
    "bahdanau-normalized-lstm": ("bahdanau", True, "lstm", lambda: BahdanauAttention(5, normalize=True)),
    "luong-feed-gru": ("luong", True, "gru", None),
    "luong-feed-dot-lstm": ("luong", True, "lstm", lambda: LuongAttention("dot", scale=True)),
    "luong-nofeed-gru": ("luong", False, "gru", None),
    "luong-nofeed-location-lstm": ("luong", False, "lstm", lambda: LuongAttention("location", max_length=3)),
    "luong-feed-local-m-gru": ("luong", True, "gru", lambda: LuongAttention("general", local="m", window=1)),
    "luong-nofeed-cosine-lstm": ("luong", False, "lstm", lambda: LuongAttention("cosine")),
    "luong-feed-hard-gru": ("luong", True, "gru", lambda: LuongAttention("dot", probability="hard")),
}


@pytest.mark.parametrize("case", DECODERS)
def test_decoder_shapes_and_stepping_equals_teacher_forcing(case):
    style, input_feeding, rnn, attention = DECODERS[case]
    outputs, state, mask = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention=style, attention_layer=attention and attention(),
                      input_feeding=input_feeding, rnn=rnn)
    logits, weights = map(to_numpy, decoder(TARGET_IN, outputs, state, mask))
    assert logits.shape == (2, 4, TARGET_VOCAB) and weights.shape == (2, 4, 5)
    assert_masked_softmax(weights, SOURCE_MASK)
    # Greedy decoding's way: t_out calls of step, fed the teacher's tokens.
    memory, step_state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    for t in range(TARGET_IN.shape[1]):
        step_logits, step_weights, step_state = decoder.step(TARGET_IN[:, t], step_state, memory)
        np.testing.assert_allclose(to_numpy(step_logits), logits[:, t], atol=1e-5, err_msg=f"logits, t={t}")
        np.testing.assert_allclose(to_numpy(step_weights), weights[:, t], atol=1e-5, err_msg=f"weights, t={t}")


# -- multi-head attention, positions and the Transformer ------------------------------------------
# Oracles from Vaswani et al. 2017 (eq. 1, section 3.2.2 and 3.5) and Shaw et al. 2018 (eq. 3-6), in
# tests/layers/multihead_oracles.py; the full tests are test_multihead.py, test_positions.py and
# test_transformer.py.


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_with_relative_positions_matches_numpy(causal):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, T_IN, 6)).astype("float32")  # self-attention: query = key = value
    layer = MultiHeadAttention(num_heads=2, relative_clip=1)
    layer(x, x)  # builds
    weights = {"query_kernel": fixed((6, 2, 3), 1), "key_kernel": fixed((6, 2, 3), 2),
               "value_kernel": fixed((6, 2, 3), 3), "output_kernel": fixed((2, 3, 6), 4),
               "relative.key_table": fixed((3, 3), 5), "relative.value_table": fixed((3, 3), 6)}
    set_weights(layer, weights)
    context, heads = map(to_numpy, layer(x, x, value_mask=MASK, use_causal_mask=causal, return_heads=True))
    allowed = MASK[:, None, :] & (np.tril(np.ones((T_IN, T_IN), bool)) if causal else True)
    a_key, a_value = (np_relative(weights[name], 1, range(T_IN), range(T_IN))
                      for name in ("relative.key_table", "relative.value_table"))
    want_context, want_heads = np_multihead(x, x, x, *(weights[k].astype("float64") for k in list(weights)[:4]),
                                            allowed, a_key, a_value)
    np.testing.assert_allclose(heads, want_heads, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)


def test_sinusoids_match_numpy():
    out = to_numpy(SinusoidalPositions()(np.zeros((1, 9, 6), "float32")))
    np.testing.assert_allclose(out[0], np_sinusoids(range(9), 6), atol=1e-5)


@pytest.mark.parametrize("positions", ["learned", "relative"])
def test_transformer_stepping_with_the_cache_equals_teacher_forcing(positions):
    keras.utils.set_random_seed(0)
    settings = dict(units=8, heads=2, ff_dim=16, num_layers=2, positions=positions, max_length=6,
                    **({"relative_clip": 2} if positions == "relative" else {}))
    outputs, state, mask = TransformerEncoder(SOURCE_VOCAB, **settings)(SOURCE)
    decoder = TransformerDecoder(TARGET_VOCAB, **settings)
    logits, weights = map(to_numpy, decoder(TARGET_IN, outputs, state, mask))
    assert_masked_softmax(weights, SOURCE_MASK)
    memory, step_state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    for t in range(TARGET_IN.shape[1]):
        step_logits, step_weights, step_state = decoder.step(TARGET_IN[:, t], step_state, memory)
        np.testing.assert_allclose(to_numpy(step_logits), logits[:, t], atol=1e-5, err_msg=f"logits, t={t}")
        np.testing.assert_allclose(to_numpy(step_weights), weights[:, t], atol=1e-6, err_msg=f"weights, t={t}")


# -- imports ----------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (the [test] extra)")
def test_the_layers_import_no_tensorflow_on_jax():
    """`tfattn.layers` is pure Keras: on the JAX backend importing it loads no TensorFlow (Keras itself
    may load it later, e.g. to serialize a config, when TensorFlow is installed)."""
    code = "import sys, tfattn.layers; print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))"
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
