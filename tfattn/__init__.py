"""tfattn: attention-based sequence-to-sequence translation with Keras 3 and TensorFlow.

Layers (reusable in any Keras model): `BahdanauAttention`, `LuongAttention`, `Encoder`, `Decoder`.
Model: `Seq2Seq`, built by `make_model(ModelConfig(...), source_vocab_size, target_vocab_size)`.
Text: `Tokenizer` (in-graph, tensorflow-text). Training: `fit`, `make_train_step`.
Decoding and serving: `greedy`, `Translator`, `export`, `load`.
"""

from tfattn.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.data import DataConfig, make_dataset
from tfattn.decoder import Decoder
from tfattn.decoding import DecodeConfig, greedy
from tfattn.encoder import Encoder
from tfattn.export import Translator, export, load
from tfattn.model import ModelConfig, Seq2Seq, make_model, masked_accuracy, masked_loss
from tfattn.text import Tokenizer
from tfattn.train import TrainConfig, fit, make_train_step

__version__ = "0.1.0"

__all__ = [
    "BahdanauAttention",
    "DataConfig",
    "DecodeConfig",
    "Decoder",
    "Encoder",
    "LuongAttention",
    "ModelConfig",
    "ScoredAttention",
    "Seq2Seq",
    "Tokenizer",
    "TrainConfig",
    "Translator",
    "export",
    "fit",
    "greedy",
    "load",
    "make_dataset",
    "make_model",
    "make_train_step",
    "masked_accuracy",
    "masked_loss",
]
