"""Tests for tfattn.accel.rnn: the written-out GRU and LSTM steps equal the Keras cells they read weights from.

The oracles are Keras' own cells and layers, the reference tier's `Encoder` and `Decoder`, NumPy on
the cells' variables, and steps worked out by hand; nothing in `tfattn.accel` computes an expected value.
"""

import keras
import numpy as np
import pytest

from tfattn.accel import adapter
from tfattn.accel import decoder as fast_decoder
from tfattn.accel import encoder as fast_encoder
from tfattn.accel import rnn
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder


def luong_decoder(*args, **kwargs):
    """A Luong `Decoder` with the new keyword (`attention="luong"`) or the old one (`style=`)."""
    try:
        return Decoder(*args, attention="luong", **kwargs)
    except (TypeError, ValueError):  # old signature: a str where an attention layer goes
        return Decoder(*args, style="luong", **kwargs)


def built_cell(kind, input_size, units):
    keras.utils.set_random_seed(3)
    cell = keras.layers.GRUCell(units) if kind == "gru" else keras.layers.LSTMCell(units)
    cell.build((None, input_size))
    for w in cell.weights:  # non-zero biases too, so that a bias mix-up shows
        w.assign(np.random.default_rng(len(w.path)).normal(0, 0.3, w.shape))
    return cell


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_step_equals_the_keras_cell(kind):
    cell = built_cell(kind, 5, 4)
    rng = np.random.default_rng(0)
    x, h, c = (rng.normal(size=s).astype("float32") for s in [(3, 5), (3, 4), (3, 4)])
    states = [h] if kind == "gru" else [h, c]
    expected, expected_states = cell(x, states)
    weights = adapter.cell_weights(cell, "float32")
    state = {"h": h} if kind == "gru" else {"h": h, "c": c}
    got, got_state = rnn.step(kind, rnn.project_inputs(weights, x), state, weights)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    for name, value in zip(("h", "c"), expected_states):
        np.testing.assert_allclose(got_state[name], value, atol=1e-6)


def test_gru_step_by_hand():
    """One GRU unit, one input, weights chosen so the gates can be worked out on paper."""
    cell = keras.layers.GRUCell(1)
    cell.build((None, 1))
    cell.kernel.assign([[0.0, 0.0, 1.0]])  # x feeds only the candidate
    cell.recurrent_kernel.assign([[0.0, 0.0, 2.0]])
    cell.bias.assign([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    weights = adapter.cell_weights(cell, "float32")
    # z = r = sigmoid(0) = 0.5; candidate = tanh(x + r * 2h) = tanh(1 + 0.5) ; h' = 0.5 h + 0.5 cand.
    h = rnn.gru_step(rnn.project_inputs(weights, np.array([[1.0]], "float32")), np.array([[0.5]], "float32"),
                     weights)
    np.testing.assert_allclose(h, [[0.25 + 0.5 * np.tanh(1.5)]], atol=1e-6)


def test_split_kernel_rows_add_up_to_the_whole_projection():
    cell = built_cell("gru", 5, 4)
    whole, split = adapter.cell_weights(cell, "float32"), adapter.cell_weights(cell, "float32", split_at=2)
    x = np.random.default_rng(1).normal(size=(3, 5)).astype("float32")
    parts = rnn.project_inputs(split, x[:, :2]) + x[:, 2:] @ np.asarray(split["kernel_rest"])
    expected = x @ np.asarray(cell.kernel) + np.asarray(cell.bias)[0]  # the input's share, input bias (row 0)
    np.testing.assert_allclose(parts, expected, atol=1e-5)
    np.testing.assert_allclose(rnn.project_inputs(whole, x), expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_luong_whole_target_loop_equals_the_keras_layer(kind, monkeypatch):
    """Without input feeding the fast decoder runs its own loop on a CPU and the Keras layer on a GPU:
    both give the reference `Decoder`'s teacher-forced call."""
    keras.utils.set_random_seed(0)
    encoder = Encoder(11, 4, 6, rnn=kind)
    outputs, state, mask = encoder(np.array([[5, 6, 7, 0], [3, 4, 5, 6]]))
    decoder = luong_decoder(13, 4, 6, input_feeding=False, rnn=kind)
    target_in = np.array([[1, 4, 9, 0, 0], [1, 12, 3, 7, 2]])
    reference = decoder(target_in, outputs, state, mask)  # builds; the oracle
    ours = fast_decoder.teacher_forced(decoder, target_in, outputs, state, mask)
    monkeypatch.setattr("tfattn.tier.gpu_visible", lambda: True)  # as on a GPU
    keras_layer = fast_decoder.teacher_forced(decoder, target_in, outputs, state, mask)
    for got in (ours, keras_layer):
        for a, b in zip(got, reference):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional,num_layers", [(True, 1), (False, 1), (True, 2)])
def test_encoder_loop_equals_the_keras_layers(kind, bidirectional, num_layers):
    """The fast encoder runs `rnn.run_masked` (on a CPU): the outputs and state of the Keras layers."""
    keras.utils.set_random_seed(1)
    encoder = Encoder(11, 4, 6, rnn=kind, bidirectional=bidirectional, num_layers=num_layers)
    # The last row has padding between its tokens: each direction skips it, as the Keras layers do.
    source = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8], [9, 0, 0, 0, 0], [4, 0, 6, 2, 0]])
    keras_outputs, keras_state, _ = encoder(source)
    outputs, state, _ = fast_encoder.encode(encoder, source)
    assert np.all(outputs.numpy()[source == 0] == 0.0)  # padding positions output zeros
    np.testing.assert_allclose(outputs, keras_outputs, atol=1e-5)
    for name in state:
        np.testing.assert_allclose(state[name], keras_state[name], atol=1e-5)
    # A sentence without padding, said to have none: the loop without masks, the same numbers.
    outputs, state, _ = fast_encoder.encode(encoder, source[1:2], padded=False)
    keras_outputs, keras_state, _ = encoder(source[1:2])
    np.testing.assert_allclose(outputs, keras_outputs, atol=1e-5)
    for name in state:
        np.testing.assert_allclose(state[name], keras_state[name], atol=1e-5)


def test_gru_step_splits_its_gates_with_three_split_ops_and_no_slicing():
    # One step of a decoding or encoding loop: the gates are cut by sizes known while tracing, so
    # no graph nodes work them out at every step (keras' split at an index added about 20).
    import tensorflow as tf

    layer = keras.layers.GRU(3)
    layer.build((None, None, 2))
    weights = adapter.cell_weights(layer.cell, "float32")
    step = tf.function(lambda x, h: rnn.gru_step(x, h, weights)).get_concrete_function(
        tf.TensorSpec([None, 9]), tf.TensorSpec([None, 3]))
    kinds = [op.type for op in step.graph.get_operations()]
    assert kinds.count("SplitV") == 2 and kinds.count("Split") == 1
    assert "StridedSlice" not in kinds
    assert kinds.count("Sub") == 1  # `1 - z`, and no size arithmetic



@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("padded", [True, False])  # False: the caller says there is no padding
def test_a_batch_without_padding_skips_the_masks_with_the_same_outputs(kind, padded):
    """In inference `run_masked` steps a batch without padding without reading masks: the outputs
    and final states of Keras' RNN layers over the same cells (the second direction reversed)."""
    import tensorflow as tf

    cells = [built_cell(kind, 5, 4), built_cell(kind, 5, 4)]
    x = np.random.default_rng(2).normal(size=(2, 3, 5)).astype("float32")
    directions = [(rnn.project_inputs(w, x), w, reverse)
                  for w, reverse in zip([adapter.cell_weights(c, "float32") for c in cells], (False, True))]
    mask = tf.ones([2, 3], tf.bool)
    run = tf.function(lambda: rnn.run_masked(kind, directions, mask, padded=padded))
    kinds = [op.type for op in run.get_concrete_function().graph.get_operations()]
    assert ("If" in kinds or "StatelessIf" in kinds) == padded  # the branch runs only when padding may be
    got = run()
    for cell, reverse, (got_outputs, got_state) in zip(cells, (False, True), zip(*got)):
        layer = keras.layers.RNN(cell, return_sequences=True, return_state=True, go_backwards=reverse)
        want_outputs, *want_states = layer(x)  # a zero initial state, as run_masked's
        want_outputs = np.flip(want_outputs, axis=1) if reverse else want_outputs  # go_backwards: last first
        np.testing.assert_allclose(got_outputs, want_outputs, atol=1e-6)
        for name, want in zip(("h", "c"), want_states):
            np.testing.assert_allclose(got_state[name], want, atol=1e-6)
    np.testing.assert_allclose(got[0][1][:, 0], got[1][1]["h"], atol=1e-6)  # backward: ends at position 0


def test_scan_runs_the_step_over_time_in_order():
    import tensorflow as tf

    # A running sum: the state adds x_t; the outputs are the sum so far and 2 x_t.
    # Sentence 0 reads 1, 2, 3 (sums 1, 3, 6); sentence 1 reads 10, 20, 30 (sums 10, 30, 60).
    inputs = tf.constant([[[1.0], [2.0], [3.0]], [[10.0], [20.0], [30.0]]])  # (batch 2, t_out 3, 1)

    def step(x, state):
        total = state + x
        return total, 2.0 * x, total

    sums, doubled = rnn.scan(step, inputs, tf.zeros([2, 1]))
    np.testing.assert_array_equal(sums[..., 0], [[1, 3, 6], [10, 30, 60]])
    np.testing.assert_array_equal(doubled[..., 0], [[2, 4, 6], [20, 40, 60]])
    (only,) = rnn.scan(lambda x, s: (x, s), inputs, tf.zeros([2, 1]), n_outputs=1)
    np.testing.assert_array_equal(only, inputs)
