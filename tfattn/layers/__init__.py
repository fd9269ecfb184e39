"""The Keras layers: attention, `Encoder` and `Decoder`. Pure Keras; they know nothing of text or training."""

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder

__all__ = ["BahdanauAttention", "Decoder", "Encoder", "LuongAttention", "ScoredAttention"]
