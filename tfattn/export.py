"""A self-contained SavedModel: strings in; text, tokens and attention out.

The export holds the model's weights, both tokenizers' vocabularies and text processing, and the
decoding loop, all as TensorFlow graphs. Loading it needs `tensorflow` and `tensorflow_text` (for the
text ops), not `tfattn`:

    import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the text ops)
    translate = tf.saved_model.load(path).signatures["translate"]
    out = translate(text=tf.constant(["¿todavía está en casa?"]))

Signature `translate` (also `serving_default`), greedy decoding:
    input   text          string  [batch]
    outputs text          string  [batch]           the translation, detokenized
            tokens        string  [batch, t_out]    output tokens, `[END]` included, "" padding
            input_tokens  string  [batch, t_in]     source tokens as the encoder saw them, "" padding
            attention     float32 [batch, t_out, t_in]
            length        int32   [batch]           non-padding entries of `tokens`

Input is truncated to the source tokenizer's `max_length` tokens (`[START]` and `[END]` included).
"""

import json
import os

import tensorflow as tf

from tfattn.decoding import DecodeConfig, greedy
from tfattn.text import PAD_ID

CONFIG_FILE = "tfattn_config.json"
TEXT_SIGNATURE = tf.TensorSpec([None], tf.string, name="text")


class Translator(tf.Module):
    """A model with its tokenizers: translates strings, in Python or as an exported SavedModel.

    Args:
        model: a `Seq2Seq` model.
        source_tokenizer, target_tokenizer: `tfattn.text.Tokenizer`s the model was trained with.
        decode_config: `DecodeConfig` for output length limits; defaults to `DecodeConfig()`.
        config: optional JSON-serializable dict saved with the export (`tfattn_config.json`).

    Example:

    >>> translator = Translator(model, source_tokenizer, target_tokenizer)
    >>> translator.translate(tf.constant(["tue 5 march 2019"]))["text"]
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'2019-03-05'], dtype=object)>
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, decode_config=None, config=None):
        super().__init__(name="translator")
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.decode_config = decode_config or DecodeConfig(max_length=target_tokenizer.max_length)
        self.config = dict(config or {})

    @tf.function(input_signature=[TEXT_SIGNATURE])
    def translate(self, text):
        """Greedy translation of a `[batch]` string tensor; see the module docstring for outputs."""
        # 1. Text -> source ids, in the graph; at least two columns, even for an empty batch.
        input_tokens = self.source_tokenizer.tokenize(text)  # ragged (batch, None)
        source = self.source_tokenizer.lookup(input_tokens).to_tensor(PAD_ID)  # (batch, t_in)
        source = tf.pad(source, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(source)[1])]])
        # 2. Decode; 3. ids -> tokens and text.
        out = greedy(self.model, source, self.decode_config)
        return self._outputs(out, input_tokens.to_tensor(""))

    def _outputs(self, out, input_tokens):
        tokens = self.target_tokenizer.ids_to_tokens(out["ids"])  # (batch, t_out), "" for padding
        return {
            "text": self.target_tokenizer.detokenize(out["ids"]),
            "tokens": tokens,
            "input_tokens": input_tokens,
            "attention": out["attention"],
            "length": out["length"],
        }

    def __call__(self, texts):
        """Translates a list of str; returns the outputs as NumPy arrays."""
        out = self.translate(tf.constant(list(texts), tf.string))
        return {k: v.numpy() for k, v in out.items()}


def export(translator, path):
    """Writes `translator` as a SavedModel at `path` with the `translate` signature.

    Also writes `tfattn_config.json` (the translator's config, the tokenizers' settings and the
    output length limits) as an asset and beside `saved_model.pb`. Returns `path`.
    """
    os.makedirs(path, exist_ok=True)
    config_path = os.path.join(path, CONFIG_FILE)
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(export_config(translator), f, indent=2, ensure_ascii=False)
    translator.config_file = tf.saved_model.Asset(config_path)
    signature = translator.translate.get_concrete_function()
    tf.saved_model.save(translator, path, signatures={"translate": signature, "serving_default": signature})
    return path


def export_config(translator):
    """The JSON description saved with an export."""
    src, tgt = translator.source_tokenizer, translator.target_tokenizer
    settings = lambda tok: {k: v for k, v in tok.get_config().items() if k != "vocabulary"}  # noqa: E731
    return {
        **translator.config,
        "source_tokenizer": {**settings(src), "vocab_size": src.vocab_size},
        "target_tokenizer": {**settings(tgt), "vocab_size": tgt.vocab_size},
        "decode": vars(translator.decode_config),
        "signatures": {"translate": ["text", "tokens", "input_tokens", "attention", "length"]},
    }


def load(path):
    """Loads an export (any process with `tensorflow` and `tensorflow_text`); returns the object."""
    import tensorflow_text  # noqa: F401  (registers the text ops the graph uses)

    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"Not a SavedModel directory (no saved_model.pb). Received: path={path!r}")
    return tf.saved_model.load(path)
