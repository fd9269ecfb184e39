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

Signature `translate_beam`, beam search with the GNMT length penalty `((5 + len) / 6) ** alpha`:
    inputs  text            string  [batch]
            beam_width      int32   []    clamped to [1, min(target vocabulary, 64)]
            length_penalty  float32 []    alpha, clamped to [0, 5]; NaN counts as 0
    outputs text, tokens, input_tokens, attention, length   as above, for the best hypothesis
            score           float32 [batch]       its length-normalized log-probability
            nbest_text      string  [batch, n]    all `n = beam_width` hypotheses, best first
            nbest_score     float32 [batch, n]

Input is truncated to the source tokenizer's `max_length` tokens (`[START]` and `[END]` included).
Output length is limited to `min(max_length, ratio * source tokens + extra)` (see `DecodeConfig`),
so decoding always ends. An empty batch gives empty outputs.
"""

import json
import os
import tempfile

import tensorflow as tf

from tfattn.decoding.search import DecodeConfig, beam_search, greedy
from tfattn.model import ensure_built
from tfattn.data.text import Tokenizer

CONFIG_FILE = "tfattn_config.json"
TEXT = tf.TensorSpec([None], tf.string, name="text")
BEAM_WIDTH = tf.TensorSpec([], tf.int32, name="beam_width")
LENGTH_PENALTY = tf.TensorSpec([], tf.float32, name="length_penalty")
OUTPUTS = ("text", "tokens", "input_tokens", "attention", "length")
BEAM_OUTPUTS = OUTPUTS + ("score", "nbest_text", "nbest_score")
MATMUL_DTYPES = (None, "float32", "bfloat16")
# The export's vocabulary projection, in column blocks (`Decoder.decoding_weights`). Per step of one
# sentence on a 2-core CPU (a 256 x 5,000 kernel, 100-step loops): one product 108 us with one
# thread per op and 122-128 us with TensorFlow's default threads; two blocks 66-70 and 137-140 us;
# four blocks 73 and 173-206 us. Two are the best, or close to it, with either setting.
LOGITS_BLOCKS = 2


class Translator(tf.Module):
    """A model with its tokenizers: translates strings, in Python or as an exported SavedModel.

    Args:
        model: a `Seq2Seq` model.
        source_tokenizer, target_tokenizer: `tfattn.data.text.Tokenizer`s the model was trained with.
        decode_config: `DecodeConfig` for output length limits; defaults to `DecodeConfig()` with
            the target tokenizer's `max_length`.
        config: optional JSON-serializable dict saved with the export (`tfattn_config.json`).
        matmul_dtype: `None` (or `"float32"`) or `"bfloat16"`: the dtype of the decoder step's
            matrix products (see `Decoder.decoding_weights`). On CPUs with AMX or AVX512-BF16,
            bfloat16 makes beam search faster (on spa-eng at batch 64, beam 4 1.15-1.25x; greedy
            from 0.95x to 1.15x over runs), not one sentence at a time, and changes 2-3% of the
            translations (BLEU unchanged there; the README has the figures). Elsewhere it gains
            nothing: on an AVX2 CPU TensorFlow's bfloat16 matmul takes as long as float32's and
            truncates its results toward zero. Defaults to `None`: float32 throughout.
        stored_weights: bool. Keep a copy of everything the decoder's step reads, made faster
            ahead (see `Decoder.decoding_weights`): what the previous token adds to a step in
            tables, the vocabulary projection in two column blocks, and, with bfloat16, the
            kernels in bfloat16. The translator then holds only these and the variables of the
            encoder and the attention layer (what the decoder's embedding and output layers hold
            is in the tables and blocks). On spa-eng (5,000 words a side, units 256) the export
            grows from 28 to 37 MB; single-sentence latency falls by about 15% and batch
            throughput rises by about 10%, with the same outputs. It is a snapshot, so `export`
            sets this and a translator of a model that goes on training must not. Defaults to
            `False`: the step reads the model's variables.

    Example:

    >>> translator = Translator(model, source_tokenizer, target_tokenizer)
    >>> translator(["tue 5 march 2019"])["text"]
    array([b'2019-03-05'], dtype=object)
    >>> translator.beam(["tue 5 march 2019"], beam_width=4)["nbest_text"].shape
    (1, 4)
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, decode_config=None, config=None,
                 matmul_dtype=None, stored_weights=False):
        super().__init__(name="translator")
        # The model's tf.Variables are tracked themselves, not the Keras objects around them, so that
        # the SavedModel also restores in session-based loaders (TF Serving, `saved_model_cli run`).
        object.__setattr__(self, "model", ensure_built(model))  # not tracked
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.decode_config = decode_config or DecodeConfig(max_length=target_tokenizer.max_length)
        self.config = dict(config or {})
        if matmul_dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul_dtype must be one of {MATMUL_DTYPES}. Received: matmul_dtype={matmul_dtype!r}")
        self.matmul_dtype = None if matmul_dtype == "float32" else matmul_dtype
        self.decoding_weights = {}
        variables = model.variables
        if stored_weights:
            weights = model.decoder.decoding_weights(self.matmul_dtype, logits_blocks=LOGITS_BLOCKS, token_tables=True)
            self.decoding_weights = _as_variables(weights)
            object.__setattr__(self, "absent_weights", tuple(k for k, v in weights.items() if v is None))
            variables = model.encoder.variables + model.decoder.attention.variables  # what else is read
        self.model_variables = [v.value for v in variables]

    @tf.function(input_signature=[TEXT])
    def translate(self, text):
        """Greedy translation of a `[batch]` string tensor; see the module docstring for outputs."""
        return self._unless_empty(text, self._greedy, OUTPUTS)

    @tf.function(input_signature=[TEXT, BEAM_WIDTH, LENGTH_PENALTY])
    def translate_beam(self, text, beam_width, length_penalty):
        """Beam search; `beam_width` is clamped to [1, min(vocab, 64)], a NaN `length_penalty` is 0."""
        return self._unless_empty(text, lambda t: self._beam(t, beam_width, length_penalty), BEAM_OUTPUTS)

    def _unless_empty(self, text, fn, names):
        """`fn(text)`, or empty outputs for an empty batch (some RNN kernels refuse batch 0)."""
        empty = {name: tf.zeros([0] * EMPTY_RANKS[name], EMPTY_DTYPES[name]) for name in names}
        return tf.cond(tf.size(text) > 0, lambda: fn(text), lambda: empty)

    def _decoding_model(self, whole_projection=False):
        """The model, stepping with the stored decoding weights or in `matmul_dtype` if asked.

        `whole_projection`: with stored weights, also give the step the vocabulary projection's
        kernel in one piece, put together once per call, which it then uses for more than
        `FEW_ROWS` rows (see `Decoder.decoding_weights`): beam search's `batch * beam` rows."""
        decoder = self.model.decoder
        if self.decoding_weights:
            stored = {k: [b.value() for b in v] if k == "logits_blocks" else v.value()
                      for k, v in self.decoding_weights.items()}
            if whole_projection:
                stored["logits_kernel"] = tf.concat(stored["logits_blocks"], axis=1)  # (units, vocab)
            return _Stepping(self.model, lambda: {**dict.fromkeys(self.absent_weights), **stored})
        if self.matmul_dtype:
            return _Stepping(self.model, lambda: decoder.decoding_weights(self.matmul_dtype))
        return self.model

    def _greedy(self, text):
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)  # (batch, t_in), markers included
        out = greedy(self._decoding_model(), source, self.decode_config)
        return {
            "text": self.target_tokenizer.detokenize(out["ids"]),
            "tokens": self.target_tokenizer.ids_to_tokens(out["ids"]),  # (batch, t_out), "" padding
            "input_tokens": input_tokens,
            "attention": out["attention"],
            "length": out["length"],
        }

    def _beam(self, text, beam_width, length_penalty):
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)
        out = beam_search(self._decoding_model(whole_projection=True), source, beam_width, length_penalty,
                          config=self.decode_config)
        ids = out["ids"]  # (batch, n, t_out)
        shape = tf.shape(ids)
        nbest = tf.reshape(self.target_tokenizer.detokenize(tf.reshape(ids, [-1, shape[2]])), shape[:2])  # (batch, n)
        return {
            "text": nbest[:, 0],  # the best of each sentence
            "tokens": self.target_tokenizer.ids_to_tokens(ids[:, 0]),
            "input_tokens": input_tokens,
            "attention": out["attention"][:, 0],
            "length": out["length"][:, 0],
            "score": out["scores"][:, 0],
            "nbest_text": nbest,
            "nbest_score": out["scores"],
        }

    def __call__(self, texts):
        """Greedy translation of a list of str; returns the outputs as NumPy arrays."""
        out = self.translate(tf.constant(list(texts), tf.string))
        return {k: v.numpy() for k, v in out.items()}

    def beam(self, texts, beam_width=4, length_penalty=0.6):
        """Beam search over a list of str; returns the outputs as NumPy arrays."""
        out = self.translate_beam(tf.constant(list(texts), tf.string), tf.constant(beam_width, tf.int32),
                                  tf.constant(length_penalty, tf.float32))
        return {k: v.numpy() for k, v in out.items()}


class _Stepping:
    """A model whose decoding loops step with the decoding weights `weights()` returns."""

    def __init__(self, model, weights):
        self.model, self.weights, self.decoder = model, weights, self

    def encode(self, source):
        return self.model.encode(source)

    def stepper(self):
        return self.model.decoder.stepper(self.weights())


def _as_variables(weights):
    """`Decoder.decoding_weights` as non-trainable variables (a list for `logits_blocks`), without
    the entries that are None."""
    variable = lambda value, name: tf.Variable(value, trainable=False, name=name)  # noqa: E731
    return {k: [variable(b, f"logits_block_{i}") for i, b in enumerate(v)] if k == "logits_blocks"
            else variable(v, k) for k, v in weights.items() if v is not None}


EMPTY_RANKS = {"text": 1, "tokens": 2, "input_tokens": 2, "attention": 3, "length": 1, "score": 1,
               "nbest_text": 2, "nbest_score": 2}
EMPTY_DTYPES = {"text": tf.string, "tokens": tf.string, "input_tokens": tf.string, "attention": tf.float32,
                "length": tf.int32, "score": tf.float32, "nbest_text": tf.string, "nbest_score": tf.float32}


def export(translator, path):
    """Writes `translator` as a SavedModel at `path`; returns `path`.

    The SavedModel has the signatures `translate` (also `serving_default`) and `translate_beam`,
    the vocabularies as asset files (`assets/source_vocab.txt`, `assets/target_vocab.txt`) that
    fill its lookup tables when it loads, and `tfattn_config.json` (the translator's config, the
    tokenizers' settings, the length limits and the signatures), as an asset and beside
    `saved_model.pb`.
    """
    os.makedirs(path, exist_ok=True)
    config_path = os.path.join(path, CONFIG_FILE)
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(export_config(translator), f, indent=2, ensure_ascii=False)
    with tempfile.TemporaryDirectory() as tmp:
        serving = Translator(translator.model, _from_file(translator.source_tokenizer, tmp, "source_vocab.txt"),
                             _from_file(translator.target_tokenizer, tmp, "target_vocab.txt"),
                             translator.decode_config, translator.config, translator.matmul_dtype,
                             stored_weights=True)
        serving.config_file = tf.saved_model.Asset(config_path)
        greedy_fn = serving.translate.get_concrete_function()
        signatures = {"translate": greedy_fn, "serving_default": greedy_fn,
                      "translate_beam": serving.translate_beam.get_concrete_function()}
        tf.saved_model.save(serving, path, signatures=signatures)
    return path


def _from_file(tokenizer, directory, name):
    """The same tokenizer, its tables filled from a vocabulary file (saved as an asset)."""
    path = tokenizer.write_vocabulary(os.path.join(directory, name))
    return Tokenizer(vocabulary_file=path, **tokenizer.get_config())


def export_config(translator):
    """The JSON description saved with an export."""
    src, tgt = translator.source_tokenizer, translator.target_tokenizer
    settings = lambda tok: {k: v for k, v in tok.get_config().items() if k != "vocabulary"}  # noqa: E731
    return {
        **translator.config,
        "source_tokenizer": {**settings(src), "vocab_size": src.vocab_size, "vocabulary": "source_vocab.txt"},
        "target_tokenizer": {**settings(tgt), "vocab_size": tgt.vocab_size, "vocabulary": "target_vocab.txt"},
        "decode": vars(translator.decode_config),
        "matmul_dtype": translator.matmul_dtype or "float32",
        "signatures": {"translate": {"inputs": ["text"], "outputs": list(OUTPUTS)},
                       "translate_beam": {"inputs": ["text", "beam_width", "length_penalty"],
                                          "outputs": list(BEAM_OUTPUTS)}},
    }


def load(path):
    """Loads an export (any process with `tensorflow` and `tensorflow_text`); returns the object."""
    import tensorflow_text  # noqa: F401  (registers the text ops the graph uses)

    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"Not a SavedModel directory (no saved_model.pb). Received: path={path!r}")
    return tf.saved_model.load(path)
