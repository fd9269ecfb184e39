"""An argument a layer would ignore is refused by name (`tfattn.layers.checks.refuse_unused`), never
kept in `get_config` while the layer does something else; at its default it is always taken."""

import pytest

from tfattn.layers.decoder import Decoder
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
