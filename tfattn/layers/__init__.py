"""The Keras layers: attention, `Encoder` and `Decoder`, `AttentionCell`, multi-head attention, positions
and the Transformer. Pure Keras; they know nothing of text or training."""

from tfattn.layers.attention import ScoredAttention
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.cell import AttentionCell
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.positions import LearnedPositions, RelativePositions, SinusoidalPositions
from tfattn.layers.transformer import TransformerDecoder, TransformerEncoder, transformer_layers

__all__ = ["AttentionCell", "BahdanauAttention", "Decoder", "Encoder", "LearnedPositions", "LuongAttention",
           "MultiHeadAttention", "RelativePositions", "ScoredAttention", "SinusoidalPositions", "TransformerDecoder",
           "TransformerEncoder", "transformer_layers"]
