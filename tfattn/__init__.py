"""tfattn: attention-based sequence-to-sequence translation with Keras 3 and TensorFlow.

Layers (reusable in any Keras model): `BahdanauAttention`, `LuongAttention`, `Encoder`, `Decoder`.
Model: `Seq2Seq`, built by `make_model(ModelConfig(...), source_vocab_size, target_vocab_size)`.
Text: `Tokenizer` (in-graph, tensorflow-text). Training: `fit`, `Trainer`, `make_train_step`.
Decoding and serving: `greedy`, `beam_search`, `sample`, `Translator`, `export`, `load`.

Names are imported on first use, so `import tfattn.dates` or `tfattn --help` does not load TensorFlow.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "BahdanauAttention": "attention",
    "LuongAttention": "attention",
    "ScoredAttention": "attention",
    "DataConfig": "data",
    "make_dataset": "data",
    "Decoder": "decoder",
    "DecodeConfig": "decoding",
    "greedy": "decoding",
    "beam_search": "decoding",
    "sample": "decoding",
    "Encoder": "encoder",
    "Translator": "serving",
    "export": "serving",
    "load": "serving",
    "ModelConfig": "model",
    "Seq2Seq": "model",
    "make_model": "model",
    "masked_accuracy": "model",
    "masked_loss": "model",
    "Tokenizer": "text",
    "TrainConfig": "train",
    "fit": "train",
    "Trainer": "train",
    "make_train_step": "train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfattn' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tfattn.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
