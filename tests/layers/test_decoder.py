"""Tests for tfattn.layers.decoder: stepping equals teacher forcing, attention masking, state, validation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.layers.attention import BahdanauAttention, LuongAttention
from tfattn.layers.decoder import FEW_ROWS, Decoder, _logits, _with_bias_blocks
from tfattn.layers.encoder import Encoder

from conftest import (as_bfloat16_product, assert_close_or_same, matmul_columns_are_independent,
                      matmul_rows_are_independent)

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
}


def setup(case):
    """An encoded batch and a decoder for `case`: `(decoder, outputs, state, mask)`."""
    style, input_feeding, rnn, attention = CASES[case]
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)
    outputs, state, mask = encoder(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention=attention and attention(), style=style,
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


@pytest.mark.parametrize("case", ["bahdanau-lstm", "luong-feed-gru", "luong-nofeed-lstm"])
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


def test_default_attention_follows_the_style():
    assert isinstance(Decoder(TARGET_VOCAB, EMB, UNITS, style="bahdanau").attention, BahdanauAttention)
    luong = Decoder(TARGET_VOCAB, EMB, UNITS, style="luong").attention
    assert isinstance(luong, LuongAttention) and luong.score == "general"


def test_unknown_style_is_an_error():
    with pytest.raises(ValueError) as error:
        Decoder(TARGET_VOCAB, EMB, UNITS, style="transformer")
    message = str(error.value)
    assert "style='transformer'" in message and "'bahdanau'" in message and "'luong'" in message


def test_attention_must_be_a_scored_attention_layer():
    with pytest.raises(ValueError, match="attention must be a ScoredAttention"):
        Decoder(TARGET_VOCAB, EMB, UNITS, attention=keras.layers.Attention())


@pytest.mark.parametrize("rows", [1, 3, 20])
def test_stepper_with_logits_blocks_gives_the_same_logits(rows):
    """To the bit where a block of a product's columns is multiplied as in the whole product (oneDNN),
    else within float32 rounding (Eigen's GEMM adds 20 rows' products in another order for 4 columns)."""
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS)
    outputs, state, mask = encoder(np.resize(SOURCE, (rows, 5)))
    decoder.build((rows, 1), outputs.shape)
    memory, state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    token = np.resize([1, 4, 9], rows)
    weights = decoder.decoding_weights(logits_blocks=4)
    blocks = weights["logits_blocks"]
    assert [b.shape for b in blocks] == [(UNITS, 4), (UNITS, 3), (UNITS, 3), (UNITS, 3)]  # 13 = 4 + 3 + 3 + 3
    plain = decoder.stepper()(token, state, memory)
    blocked = decoder.stepper(weights)(token, state, memory)
    for want in (plain[0], decoder.step(token, state, memory)[0]):
        assert_close_or_same(blocked[0], want, matmul_columns_are_independent())


@pytest.mark.parametrize("rows", [1, FEW_ROWS, FEW_ROWS + 1, 40])
def test_a_step_given_blocks_and_the_whole_kernel_uses_blocks_for_few_rows_only(rows):
    rng = np.random.default_rng(2)
    blocks = [tf.constant(rng.normal(size=(UNITS, n)), tf.float32) for n in (4, 3, 3, 3)]
    kernel = 2.0 * tf.concat(blocks, axis=1)  # a different kernel, to tell which one was used
    bias = tf.constant(rng.normal(size=13), tf.float32)
    x = tf.constant(rng.normal(size=(rows, UNITS)), tf.float32)
    got = _logits(x, _with_bias_blocks({"logits_blocks": blocks, "logits_kernel": kernel, "logits_bias": bias}))
    expected = x @ (kernel / 2.0 if rows <= FEW_ROWS else kernel) + bias
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # Blocks alone serve every number of rows.
    alone = _with_bias_blocks({"logits_blocks": blocks, "logits_bias": bias})
    np.testing.assert_allclose(_logits(x, alone), x @ (kernel / 2.0) + bias, rtol=1e-5, atol=1e-5)


def test_logits_blocks_cover_the_kernel_in_order():
    decoder = Decoder(3, EMB, UNITS)  # fewer words than blocks: one column each
    decoder.build((1, 2), (1, 5, UNITS))
    blocks = decoder.decoding_weights(logits_blocks=4)["logits_blocks"]
    assert len(blocks) == 3
    np.testing.assert_array_equal(np.concatenate(blocks, axis=1), decoder.logits_dense.kernel.numpy())


@pytest.mark.parametrize("style, feeding", [("bahdanau", True), ("luong", True), ("luong", False)])
def test_bfloat16_decoding_weights_put_only_the_matmuls_in_bfloat16(style, feeding):
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, style=style, input_feeding=feeding)
    outputs, state, mask = encoder(np.resize(SOURCE, (3, 5)))
    decoder.build((3, 1), outputs.shape)
    memory, state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    weights = decoder.decoding_weights("bfloat16", logits_blocks=4)
    kernels = {"kernel", "kernel_rest", "recurrent_kernel", "hidden_kernel"}  # rest: maybe 0 rows
    if style == "bahdanau":  # the tanh layer's kernel also by rows
        kernels |= {"hidden_kernel_out", "hidden_kernel_embedding"}
    assert {k for k, v in weights.items() if getattr(v, "dtype", None) == tf.bfloat16} == kernels
    assert "logits_kernel" not in weights  # the blocks replace it
    assert all(b.dtype == tf.bfloat16 for b in weights["logits_blocks"])
    assert weights["logits_bias"].dtype == tf.float32
    token = np.array([1, 4, 9])
    logits, attention, new_state = decoder.stepper(weights)(token, state, memory)
    exact, exact_attention, _ = decoder.step(token, state, memory)
    assert logits.dtype == tf.float32 and new_state["h"].dtype == tf.float32
    # bfloat16 keeps 8 significant bits: products of inputs rounded by 2^-9 stay within a few
    # hundredths of logits of this size, and are not exactly equal.
    np.testing.assert_allclose(logits, exact, atol=0.05)
    assert not np.array_equal(logits, exact)
    np.testing.assert_allclose(np.sum(attention, axis=-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("matmul_dtype", [None, "bfloat16"])
def test_token_tables_hold_what_the_previous_token_adds(case, matmul_dtype):
    decoder, outputs, state, mask = setup(case)
    decoder.build((2, 1), outputs.shape)
    rng = np.random.default_rng(5)
    for layer in (decoder.rnn_layer.cell, decoder.hidden_dense):  # non-zero biases, so that each is seen once
        if layer.bias is not None:  # (Luong's tanh layer has none)
            layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.5)
    memory, state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    weights = decoder.decoding_weights(matmul_dtype, logits_blocks=4, token_tables=True)
    plain_weights = decoder.decoding_weights(matmul_dtype)
    bahdanau = decoder.style == "bahdanau"
    # Row i of each table is token i's share, computed as a step would; a GRU's input bias is in it
    # only when the step has no other input product to add it with (Luong without input feeding).
    # An LSTM's one bias never is: its step adds it with the recurrent product.
    embeddings = decoder.embedding.embeddings
    gates = decoder.rnn_layer.cell.kernel[:EMB]  # the embedding's rows of the RNN's input kernel
    # (bfloat16: inputs rounded to it, the sum in float32, stored in bfloat16 as this machine's matmul does)
    cast = (lambda x: tf.cast(tf.cast(x, tf.bfloat16), tf.float32)) if matmul_dtype else (lambda x: x)
    product = (lambda x, w: as_bfloat16_product(cast(x) @ cast(w))) if matmul_dtype else tf.matmul
    in_table = decoder.style == "luong" and not decoder.input_feeding
    bias_in_table = in_table and decoder.rnn == "gru"
    expected = product(embeddings, gates) + (decoder.rnn_layer.cell.bias[0] if bias_in_table else 0.0)
    np.testing.assert_allclose(weights["gates_table"], expected, rtol=1e-5, atol=1e-6)
    assert weights["gates_table"].shape == (TARGET_VOCAB, (3 if decoder.rnn == "gru" else 4) * UNITS)
    if bahdanau:
        hidden = decoder.hidden_dense.kernel[-EMB:]  # [s_i; c_i; E y_{i-1}]: the last rows
        np.testing.assert_allclose(weights["hidden_table"], product(embeddings, hidden), rtol=1e-5, atol=1e-6)
    # They replace what they hold; what is left is what a step reads.
    folded = {"kernel"} | ({"input_bias"} if in_table else set()) | (
        {"hidden_kernel", "hidden_kernel_embedding"} if bahdanau else set())
    assert set(weights) == (set(plain_weights) - folded - {"logits_kernel"}) | (
        {"gates_table", "logits_blocks"} | ({"hidden_table"} if bahdanau else set()))
    # A step with them gives what a step without them gives (to the bit where a row's product does
    # not depend on the others), for a few steps.
    token, states = np.array([1, 4]), (state, state)
    for _ in range(3):
        got = decoder.stepper(weights)(token, states[0], memory)  # (logits, attention, state)
        want = decoder.stepper(plain_weights)(token, states[1], memory)
        for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
            assert_close_or_same(g, w, matmul_rows_are_independent())
        states, token = (got[2], want[2]), np.argmax(got[0], axis=-1)
