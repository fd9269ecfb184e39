"""The one adapter between the tiers (`tfattn.accel.adapter`): it knows every option of the layers the
fast tier writes out, and what it reads of them is what the layers hold."""

import inspect

import keras
import numpy as np
import pytest

from tfattn.accel import adapter
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.luong import LuongAttention


def constructor_options(cls):
    """The arguments of `cls.__init__` and of its bases' up to Keras' `Layer` (ScoredAttention's dropout,
    seed, probability)."""
    options = set()
    for klass in cls.__mro__[: cls.__mro__.index(keras.layers.Layer)]:
        if "__init__" in vars(klass):
            options |= set(inspect.signature(klass.__init__).parameters) - {"self", "kwargs"}
    return options


@pytest.mark.parametrize("cls", list(adapter.KNOWN), ids=lambda cls: cls.__name__)
def test_the_adapter_knows_every_option_of_the_layers_it_writes_out(cls):
    # A layer that gains an option fails here until the adapter says what the fast tier does with it.
    assert constructor_options(cls) == set(adapter.KNOWN[cls])


def test_a_new_option_is_caught():
    class Gated(LuongAttention):  # an option the fast tier would not know of
        def __init__(self, gate=0.5, **kwargs):
            super().__init__(**kwargs)
            self.gate = gate

    assert constructor_options(Gated) - set(adapter.KNOWN[LuongAttention]) == {"gate"}


def test_the_views_hold_the_layers_own_weights():
    encoder, decoder = Encoder(20, 4, 6), Decoder(30, 4, 6, attention="luong")
    outputs, state, mask = encoder(np.array([[3, 4, 0]]))
    decoder(np.array([[2, 5]]), outputs, state, mask)
    view = adapter.decoder_view(decoder)
    assert view.style == "luong" and view.feeds_input and view.vocab_size == 30 and view.embedding_dim == 4
    assert view.cell is decoder.rnn_layer.cell and view.logits_kernel is decoder.logits_dense.kernel
    assert view.hidden_bias is None  # Luong's W_c has no bias
    assert [len(cells) for cells in adapter.encoder_view(encoder).cells] == [2]  # one layer, both directions
    weights = adapter.cell_weights(view.cell, "float32", split_at=4)
    np.testing.assert_array_equal(np.concatenate([weights["kernel"], weights["kernel_rest"]]), view.cell.kernel.numpy())


@pytest.mark.parametrize("layer, kind", [
    (BahdanauAttention(4), "additive"),
    (LuongAttention("dot"), "luong"),
    (LuongAttention("cosine"), None),  # the layer's own call
    (LuongAttention("general", local="m"), None),
    (LuongAttention("general", probability="hard"), None),
    (BahdanauAttention(4, dropout=0.1), None),
])
def test_attention_kind_says_which_layers_the_fast_tier_writes_out(layer, kind):
    assert adapter.attention_kind(layer) == kind
