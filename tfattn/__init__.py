"""tfattn: attention-based sequence-to-sequence translation with Keras 3 and TensorFlow.

Layers (reusable in any Keras model): `BahdanauAttention`, `LuongAttention`, `Encoder`, `Decoder`.
Model: `Seq2Seq`, built by `make_model(ModelConfig(...), source_vocab_size, target_vocab_size)`.
Text: `Tokenizer` (in-graph, tensorflow-text). Training: `fit`, `Trainer`, `make_train_step`.
Decoding and serving: `greedy`, `beam_search`, `sample`, `Translator`, `export`, `load`.

Names are imported on first use, so `import tfattn.data.dates` or `tfattn --help` does not load TensorFlow.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "BahdanauAttention": "layers.attention",
    "LuongAttention": "layers.attention",
    "ScoredAttention": "layers.attention",
    "DataConfig": "data.pipeline",
    "make_dataset": "data.pipeline",
    "Decoder": "layers.decoder",
    "DecodeConfig": "decoding.search",
    "greedy": "decoding.search",
    "beam_search": "decoding.search",
    "sample": "decoding.search",
    "Encoder": "layers.encoder",
    "Translator": "serving.translator",
    "export": "serving.translator",
    "load": "serving.translator",
    "ModelConfig": "model",
    "Seq2Seq": "model",
    "make_model": "model",
    "masked_accuracy": "model",
    "masked_loss": "model",
    "Tokenizer": "data.text",
    "TrainConfig": "training.trainer",
    "fit": "training.trainer",
    "Trainer": "training.trainer",
    "make_train_step": "training.trainer",
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
