"""Tests for tfattn.layers.decoder: stepping equals teacher forcing, attention masking, state, validation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder, scan
from tfattn.layers.encoder import Encoder

SOURCE_VOCAB, TARGET_VOCAB, EMB, UNITS = 11, 13, 4, 6
# Source sentence 0 has two padding positions; sentence 1 has none.  t_in = 5, t_out = 4.
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])
TARGET_IN = np.array([[1, 4, 9, 0], [1, 12, 3, 7]])
SOURCE_PADDING = ~(SOURCE != 0)  # (batch, t_in)

# (style, input_feeding, rnn, attention factory or None for the style's default)
CASES = {
    "bahdanau-gru": ("bahdanau", True, "gru", None),
    "bahdanau-lstm": ("bahdanau", True, "lstm", None),
    "bahdanau-normalized-gru": ("bahdanau", True, "gru", lambda: BahdanauAttention(5, normalize=True)),
    "bahdanau-normalized-lstm": ("bahdanau", True, "lstm", lambda: BahdanauAttention(5, normalize=True)),
    "luong-feed-gru": ("luong", True, "gru", None),
    "luong-feed-lstm": ("luong", True, "lstm", None),
    "luong-nofeed-gru": ("luong", False, "gru", None),
    "luong-nofeed-lstm": ("luong", False, "lstm", None),
    "luong-feed-dot-gru": ("luong", True, "gru", lambda: LuongAttention("dot", scale=True)),
    "luong-nofeed-concat-lstm": ("luong", False, "lstm", lambda: LuongAttention("concat", units=3)),
    "luong-nofeed-location-gru": ("luong", False, "gru", lambda: LuongAttention("location", max_length=3)),
    # The attention zoo: local windows (local-m reads the step from the state), cosine, hard at inference.
    "luong-feed-local-m-gru": ("luong", True, "gru", lambda: LuongAttention("general", local="m", window=1)),
    "luong-nofeed-local-m-lstm": ("luong", False, "lstm", lambda: LuongAttention("dot", local="m", window=1)),
    "luong-feed-local-p-lstm": ("luong", True, "lstm", lambda: LuongAttention("concat", local="p", window=1, units=3)),
    "luong-nofeed-local-p-gru": ("luong", False, "gru",
                                 lambda: LuongAttention("location", local="p", window=2, max_length=4)),
    "luong-feed-cosine-gru": ("luong", True, "gru", lambda: LuongAttention("cosine")),
    "luong-nofeed-hard-lstm": ("luong", False, "lstm", lambda: LuongAttention(probability="hard")),
    "luong-feed-hard-local-m-gru": ("luong", True, "gru", lambda: LuongAttention(local="m", probability="hard")),
    "bahdanau-hard-gru": ("bahdanau", True, "gru", lambda: BahdanauAttention(5, probability="hard")),
}


def setup(case):
    """An encoded batch and a decoder for `case`: `(decoder, outputs, state, mask)`."""
    style, input_feeding, rnn, attention = CASES[case]
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)
    outputs, state, mask = encoder(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention=style, attention_layer=attention and attention(),
                      input_feeding=input_feeding, rnn=rnn)
    return decoder, outputs, state, mask


def run_steps(decoder, target_in, outputs, state, mask):
    """Greedy-decoding style: `t_out` calls of `decoder.step`, fed the teacher's tokens."""
    memory = decoder.prepare_memory(outputs, mask)
    state = decoder.initial_state(state)
    all_logits, all_weights = [], []
    for t in range(target_in.shape[1]):
        logits, weights, state = decoder.step(target_in[:, t], state, memory)
        all_logits.append(logits)
        all_weights.append(weights)
    return np.stack(all_logits, axis=1), np.stack(all_weights, axis=1), state


@pytest.mark.parametrize("case", CASES)
def test_stepping_equals_teacher_forcing(case):
    decoder, outputs, state, mask = setup(case)
    logits, attention = decoder(TARGET_IN, outputs, state, mask)
    step_logits, step_attention, _ = run_steps(decoder, TARGET_IN, outputs, state, mask)
    assert logits.shape == (2, 4, TARGET_VOCAB) and attention.shape == (2, 4, 5)
    assert step_logits.shape == (2, 4, TARGET_VOCAB) and step_attention.shape == (2, 4, 5)
    np.testing.assert_allclose(step_logits, logits, atol=1e-5)
    np.testing.assert_allclose(step_attention, attention, atol=1e-5)


@pytest.mark.parametrize("case", ["bahdanau-lstm", "luong-feed-gru", "luong-nofeed-lstm", "luong-feed-local-m-gru",
                                  "luong-nofeed-local-m-lstm"])
def test_teacher_forcing_in_a_graph_equals_eager(case):
    decoder, outputs, state, mask = setup(case)
    logits, attention = decoder(TARGET_IN, outputs, state, mask)
    graph_call = tf.function(decoder.call, reduce_retracing=True)
    graph_logits, graph_attention = graph_call(tf.constant(TARGET_IN), outputs, state, mask)
    np.testing.assert_allclose(graph_logits, logits, atol=1e-5)
    np.testing.assert_allclose(graph_attention, attention, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_attention_is_zero_on_source_padding_and_rows_sum_to_one(case):
    decoder, outputs, state, mask = setup(case)
    _, attention = decoder(TARGET_IN, outputs, state, mask)
    attention = attention.numpy()  # (batch, t_out, t_in)
    assert (attention[np.broadcast_to(SOURCE_PADDING[:, None, :], attention.shape)] == 0.0).all()
    if "local-p" in case:  # the Gaussian after the softmax: rows sum to less than 1
        assert (attention.sum(-1) <= 1.0).all() and (attention.sum(-1) > 0.0).all()
    else:
        np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("case", ["bahdanau-gru", "luong-feed-lstm", "luong-nofeed-gru"])
def test_logits_do_not_see_later_target_tokens(case):
    decoder, outputs, state, mask = setup(case)
    logits, _ = decoder(TARGET_IN, outputs, state, mask)
    changed = TARGET_IN.copy()
    changed[:, 2:] = [[5, 6], [8, 2]]
    changed_logits, _ = decoder(changed, outputs, state, mask)
    np.testing.assert_allclose(changed_logits[:, :2], logits[:, :2], atol=1e-6)
    assert not np.allclose(changed_logits[:, 2:], logits[:, 2:])


@pytest.mark.parametrize("case", ["bahdanau-gru", "bahdanau-lstm", "luong-feed-gru", "luong-feed-lstm",
                                  "luong-nofeed-lstm"])
def test_initial_state(case):
    decoder, outputs, state, mask = setup(case)
    h = state["h"]
    initial = decoder.initial_state({"h": h})  # no "c": an LSTM starts its cell at zero
    expected = {"h": h}
    if decoder.rnn == "lstm":
        expected["c"] = np.zeros_like(h)
    if decoder.feeds_input:
        expected["feed"] = np.zeros_like(h)  # h~_0 = 0
    assert sorted(initial) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(initial[name], value)
    if decoder.rnn == "lstm":  # an encoder's "c" is kept
        np.testing.assert_array_equal(decoder.initial_state(state)["c"], state["c"])


@pytest.mark.parametrize("case", ["bahdanau-gru", "luong-feed-lstm", "luong-nofeed-gru"])
def test_step_returns_the_next_state(case):
    decoder, outputs, state, mask = setup(case)
    decoder(TARGET_IN, outputs, state, mask)  # builds
    _, _, final = run_steps(decoder, TARGET_IN, outputs, state, mask)
    assert sorted(final) == sorted(decoder.initial_state(state))
    assert all(value.shape == (2, UNITS) for value in final.values())
    if decoder.feeds_input:
        assert np.abs(final["feed"]).sum() > 0


def test_default_attention_layer_follows_the_style():
    assert isinstance(Decoder(TARGET_VOCAB, EMB, UNITS, attention="bahdanau").attention_layer, BahdanauAttention)
    luong = Decoder(TARGET_VOCAB, EMB, UNITS, attention="luong").attention_layer
    assert isinstance(luong, LuongAttention) and luong.score == "general"


@pytest.mark.parametrize("old", [dict(style="luong"), dict(attention=LuongAttention("dot"), style="luong")])
def test_the_old_argument_names_still_work_with_a_deprecation_warning(old):
    with pytest.warns(DeprecationWarning, match="attention"):
        decoder = Decoder(TARGET_VOCAB, EMB, UNITS, **old)
    assert decoder.attention == "luong" and isinstance(decoder.attention_layer, LuongAttention)
    if "attention" in old:
        assert decoder.attention_layer is old["attention"]


def test_a_config_saved_with_the_old_names_loads():
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention="luong", attention_layer=LuongAttention("dot"))
    config = decoder.get_config()
    config["style"] = config.pop("attention")
    config["attention"] = config.pop("attention_layer")
    loaded = Decoder.from_config(config)
    assert loaded.attention == "luong" and loaded.attention_layer.score == "dot"


def test_unknown_style_is_an_error():
    with pytest.raises(ValueError) as error:
        Decoder(TARGET_VOCAB, EMB, UNITS, attention="transformer")
    message = str(error.value)
    assert "attention='transformer'" in message and "'bahdanau'" in message and "'luong'" in message


def test_attention_must_be_a_scored_attention_layer():
    with pytest.raises(ValueError, match="attention_layer must be a ScoredAttention"):
        Decoder(TARGET_VOCAB, EMB, UNITS, attention_layer=keras.layers.Attention())


def test_dropout_is_active_only_when_training():
    outputs, state, mask = Encoder(SOURCE_VOCAB, EMB, UNITS)(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, dropout=0.5)
    first, _ = decoder(TARGET_IN, outputs, state, mask)
    np.testing.assert_array_equal(decoder(TARGET_IN, outputs, state, mask)[0], first)
    trained, _ = decoder(TARGET_IN, outputs, state, mask, training=True)
    assert not np.allclose(trained, first)


def test_scan_runs_the_step_over_time_in_order():
    # A running sum: the state adds x_t; the outputs are the sum so far and 2 x_t.
    # Sentence 0 reads 1, 2, 3 (sums 1, 3, 6); sentence 1 reads 10, 20, 30 (sums 10, 30, 60).
    inputs = tf.constant([[[1.0], [2.0], [3.0]], [[10.0], [20.0], [30.0]]])  # (batch 2, t_out 3, 1)

    def step(x, state):
        total = state + x
        return total, 2.0 * x, total

    zeros = (tf.zeros([2, 1]), tf.zeros([2, 1]))
    sums, doubled = scan(step, inputs, tf.zeros([2, 1]), zeros)
    np.testing.assert_array_equal(sums[..., 0], [[1, 3, 6], [10, 30, 60]])
    np.testing.assert_array_equal(doubled[..., 0], [[2, 4, 6], [20, 40, 60]])

def test_the_state_counts_the_target_steps_for_local_m():
    decoder, outputs, state, mask = setup("luong-feed-local-m-gru")
    assert not setup("luong-feed-local-p-lstm")[0].tracks_position  # local-p predicts p_t from h_t
    decoder(TARGET_IN, outputs, state, mask)  # builds
    initial = decoder.initial_state(state)
    assert initial["position"].dtype == "int32"
    np.testing.assert_array_equal(initial["position"], [0, 0])
    *_, final = run_steps(decoder, TARGET_IN, outputs, state, mask)
    np.testing.assert_array_equal(final["position"], [4, 4])


def test_local_m_attends_around_the_step_by_hand():
    # local-m, D = 1: at step t the window is t-1..t+1, with p_t clipped to S - 1 (sentence 0: S = 3).
    decoder, outputs, state, mask = setup("luong-nofeed-local-m-lstm")
    _, attention = decoder(TARGET_IN, outputs, state, mask)
    nonzero = attention.numpy() > 0  # (batch, t_out, t_in)
    window = [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    np.testing.assert_array_equal(nonzero[1], np.array(window, bool))
    np.testing.assert_array_equal(nonzero[0], np.array(window[:3] + [[0, 1, 1, 0, 0]], bool) & (SOURCE[0] != 0))


@pytest.mark.parametrize("case", ["luong-nofeed-hard-lstm", "bahdanau-hard-gru"])
def test_hard_attention_draws_in_training_and_takes_the_argmax_otherwise(case):
    decoder, outputs, state, mask = setup(case)
    _, argmax = decoder(TARGET_IN, outputs, state, mask)
    draws = [decoder(TARGET_IN, outputs, state, mask, training=True)[1].numpy() for _ in range(5)]
    for weights in [argmax.numpy()] + draws:
        assert set(np.unique(weights)) == {0.0, 1.0} and (weights.sum(-1) == 1).all()
        assert (weights[np.broadcast_to(SOURCE_PADDING[:, None, :], weights.shape)] == 0).all()
    assert any(not np.array_equal(d, argmax) for d in draws), "training draws positions"
