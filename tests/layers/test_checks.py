"""An argument a layer would ignore is refused by name (`tfattn.layers.checks.refuse_unused`), never
kept in `get_config` while the layer does something else; at its default it is always taken. A token
id outside the vocabulary is refused by name and position (`tfattn.layers.checks.token_ids`)."""

import re

import numpy as np
import pytest

from tfattn.layers.baseline import NoAttentionDecoder
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.luong import LuongAttention
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.transformer import TransformerDecoder, TransformerEncoder

# (layer, the argument and a value other than its default, where it applies, where it does not)
CASES = [
    (LuongAttention, {"window": 3}, {"local": "m"}, {"local": None}),
    (LuongAttention, {"units": 5}, {"score": "concat"}, {"score": "general"}),
    (LuongAttention, {"units": 5}, {"local": "p"}, {"score": "dot"}),
    (lambda **kw: Decoder(20, 4, 8, **kw), {"input_feeding": False}, {"attention": "luong"},
     {"attention": "bahdanau"}),
    (MultiHeadAttention, {"relative_values": False}, {"relative_clip": 2}, {}),
    (lambda **kw: TransformerEncoder(20, 8, num_heads=2, **kw), {"relative_clip": 4}, {"positions": "relative"},
     {"positions": "learned"}),
    (lambda **kw: TransformerDecoder(20, 8, num_heads=2, **kw), {"relative_clip": 4}, {"positions": "relative"},
     {"positions": "sinusoidal"}),
]
DEFAULTS = {"window": 10, "units": None, "input_feeding": True, "relative_values": True, "relative_clip": 16}


@pytest.mark.parametrize("layer, option, applies, ignored", CASES)
def test_an_argument_the_layer_would_ignore_is_refused_by_name(layer, option, applies, ignored):
    (name, value), = option.items()
    assert layer(**option, **applies).get_config()[name] == value
    assert layer(**{name: DEFAULTS[name]}, **ignored).get_config()[name] == DEFAULTS[name]
    with pytest.raises(ValueError, match=rf"^{name} applies to .* only\. Received: {name}={value!r} with "):
        layer(**option, **ignored)


# -- token ids outside the vocabulary (`tfattn.layers.checks.token_ids`) ----------------------------

VOCAB = 20  # ids 0..19


def _encoded(encoder):
    return encoder(np.array([[1, 5, 2, 0]], "int32"))  # outputs (1, 4, units), state, mask


def _teacher_forced(decoder, encoder):
    def call(ids):
        outputs, state, mask = _encoded(encoder)
        return decoder(ids, outputs, state, mask)
    return call


def _stepped(decoder, encoder):
    outputs, state, mask = _encoded(encoder)
    decoder(np.array([[1, 2]], "int32"), outputs, state, mask)  # builds, as a model does before it steps

    def call(ids):
        return decoder.step(ids[:, 0], decoder.initial_state(state), decoder.prepare_memory(outputs, mask))
    return call


# (what is called, the name of its ids); each a fresh layer of VOCAB ids
CALLS = {
    "Encoder": (lambda: Encoder(VOCAB, 4, 8), "source"),
    "TransformerEncoder": (lambda: TransformerEncoder(VOCAB, 8, num_heads=2), "source"),
    "Decoder": (lambda: _teacher_forced(Decoder(VOCAB, 4, 8), Encoder(VOCAB, 4, 8)), "target_in"),
    "Decoder.step": (lambda: _stepped(Decoder(VOCAB, 4, 8), Encoder(VOCAB, 4, 8)), "token"),
    "NoAttentionDecoder": (lambda: _teacher_forced(NoAttentionDecoder(VOCAB, 4, 8), Encoder(VOCAB, 4, 8)),
                           "target_in"),
    "NoAttentionDecoder.step": (lambda: _stepped(NoAttentionDecoder(VOCAB, 4, 8), Encoder(VOCAB, 4, 8)), "token"),
    "TransformerDecoder": (lambda: _teacher_forced(TransformerDecoder(VOCAB, 8, num_heads=2),
                                                   TransformerEncoder(VOCAB, 8, num_heads=2)), "target_in"),
    "TransformerDecoder.step": (lambda: _stepped(TransformerDecoder(VOCAB, 8, num_heads=2),
                                                 TransformerEncoder(VOCAB, 8, num_heads=2)), "token"),
}


@pytest.mark.parametrize("what", list(CALLS))
@pytest.mark.parametrize("bad, shown", [(20, "20"), (-3, "-3"), (1.5, "1.5")])
def test_a_token_id_outside_the_vocabulary_is_refused_by_name_and_position(what, bad, shown):
    """Keras' Embedding would look up row 17 for -3 (its take wraps), row 1 for 1.5 (truncated), and
    stop in TensorFlow's gather kernel for 20 on a CPU (on a GPU it returns zeros)."""
    make, name = CALLS[what]
    call = make()
    dtype = "float32" if isinstance(bad, float) else "int32"
    position = (0,) if name == "token" else (0, 1)  # the step reads column 0 of the batch

    def ids(x):
        batch = np.array([[1, 4, 2]], dtype)
        batch[0, position[-1]] = x
        return batch

    call(ids(19))  # the last id is taken (a float 19.0 too)
    received = f"Received: {name}[{', '.join(map(str, position))}]={shown}"
    with pytest.raises(ValueError, match=re.escape(f"{name} must hold whole token ids from 0 to vocab_size - 1 = 19. "
                                                   f"{received}")):
        call(ids(bad))
