"""Tests for tfattn.accel.decoder's internals: the decoding weights and their token tables.

That the fast decoder equals the reference `Decoder` (teacher forcing, `step`) is in `test_tiers.py`.
Sizes: source vocab 11, target vocab 13, embeddings 4, units 6, t_in 5.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import decoder as fast_decoder
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder

from conftest import assert_close_or_same, matmul_rows_are_independent

SOURCE_VOCAB, TARGET_VOCAB, EMB, UNITS = 11, 13, 4, 6
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])  # sentence 0 has two padding positions

# (style, input_feeding, rnn, attention factory or None for the style's default)
CASES = {
    "bahdanau-gru": ("bahdanau", True, "gru", None),
    "bahdanau-lstm": ("bahdanau", True, "lstm", None),
    "bahdanau-normalized-gru": ("bahdanau", True, "gru", lambda: BahdanauAttention(5, normalize=True)),
    "luong-feed-gru": ("luong", True, "gru", None),
    "luong-feed-lstm": ("luong", True, "lstm", None),
    "luong-nofeed-gru": ("luong", False, "gru", None),
    "luong-nofeed-lstm": ("luong", False, "lstm", None),
    "luong-nofeed-concat-lstm": ("luong", False, "lstm", lambda: LuongAttention("concat", units=3)),
}


def setup(case):
    """A built decoder for `case` with non-zero biases, and an encoded batch: `(decoder, memory, state)`."""
    style, input_feeding, rnn, attention = CASES[case]
    outputs, state, mask = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention=style, attention_layer=attention and attention(),
                      input_feeding=input_feeding, rnn=rnn)
    decoder.build((2, 1), outputs.shape)
    rng = np.random.default_rng(5)
    for layer in (decoder.rnn_layer.cell, decoder.hidden_dense):  # non-zero biases, so that each is seen once
        if layer.bias is not None:  # (Luong's tanh layer has none)
            layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.5)
    return decoder, decoder.prepare_memory(outputs, mask), decoder.initial_state(state)


@pytest.mark.parametrize("case", CASES)
def test_token_tables_hold_what_the_previous_token_adds(case):
    decoder, memory, state = setup(case)
    weights = fast_decoder.decoding_weights(decoder, token_tables=True)
    plain_weights = fast_decoder.decoding_weights(decoder)
    bahdanau = decoder.style == "bahdanau"
    # Row i of each table is token i's share, computed as a step would; a GRU's input bias is in it
    # only when the step has no other input product to add it with (Luong without input feeding).
    # An LSTM's one bias never is: its step adds it with the recurrent product.
    embeddings = decoder.embedding.embeddings
    gates = decoder.rnn_layer.cell.kernel[:EMB]  # the embedding's rows of the RNN's input kernel
    in_table = decoder.style == "luong" and not decoder.input_feeding
    bias_in_table = in_table and decoder.rnn == "gru"
    expected = tf.matmul(embeddings, gates) + (decoder.rnn_layer.cell.bias[0] if bias_in_table else 0.0)
    np.testing.assert_allclose(weights["gates_table"], expected, rtol=1e-5, atol=1e-6)
    assert weights["gates_table"].shape == (TARGET_VOCAB, (3 if decoder.rnn == "gru" else 4) * UNITS)
    if bahdanau:
        hidden = decoder.hidden_dense.kernel[-EMB:]  # [s_i; c_i; E y_{i-1}]: the last rows
        np.testing.assert_allclose(weights["hidden_table"], tf.matmul(embeddings, hidden), rtol=1e-5, atol=1e-6)
    # They replace what they hold; what is left is what a step reads.
    folded = {"kernel"} | ({"input_bias"} if in_table else set()) | (
        {"hidden_kernel", "hidden_kernel_embedding"} if bahdanau else set())
    assert set(weights) == (set(plain_weights) - folded) | {"gates_table"} | ({"hidden_table"} if bahdanau else set())
    # A step with them gives what a step without them gives (to the bit where a row's product does
    # not depend on the others), for a few steps.
    token, states = np.array([1, 4]), (state, state)
    for _ in range(3):
        got = fast_decoder.stepper(decoder, weights)(token, states[0], memory)  # (logits, attention, state)
        want = fast_decoder.stepper(decoder, plain_weights)(token, states[1], memory)
        for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
            assert_close_or_same(g, w, matmul_rows_are_independent())
        states, token = (got[2], want[2]), np.argmax(got[0], axis=-1)


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_decoding_weights_are_the_layers_own_weights_by_rows(style):
    # The RNN kernel splits after the embedding's 4 rows; Bahdanau's tanh layer reads [s; c; E y]
    # (6 + 6 + 4 rows): its kernel splits into the first 12 rows and the embedding's last 4.
    decoder, _, _ = setup(f"{style}-gru" if style == "bahdanau" else "luong-feed-gru")
    weights = fast_decoder.decoding_weights(decoder)
    cell = decoder.rnn_layer.cell
    np.testing.assert_array_equal(weights["kernel"], cell.kernel.numpy()[:EMB])
    np.testing.assert_array_equal(weights["kernel_rest"], cell.kernel.numpy()[EMB:])
    np.testing.assert_array_equal(weights["input_bias"], cell.bias.numpy()[0])
    np.testing.assert_array_equal(weights["recurrent_bias"], cell.bias.numpy()[1])
    np.testing.assert_array_equal(weights["logits_kernel"], decoder.logits_dense.kernel.numpy())
    hidden = decoder.hidden_dense.kernel.numpy()
    np.testing.assert_array_equal(weights["hidden_kernel"], hidden)
    if style == "bahdanau":
        assert hidden.shape == (2 * UNITS + EMB, UNITS)
        np.testing.assert_array_equal(weights["hidden_kernel_out"], hidden[:2 * UNITS])
        np.testing.assert_array_equal(weights["hidden_kernel_embedding"], hidden[2 * UNITS:])
    else:
        assert weights["hidden_bias"] is None and "hidden_kernel_out" not in weights
