"""Tests for tfattn.layers.baseline: the no-attention decoder against Cho et al. (2014) and Sutskever
et al. (2014) in NumPy.

The oracle is section 2.2 of arXiv 1406.1078 with this package's documented simplifications (first
state = the summary c, a tanh output layer): `s_t = f(s_{t-1}, [E y_{t-1}; c])`,
`t_t = tanh(W [s_t; c; E y_{t-1}] + b)`, `logits = W_o t_t + b_o`; without feeding the summary
(section 2 of arXiv 1409.3215, c only as the first state), `s_t = f(s_{t-1}, E y_{t-1})` and
`t_t = tanh(W [s_t; E y_{t-1}] + b)`. Keras' GRU/LSTM equations are written out in NumPy in
test_decoder_paper.py. No tfattn function computes an expected value.
"""

import keras
import numpy as np
import pytest
from test_decoder_paper import gru, lstm

from tfattn.layers.baseline import NoAttentionDecoder
from tfattn.layers.encoder import Encoder
from tfattn.model import ModelConfig, Seq2Seq, make_model

BATCH, T_IN, T_OUT, VOCAB, EMB, UNITS = 3, 5, 4, 11, 4, 6
TARGET_IN = np.array([[1, 4, 9, 3], [1, 10, 2, 7], [1, 5, 0, 0]])
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)


def setup(rnn, feed_summary=True):
    keras.utils.set_random_seed(0)
    decoder = NoAttentionDecoder(VOCAB, EMB, UNITS, rnn=rnn, feed_summary=feed_summary)
    rng = np.random.default_rng(1)
    outputs = rng.normal(size=(BATCH, T_IN, 7)).astype("float32")
    state = {"h": rng.normal(size=(BATCH, UNITS)).astype("float32")}
    if rnn == "lstm":
        state["c"] = rng.normal(size=(BATCH, UNITS)).astype("float32")
    decoder(TARGET_IN, outputs, state, MASK)
    for variable in decoder.weights:
        variable.assign(rng.normal(0.0, 0.4, variable.shape))
    return decoder, outputs, state


def numpy_decode(decoder, state, rnn, feed_summary=True):
    """Cho et al.'s decoder (Sutskever et al.'s without `feed_summary`) over TARGET_IN in float64:
    logits (batch, t_out, vocab)."""
    f64 = lambda x: np.asarray(x, "float64")  # noqa: E731
    cell = decoder.rnn_layer.cell
    w = {"kernel": f64(cell.kernel), "recurrent_kernel": f64(cell.recurrent_kernel), "bias": f64(cell.bias)}
    E, W, b = f64(decoder.embedding.embeddings), f64(decoder.hidden_dense.kernel), f64(decoder.hidden_dense.bias)
    W_o, b_o = f64(decoder.logits_dense.kernel), f64(decoder.logits_dense.bias)
    c_summary = f64(state["h"])
    read = c_summary if feed_summary else np.zeros((BATCH, 0))  # what the RNN and output layer read of c
    h, c = c_summary, f64(state.get("c", np.zeros_like(state["h"])))
    logits = []
    for t in range(T_OUT):
        y = E[TARGET_IN[:, t]]  # (batch, emb)
        x = np.concatenate([y, read], axis=-1)
        if rnn == "gru":
            h = gru(x, h, w)
        else:
            h, c = lstm(x, h, c, w)
        features = np.tanh(np.concatenate([h, read, y], axis=-1) @ W + b)
        logits.append(features @ W_o + b_o)
    return np.stack(logits, axis=1)


@pytest.mark.parametrize("feed_summary", [True, False], ids=["cho", "sutskever"])
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_call_and_step_equal_cho_et_al(rnn, feed_summary):
    decoder, outputs, state = setup(rnn, feed_summary)
    expected = numpy_decode(decoder, state, rnn, feed_summary)
    logits, attention = decoder(TARGET_IN, outputs, state, MASK)
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-5, atol=1e-5)
    assert attention.shape == (BATCH, T_OUT, T_IN) and not np.any(np.asarray(attention))
    memory, step_state = decoder.prepare_memory(outputs, MASK), decoder.initial_state(state)
    for t in range(T_OUT):
        step_logits, weights, step_state = decoder.step(TARGET_IN[:, t], step_state, memory)
        np.testing.assert_allclose(np.asarray(step_logits), expected[:, t], rtol=1e-5, atol=1e-5)
        assert weights.shape == (BATCH, T_IN) and not np.any(np.asarray(weights))


def test_without_feeding_the_summary_reaches_the_decoder_through_its_first_state_only():
    decoder, outputs, state = setup("gru", feed_summary=False)
    kernel, hidden = decoder.rnn_layer.cell.kernel, decoder.hidden_dense.kernel
    assert kernel.shape == (EMB, 3 * UNITS) and hidden.shape == (UNITS + EMB, UNITS)  # no c in either input
    assert sorted(decoder.initial_state(state)) == ["h"]
    # Starting from another first state changes every step's logits: c is there and nowhere else.
    logits, _ = decoder(TARGET_IN, outputs, state, MASK)
    other, _ = decoder(TARGET_IN, outputs, {"h": state["h"] + 0.5}, MASK)
    assert np.all(np.abs(np.asarray(logits) - np.asarray(other)).max(axis=-1) > 1e-4)


def test_feed_summary_must_be_a_bool():
    with pytest.raises(ValueError, match="feed_summary='no'"):
        NoAttentionDecoder(VOCAB, EMB, UNITS, feed_summary="no")


def test_the_decoder_never_reads_the_annotations():
    """The bottleneck itself: changing every annotation but keeping the final state changes nothing."""
    decoder, outputs, state = setup("gru")
    logits, _ = decoder(TARGET_IN, outputs, state, MASK)
    other, _ = decoder(TARGET_IN, -3.0 * outputs + 1.0, state, MASK)
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(other))


@pytest.mark.parametrize("feed_summary", [True, False])
def test_seq2seq_round_trip_and_bad_state(feed_summary):
    model = make_model(ModelConfig(attention="none", units=8, embedding_dim=4, feed_summary=feed_summary), 20, 30)
    assert model.decoder.feed_summary is feed_summary
    assert isinstance(model.decoder, NoAttentionDecoder) and isinstance(model.encoder, Encoder)
    source, target_in = np.array([[4, 5, 6, 0]]), np.array([[2, 7, 8]])
    logits, _ = model((source, target_in))
    restored = Seq2Seq.from_config(model.get_config())
    restored((source, target_in))
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(restored((source, target_in))[0]), np.asarray(logits), atol=1e-6)
    with pytest.raises(ValueError, match="state must be a dict"):
        model.decoder(target_in, np.zeros((1, 4, 8), "float32"), np.zeros((1, 8), "float32"))
