"""tfattn: attention-based sequence-to-sequence translation with Keras 3 and TensorFlow.

Layers (reusable in any Keras model), every one of `tfattn.layers`: `BahdanauAttention`,
`LuongAttention`, `MultiHeadAttention`, `Encoder`, `Decoder`, `NoAttentionDecoder`, `AttentionCell`
(attention around any Keras RNN cell, for `keras.layers.RNN`), the Transformer's layers and positions.
Model: `Seq2Seq`, built by `make_model(ModelConfig(...), source_vocab_size, target_vocab_size)`.
Text: `Tokenizer` (in-graph, tensorflow-text). Training: `fit`, `Trainer`, `make_train_step`,
`make_strategy` (several devices or machines, `tf.distribute`), `TranslationMetrics` (validation BLEU
and chrF as a Keras callback, for `model.fit`).
Decoding and serving: `greedy`, `beam_search`, `sample`, `Translator`, `export`, `load`,
`export_litert` (a LiteRT model of greedy translation, `tfattn.serving.litert`).

`import tfattn` registers every layer with Keras, so `keras.saving.load_model` reads a `.keras` file
that holds them. The `tfattn` command is the exception: it imports TensorFlow only for the commands
that need it, so `tfattn --help` starts at once. Other names are imported on first use. The tier
switch is `tfattn.tier` (`set_accel`, `accel_enabled`, `accel_scope`).
"""

import importlib
import os
import sys

__version__ = "0.1.0"

_EXPORTS = {
    **{name: "layers" for name in (  # every name of tfattn.layers.__all__
        "AttentionCell", "BahdanauAttention", "Decoder", "Encoder", "LearnedPositions", "LuongAttention",
        "MultiHeadAttention", "NoAttentionDecoder", "RelativePositions", "ScoredAttention", "SinusoidalPositions",
        "TransformerBlock", "TransformerDecoder", "TransformerEncoder", "transformer_layers")},
    "DataConfig": "data.pipeline",
    "make_dataset": "data.pipeline",
    "DecodeConfig": "search",
    "greedy": "search",
    "beam_search": "search",
    "sample": "search",
    "Translator": "serving.translator",
    "export": "serving.translator",
    "export_litert": "serving.litert",
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
    "TranslationMetrics": "training.callbacks",
    "make_strategy": "training.distributed",
}

__all__ = sorted(_EXPORTS) + ["tier"]


def _started_as_the_command():
    """Whether this process is the `tfattn` command, which imports lazily: the console script
    (`bin/tfattn`), or `python -m tfattn.cli` (while Python finds the module, `sys.argv[0]` is "-m")."""
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) == "tfattn" or first == "-m"


if not _started_as_the_command():
    from tfattn import layers as _layers  # noqa: E402

    _layers.register()  # every layer known to Keras by name (keras.saving.load_model)
from tfattn import tier  # noqa: E402  (the tier switch; imports nothing heavy)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfattn' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tfattn.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
