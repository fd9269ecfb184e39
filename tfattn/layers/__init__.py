"""The Keras layers: attention, `Encoder` and `Decoder`, `AttentionCell`, multi-head attention, positions
and the Transformer. Pure Keras; they know nothing of text or training."""

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.layers.baseline import NoAttentionDecoder
from tfattn.layers.cell import AttentionCell
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.positions import LearnedPositions, RelativePositions, SinusoidalPositions
from tfattn.layers.transformer import TransformerBlock, TransformerDecoder, TransformerEncoder, transformer_layers

# `tfattn` exports each of these too (tests/test_package.py holds the two lists and the README together).
__all__ = ["AttentionCell", "BahdanauAttention", "Decoder", "Encoder", "LearnedPositions", "LuongAttention",
           "MultiHeadAttention", "NoAttentionDecoder", "RelativePositions", "ScoredAttention", "SinusoidalPositions",
           "TransformerBlock", "TransformerDecoder", "TransformerEncoder", "transformer_layers"]
