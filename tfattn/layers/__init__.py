"""The Keras layers: attention, `Encoder`, `Decoder` and `AttentionCell`. Pure Keras; they know nothing
of text or training."""

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.layers.cell import AttentionCell
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder

__all__ = ["AttentionCell", "BahdanauAttention", "Decoder", "Encoder", "LuongAttention", "ScoredAttention"]
