"""The Keras layers: attention, `Encoder` and `Decoder`, `AttentionCell`, multi-head attention, positions
and the Transformer. Pure Keras; they know nothing of text or training.

Each name is imported from its module on first use, so that what needs only a small module of this
package (the `tfattn` command reads `tfattn.layers.options` for its flags' choices) does not load
Keras. `register()` imports them all: Keras then knows every tfattn layer by name, which
`keras.saving.load_model` needs; `import tfattn` calls it.
"""

_EXPORTS = {
    "AttentionCell": "cell",
    "BahdanauAttention": "bahdanau",
    "Decoder": "decoder",
    "Encoder": "encoder",
    "LearnedPositions": "positions",
    "LuongAttention": "luong",
    "MultiHeadAttention": "multihead",
    "NoAttentionDecoder": "baseline",
    "RelativePositions": "positions",
    "ScoredAttention": "attention",
    "SinusoidalPositions": "positions",
    "TransformerBlock": "transformer",
    "TransformerDecoder": "transformer",
    "TransformerEncoder": "transformer",
    "transformer_layers": "transformer",
}

__all__ = sorted(_EXPORTS)


def register():
    """Imports every layer module, registering the layers with Keras (`keras.saving.get_registered_object`);
    returns them by name."""
    from tfattn.layers import (attention, bahdanau, baseline, cell, decoder, encoder, luong, multihead, positions,
                               transformer)

    return {"attention": attention, "bahdanau": bahdanau, "baseline": baseline, "cell": cell, "decoder": decoder,
            "encoder": encoder, "luong": luong, "multihead": multihead, "positions": positions,
            "transformer": transformer}


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfattn.layers' has no attribute {name!r}")
    value = getattr(register()[_EXPORTS[name]], name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
