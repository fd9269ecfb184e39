"""Tests for tfattn.layers.cell: `AttentionCell` equals the `Decoder`'s step, works in a user's functional
model (fit, save, load), gives padding zero weight, round-trips its config, checks its arguments, and
runs on JAX."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.cell import AttentionCell
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder

SOURCE_VOCAB, TARGET_VOCAB, EMB, UNITS = 11, 13, 4, 6
# Source sentence 0 has two padding positions; sentence 1 has none.  t_in = 5, t_out = 4.
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])
TARGET_IN = np.array([[1, 4, 9, 2], [1, 12, 3, 7]])
T_IN = SOURCE.shape[1]


def close(got, want, err_msg=""):
    """Equal within float32 rounding."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6, err_msg=err_msg)


# -- 1. the same numbers as the Decoder ------------------------------------------------------------


def decoder_steps(decoder, outputs, state, mask):
    """The decoder stepped over TARGET_IN with its public `step`: per step `(batch, t_out, ...)`
    weights, `h`, and `feed` (Luong's h~_t, when it feeds input), and the last state."""
    memory = decoder.prepare_memory(outputs, mask)
    state = decoder.initial_state(state)
    weights, hs, feeds = [], [], []
    for t in range(TARGET_IN.shape[1]):
        _, w, state = decoder.step(TARGET_IN[:, t], state, memory)
        weights.append(w)
        hs.append(state["h"])
        feeds.append(state.get("feed", state["h"]))
    return np.stack(weights, 1), np.stack(hs, 1), np.stack(feeds, 1), state


def cell_around(decoder, style):
    """An AttentionCell built around the decoder's own GRU/LSTM cell and attention layer; the Luong
    order also gets a copy of the decoder's W_c (`hidden_dense`, no bias)."""
    luong = style == "luong"
    cell = AttentionCell(decoder.rnn_layer.cell, decoder.attention_layer, attention=style,
                         attention_layer_size=UNITS if luong else None, output_attention=luong,
                         alignment_history=True, memory_length=T_IN)
    cell.build((None, EMB))
    if luong:
        cell.attention_dense.kernel.assign(decoder.hidden_dense.kernel)
    return cell


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("style", ["luong", "bahdanau"])
def test_cell_gives_the_decoders_numbers(style, rnn):
    keras.utils.set_random_seed(1)
    encoder = Encoder(SOURCE_VOCAB, EMB, UNITS, rnn=rnn)
    outputs, state, mask = encoder(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention=style, input_feeding=True, rnn=rnn)
    logits, attention = decoder(TARGET_IN, outputs, state, mask)
    weights, hs, feeds, last = decoder_steps(decoder, outputs, state, mask)

    cell = cell_around(decoder, style)
    cell_state = [state["h"]] if rnn == "gru" else [state["h"], state["c"]]
    rnn_layer = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    out, *states = rnn_layer(decoder.embedding(TARGET_IN), initial_state=cell.initial_state(outputs, mask, cell_state))
    out, alignments = cell.split_outputs(out)

    close(alignments, attention, "alignments = the decoder's attention")
    close(alignments, weights, "alignments = the stepped decoder's weights")
    close(states[len(cell_state) + 1], attention[:, -1], "the final state holds the last alignments")
    close(states[0], last["h"], "final h")
    if rnn == "lstm":
        close(states[1], last["c"], "final c")
    if style == "luong":
        close(out, feeds, "outputs = h~_t, the decoder's input feed")
        close(decoder.logits_dense(out), logits, "h~_t projected = the decoder's logits")
    else:
        close(out, hs, "outputs = s_i, the decoder's state")


def test_luong_order_without_input_feeding_equals_the_decoder_without_it():
    keras.utils.set_random_seed(2)
    outputs, state, mask = Encoder(SOURCE_VOCAB, EMB, UNITS)(SOURCE)
    decoder = Decoder(TARGET_VOCAB, EMB, UNITS, attention="luong", input_feeding=False)
    logits, attention = decoder(TARGET_IN, outputs, state, mask)
    cell = AttentionCell(decoder.rnn_layer.cell, decoder.attention_layer, attention_layer_size=UNITS,
                         input_feeding=False)
    cell.build((None, EMB))
    cell.attention_dense.kernel.assign(decoder.hidden_dense.kernel)
    out, _, _, alignments, *_ = keras.layers.RNN(cell, return_sequences=True, return_state=True)(
        decoder.embedding(TARGET_IN), initial_state=cell.initial_state(outputs, mask, state["h"]))
    close(decoder.logits_dense(out), logits)
    close(alignments, attention[:, -1])


# -- 2. a user's functional model ------------------------------------------------------------------

VOCAB = 12


def functional_model(dropout=0.0):
    """Embedding -> Bidirectional GRU encoder; an AttentionCell(GRUCell, LuongAttention) decoder through
    keras.layers.RNN, its memory mask taken from the encoder output's Keras mask; Dense to the vocabulary."""
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    embedded = keras.layers.Embedding(VOCAB, EMB, mask_zero=True)(source)
    memory = keras.layers.Bidirectional(keras.layers.GRU(UNITS // 2, return_sequences=True))(embedded)
    cell = AttentionCell(keras.layers.GRUCell(UNITS), LuongAttention(dropout=dropout), attention_layer_size=UNITS)
    decoder_in = keras.layers.Embedding(VOCAB, EMB, mask_zero=True)(target_in)
    h = keras.layers.RNN(cell, return_sequences=True)(decoder_in, initial_state=cell.initial_state(memory))
    model = keras.Model([source, target_in], keras.layers.Dense(VOCAB)(h))
    model.compile(keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def random_pairs(n=16, seed=0):
    """Random ids with padding at the end of half the rows: `([source, target_in], target_out)`."""
    rng = np.random.default_rng(seed)
    source, target = rng.integers(1, VOCAB, (n, 5)), rng.integers(1, VOCAB, (n, 5))
    source[: n // 2, 3:] = 0
    target[: n // 2, 4:] = 0
    return [source, target[:, :-1]], target[:, 1:]


def test_functional_model_trains_saves_and_loads(tmp_path):
    keras.utils.set_random_seed(0)
    model = functional_model(dropout=0.1)
    inputs, labels = random_pairs()
    untrained = model.evaluate(inputs, labels, verbose=0)
    assert abs(untrained - np.log(VOCAB)) < 0.3, untrained  # an untrained model's loss is about ln(vocab)
    losses = model.fit(inputs, labels, epochs=6, batch_size=8, verbose=0).history["loss"]
    assert losses[-1] < losses[0] - 0.1, losses
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert any(isinstance(getattr(layer, "cell", None), AttentionCell) for layer in loaded.layers)
    close(loaded.predict(inputs, verbose=0), model.predict(inputs, verbose=0))


def test_rnn_without_initial_state_says_how_to_pass_the_memory():
    cell = AttentionCell(keras.layers.GRUCell(UNITS), LuongAttention())
    with pytest.raises(ValueError, match=r"initial_state=cell\.initial_state\(memory, memory_mask\)"):
        keras.layers.RNN(cell)(np.ones((2, 3, EMB), "float32"))


# -- 3. padding ------------------------------------------------------------------------------------

# Three real positions with the same key [1, 0]; two padding positions with other, large values. With
# a dot score every real position scores the same, so each gets 1/3 and the context is exactly [1, 0].
MEMORY = np.array([[[1, 0], [1, 0], [1, 0], [9, 9], [9, 9]]], "float32")  # (batch=1, t_in=5, dv=2)
MEMORY_MASK = np.array([[True, True, True, False, False]])


def hand_checked_run(memory_mask=MEMORY_MASK, memory=MEMORY, **kwargs):
    """The dot-score cell over MEMORY for 3 steps: `(outputs, alignments, final states)`."""
    keras.utils.set_random_seed(3)
    cell = AttentionCell(keras.layers.GRUCell(2), LuongAttention("dot"), alignment_history=True,
                         memory_length=6, **kwargs)
    out, *states = keras.layers.RNN(cell, return_sequences=True, return_state=True)(
        np.ones((1, 3, 3), "float32"), initial_state=cell.initial_state(memory, memory_mask))
    out, alignments = cell.split_outputs(out)
    return np.asarray(out), np.asarray(alignments), cell.split_states(states)


def test_padding_gets_exactly_zero_weight():
    out, alignments, states = hand_checked_run()
    third = np.float32(1) / np.float32(3)
    close(alignments, np.tile([third, third, third, 0, 0, 0], (1, 3, 1)))
    assert np.all(alignments[:, :, 3:] == 0), "padding and the history's extra position are exactly 0"
    assert np.all(np.asarray(states["alignments"])[:, 3:] == 0)
    close(out, np.tile([1.0, 0.0], (1, 3, 1)), "the context is the real positions' value")


def test_memory_mask_is_taken_from_the_memorys_keras_mask():
    ids = np.array([[4, 4, 4, 0, 0]])
    embedding = keras.layers.Embedding(6, 2, mask_zero=True)
    embedding.build(ids.shape)
    embedding.embeddings.assign(np.array([[9, 9], [0, 0], [0, 0], [0, 0], [1, 0], [0, 0]], "float32"))
    _, alignments, _ = hand_checked_run(memory_mask=None, memory=embedding(ids))
    assert np.all(alignments[:, :, 3:] == 0)
    close(alignments[:, :, :3], np.full((1, 3, 3), 1 / 3))


def test_without_a_mask_every_position_is_attended():
    _, alignments, _ = hand_checked_run(memory_mask=None)
    assert np.all(alignments[:, :, :5] > 0)
    close(alignments.sum(-1), np.ones((1, 3)))


def test_target_padding_steps_keep_the_state():
    """Keras' RNN skips masked target steps: the state (and so the last alignments) stay."""
    keras.utils.set_random_seed(4)
    cell = AttentionCell(keras.layers.GRUCell(UNITS), BahdanauAttention(3), attention="bahdanau")
    memory = np.random.default_rng(0).normal(size=(1, T_IN, UNITS)).astype("float32")
    x = np.random.default_rng(1).normal(size=(1, 4, EMB)).astype("float32")
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    _, *full = rnn(x[:, :2], initial_state=cell.initial_state(memory))
    _, *masked = rnn(x, initial_state=cell.initial_state(memory), mask=np.array([[True, True, False, False]]))
    for a, b in zip(masked, full):
        close(a, b)


# -- 4. config and arguments -----------------------------------------------------------------------

CONFIGS = {
    "gru-luong": lambda: AttentionCell(keras.layers.GRUCell(4), LuongAttention("concat", units=3)),
    "lstm-bahdanau-history": lambda: AttentionCell(
        keras.layers.LSTMCell(4), BahdanauAttention(3, normalize=True), attention="bahdanau",
        attention_layer_size=5, output_attention=False, alignment_history=True, memory_length=7, memory_size=6),
    "stacked-no-feeding": lambda: AttentionCell(
        keras.layers.StackedRNNCells([keras.layers.GRUCell(3), keras.layers.LSTMCell(4)]),
        LuongAttention(scale=True), input_feeding=False, memory_size=np.int64(8), name="decoder_cell"),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_config_round_trip(case):
    cell = CONFIGS[case]()
    config = cell.get_config()
    again = AttentionCell.from_config(json.loads(json.dumps(config)))
    assert again.get_config() == config
    assert type(again.cell) is type(cell.cell) and type(again.attention_layer) is type(cell.attention_layer)
    assert again.state_size == cell.state_size and again.output_size == cell.output_size


def test_a_loaded_cell_gives_the_same_numbers():
    cell = CONFIGS["lstm-bahdanau-history"]()
    memory, x = np.ones((2, 7, 6), "float32"), np.ones((2, 3, 2), "float32")
    rnn = keras.layers.RNN(cell, return_sequences=True)
    again = keras.layers.RNN.from_config(json.loads(json.dumps(rnn.get_config())))
    want = rnn(x, initial_state=cell.initial_state(memory))
    again.build(x.shape)
    again.set_weights(rnn.get_weights())
    close(again(x, initial_state=again.cell.initial_state(memory)), want)


def test_sizes():
    cell = CONFIGS["lstm-bahdanau-history"]()
    # LSTM (h, c) = 4, 4; a_t = attention_layer_size 5; alignments t_in = 7; memory dv = 6; mask t_in = 7.
    assert cell.state_size == [4, 4, 5, 7, 6, 7]
    assert cell.output_size == 4 + 7  # h_t, then the alignments
    assert CONFIGS["gru-luong"]().output_size == 4  # the context, dv = the cell's size


def gru_cell(**kwargs):
    return AttentionCell(keras.layers.GRUCell(UNITS), LuongAttention(), **kwargs)


@pytest.mark.parametrize("make, message", [
    (lambda: AttentionCell(keras.layers.Dense(3), LuongAttention()), r"cell must be a Keras RNN cell.*Dense"),
    (lambda: AttentionCell(keras.layers.GRUCell(3, dropout=0.1), LuongAttention()), r"no dropout.*'dropout': 0.1"),
    (lambda: AttentionCell(keras.layers.StackedRNNCells([keras.layers.LSTMCell(3, recurrent_dropout=0.2)]),
                           LuongAttention()), r"no dropout.*'recurrent_dropout': 0.2"),
    (lambda: AttentionCell(keras.layers.GRUCell(3), keras.layers.Attention()), r"attention_layer=<Attention"),
    (lambda: gru_cell(attention="transformer"), r"attention=.transformer."),
    (lambda: gru_cell(attention_layer_size=0), r"attention_layer_size=0"),
    (lambda: gru_cell(attention_layer_size=True), r"attention_layer_size=True"),
    (lambda: gru_cell(memory_size=2.5), r"memory_size=2.5"),
    (lambda: gru_cell(alignment_history=True), r"needs memory_length.*Received: memory_length=None"),
])
def test_argument_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_numpy_integers_are_accepted():
    cell = gru_cell(attention_layer_size=np.int32(5), memory_length=np.int64(4), memory_size=np.int16(8),
                    alignment_history=True)
    assert (cell.attention_layer_size, cell.memory_length, cell.memory_size) == (5, 4, 8)
    assert type(cell.memory_length) is int


@pytest.mark.parametrize("memory, mask, cell_state, message", [
    (np.ones((2, 5)), None, None,
     r"memory must have shape \(batch, t_in, dv\), rank 3\. Received: memory.shape=\(2, 5\)$"),
    (np.ones((2, 5, 3)), None, None, r"with dv = 6, as in the cell's output size\. Received: memory.shape=\(2, 5, 3\)"),
    (np.ones((2, 5, 6)), np.ones((2, 4)) > 0, None, r"memory_mask must have shape \(batch, t_in\) with t_in = 5"),
    (np.ones((2, 5, 6)), np.ones((3, 5)) > 0, None, r"memory_mask .* with batch = 2"),
    (np.ones((2, 5, 6)), None, [np.ones((2, 6)), np.ones((2, 6))], r"cell_state must hold 1 tensors.*Received: 2"),
    (np.ones((2, 5, 6)), None, np.ones((2, 5)), r"cell_state\[0\] must have shape \(batch, units\) with units = 6"),
    (np.ones((2, 5, 6)), None, np.ones((3, 6)), r"cell_state\[0\] .* with batch = 2, as in memory"),
])
def test_initial_state_checks_shapes(memory, mask, cell_state, message):
    with pytest.raises(ValueError, match=message):
        gru_cell().initial_state(memory.astype("float32"), mask, cell_state)


def test_memory_longer_than_memory_length_is_an_error():
    cell = gru_cell(alignment_history=True, memory_length=4)
    with pytest.raises(ValueError, match=r"t_in <= memory_length = 4\. Received: memory.shape=\(2, 5, 6\)"):
        cell.initial_state(np.ones((2, 5, 6), "float32"))


def test_memory_size_names_the_argument_when_given():
    cell = gru_cell(memory_size=4)
    with pytest.raises(ValueError, match=r"dv = 4, as in memory_size"):
        cell.initial_state(np.ones((2, 5, 6), "float32"))


def test_initial_state_layout():
    cell = AttentionCell(keras.layers.LSTMCell(3), LuongAttention(), attention_layer_size=2, memory_size=4)
    memory = np.arange(24, dtype="float32").reshape(2, 3, 4)
    states = cell.initial_state(memory, np.array([[1, 1, 0], [1, 1, 1]]) > 0)
    assert [tuple(s.shape) for s in states] == [(2, 3), (2, 3), (2, 2), (2, 3), (2, 3, 4), (2, 3)]
    for s in states[:4]:
        assert np.all(np.asarray(s) == 0)
    np.testing.assert_array_equal(states[4], memory)
    np.testing.assert_array_equal(states[5], [[1, 1, 0], [1, 1, 1]])


# -- 5. JAX ----------------------------------------------------------------------------------------

JAX_SCRIPT = r"""
import json, sys
import keras, numpy as np
sys.path.insert(0, sys.argv[2])
from tests.layers.test_cell import functional_model, hand_checked_run, random_pairs
from tfattn.layers.cell import AttentionCell

assert keras.backend.backend() == "jax"
data = np.load(sys.argv[1] + "/tf.npz", allow_pickle=True)
cell = AttentionCell.from_config(json.loads(str(data["config"])))
rnn = keras.layers.RNN(cell, return_sequences=True)
rnn.build(data["x"].shape)
rnn.set_weights([data[f"w{i}"] for i in range(int(data["n"]))])
out = rnn(data["x"], initial_state=cell.initial_state(data["memory"], data["mask"]))
_, alignments, _ = hand_checked_run()
keras.utils.set_random_seed(0)
model = functional_model()
inputs, labels = random_pairs()
losses = model.fit(inputs, labels, epochs=4, batch_size=8, verbose=0).history["loss"]
try:
    functional_model(dropout=0.1).fit(inputs, labels, epochs=1, batch_size=8, verbose=0)
    error = ""
except ValueError as e:
    error = str(e)
np.savez(sys.argv[1] + "/jax.npz", out=np.asarray(out), alignments=np.asarray(alignments), losses=losses,
         error=error)
"""


@pytest.mark.slow
@pytest.mark.long  # a JAX process that compiles a training step, about a minute: make test-long
def test_runs_on_jax(tmp_path):
    pytest.importorskip("jax")
    keras.utils.set_random_seed(5)
    cell = CONFIGS["lstm-bahdanau-history"]()
    rng = np.random.default_rng(0)
    x, memory = rng.normal(size=(2, 3, 2)).astype("float32"), rng.normal(size=(2, 7, 6)).astype("float32")
    mask = np.array([[True] * 4 + [False] * 3, [True] * 7])
    rnn = keras.layers.RNN(cell, return_sequences=True)
    want = rnn(x, initial_state=cell.initial_state(memory, mask))
    weights = {f"w{i}": w for i, w in enumerate(rnn.get_weights())}
    np.savez(tmp_path / "tf.npz", config=json.dumps(cell.get_config()), x=x, memory=memory, mask=mask,
             n=len(weights), **weights)

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", JAX_SCRIPT, str(tmp_path), root], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(tmp_path / "jax.npz")
    close(got["out"], want, "JAX gives TensorFlow's numbers")
    third = np.float32(1) / np.float32(3)
    close(got["alignments"], np.tile([third, third, third, 0, 0, 0], (1, 3, 1)))
    assert got["losses"][-1] < got["losses"][0], got["losses"]
    assert "dropout cannot run inside keras.layers.RNN on JAX" in str(got["error"])
