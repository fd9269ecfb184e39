"""`Seq2Seq.attention_heads`: every layer's every head of the cross-attention, for plots, and its
documented reduction: the attention a model returns is the mean over the last layer's heads."""

import numpy as np
import pytest

import tfattn
from tfattn.layers.multihead import MultiHeadAttention

SOURCE = np.array([[1, 4, 5, 6, 2, 0, 0], [1, 7, 8, 9, 10, 11, 2]])
TARGET_IN = np.array([[1, 7, 8, 3], [1, 5, 0, 0]])


@pytest.mark.parametrize("fields, shape", [
    (dict(attention="luong", heads=2), (2, 1, 2, 4, 7)),
    (dict(attention="luong", heads=4, input_feeding=False), (2, 1, 4, 4, 7)),
    (dict(attention="transformer", heads=2, num_layers=3), (2, 3, 2, 4, 7)),
    (dict(attention="bahdanau"), (2, 1, 1, 4, 7)),
    (dict(attention="none"), (2, 1, 1, 4, 7)),
])
def test_heads_shape_and_the_documented_reduction(fields, shape):
    embedding = {} if fields.get("attention") == "transformer" else {"embedding_dim": 8}  # its embeddings: units
    model = tfattn.make_model(tfattn.ModelConfig(units=8, **embedding, **fields), 20, 30)
    _, attention = model((SOURCE, TARGET_IN))
    heads = np.asarray(model.attention_heads(SOURCE, TARGET_IN))
    assert heads.shape == shape
    np.testing.assert_allclose(heads[:, -1].mean(axis=1), np.asarray(attention), atol=1e-6)
    if fields["attention"] == "none":
        assert not heads.any()
        return
    np.testing.assert_allclose(heads.sum(axis=-1), 1.0, atol=1e-5)  # every head, every step
    assert not heads[0, ..., 5:].any()  # source padding: exactly zero in every head


def test_rnn_heads_are_the_layers_heads_for_the_decoders_own_queries():
    """The Luong queries h_t, stepped one by one, given to the layer: the same heads."""
    model = tfattn.make_model(tfattn.ModelConfig(attention="luong", heads=2, units=8, embedding_dim=8), 20, 30)
    heads = np.asarray(model.attention_heads(SOURCE, TARGET_IN))[:, 0]  # (batch, heads, t_out, t_in)
    memory, state = model.encode(SOURCE)
    layer = model.decoder.attention_layer
    assert isinstance(layer, MultiHeadAttention)
    for t in range(TARGET_IN.shape[1]):
        _, _, state = model.decoder.step(TARGET_IN[:, t], state, memory)
        query = state["h"][:, None, :]  # (batch, 1, units): h_t after the RNN, Luong's query
        _, want = layer(query, memory["values"], value_mask=memory["mask"], prepared_keys=memory["keys"],
                        return_heads=True)
        np.testing.assert_allclose(heads[:, :, t], np.asarray(want)[:, :, 0], atol=1e-5)
