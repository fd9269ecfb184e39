"""Tests for tfattn.layers.encoder: shapes, the padding mask, validation and padding invariance."""

import keras
import numpy as np
import pytest

from tfattn.layers.encoder import Encoder

VOCAB, EMB, UNITS = 12, 4, 6
# Sentence 0 is 3 tokens long, padded to the 5 of sentence 1.
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])
SHAPES = [(rnn, bidirectional, num_layers) for rnn in ("gru", "lstm") for bidirectional in (True, False)
          for num_layers in (1, 2)]


def make_encoder(rnn, bidirectional, num_layers=1, units=UNITS):
    return Encoder(VOCAB, EMB, units, rnn=rnn, bidirectional=bidirectional, num_layers=num_layers)


@pytest.mark.parametrize("rnn, bidirectional, num_layers", SHAPES)
def test_output_shapes_state_and_mask(rnn, bidirectional, num_layers):
    outputs, state, mask = make_encoder(rnn, bidirectional, num_layers)(SOURCE)
    assert outputs.shape == (2, 5, UNITS)
    assert sorted(state) == (["h"] if rnn == "gru" else ["c", "h"])
    assert all(s.shape == (2, UNITS) for s in state.values())
    assert mask.dtype == "bool"
    np.testing.assert_array_equal(mask, [[True, True, True, False, False], [True] * 5])


@pytest.mark.parametrize("rnn, bidirectional, num_layers", SHAPES)
def test_padding_invariance(rnn, bidirectional, num_layers):
    """A sentence alone and the same sentence padded in a batch get the same annotations and state."""
    encoder = make_encoder(rnn, bidirectional, num_layers)
    outputs, state, _ = encoder(SOURCE)
    alone_outputs, alone_state, alone_mask = encoder(SOURCE[:1, :3])  # (1, 3): no padding at all
    assert alone_mask.numpy().all()
    np.testing.assert_allclose(outputs[0, :3], alone_outputs[0], atol=1e-5)
    for name in state:
        np.testing.assert_allclose(state[name][0], alone_state[name][0], atol=1e-5)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_bidirectional_state_is_forward_last_then_backward_first(rnn):
    # The final forward state read the last real token; the final backward state read the first one.
    # Their h are the outputs there: forward half at position 2 (sentence 0) or 4, backward half at 0.
    outputs, state, _ = make_encoder(rnn, bidirectional=True)(SOURCE)
    half, last = UNITS // 2, [2, 4]
    for b in range(2):
        np.testing.assert_allclose(state["h"][b, :half], outputs[b, last[b], :half], atol=1e-6)
        np.testing.assert_allclose(state["h"][b, half:], outputs[b, 0, half:], atol=1e-6)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_unidirectional_state_is_the_output_at_the_last_real_token(rnn):
    outputs, state, _ = make_encoder(rnn, bidirectional=False)(SOURCE)
    np.testing.assert_allclose(state["h"][0], outputs[0, 2], atol=1e-6)
    np.testing.assert_allclose(state["h"][1], outputs[1, 4], atol=1e-6)


def test_units_must_be_even_when_bidirectional():
    with pytest.raises(ValueError, match=r"even.*units=7"):
        Encoder(VOCAB, EMB, 7, bidirectional=True)
    outputs, _, _ = Encoder(VOCAB, EMB, 7, bidirectional=False)(SOURCE)  # fine one way
    assert outputs.shape == (2, 5, 7)


def test_unknown_rnn_is_an_error():
    with pytest.raises(ValueError, match=r"rnn='rnn'"):
        Encoder(VOCAB, EMB, UNITS, rnn="rnn")


@pytest.mark.parametrize("num_layers", [0, -1, 1.5])
def test_num_layers_must_be_a_positive_int(num_layers):
    with pytest.raises(ValueError, match=f"num_layers={num_layers!r}"):
        Encoder(VOCAB, EMB, UNITS, num_layers=num_layers)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_symbolic_call_gives_the_output_spec(rnn):
    outputs, state, mask = make_encoder(rnn, True)(keras.Input((None,), dtype="int32"))
    assert tuple(outputs.shape) == (None, None, UNITS)
    assert {name: tuple(s.shape) for name, s in state.items()} == {
        name: (None, UNITS) for name in (["h"] if rnn == "gru" else ["h", "c"])
    }
    assert tuple(mask.shape) == (None, None) and mask.dtype == "bool"


def test_dropout_is_active_only_when_training():
    encoder = Encoder(VOCAB, EMB, UNITS, dropout=0.5)
    first, _, _ = encoder(SOURCE)
    again, _, _ = encoder(SOURCE)
    np.testing.assert_array_equal(first, again)
    trained, _, _ = encoder(SOURCE, training=True)
    assert not np.allclose(trained, first)
