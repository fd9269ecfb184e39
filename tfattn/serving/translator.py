"""A self-contained SavedModel: strings in; text, tokens and attention out.

The export holds the model's weights, both tokenizers' vocabularies and text processing, and the
decoding loop, all as TensorFlow graphs. By default (`export(..., tokenizer_ops="core")`) they are
core TensorFlow ops only, so loading it needs `tensorflow`, not `tfattn` or `tensorflow_text`
(an export made with `tokenizer_ops="text"` needs `import tensorflow_text` first, which registers
its ops; see `docs/serving.md`):

    import tensorflow as tf
    translate = tf.saved_model.load(path).signatures["translate"]
    out = translate(text=tf.constant(["¿todavía está en casa?"]))

Signature `translate` (also `serving_default`), greedy decoding:
    input   text          string  [batch]
    outputs text          string  [batch]           the translation, detokenized
            tokens        string  [batch, t_out]    output tokens, `[END]` included, "" padding
            input_tokens  string  [batch, t_in]     source tokens as the encoder saw them, "" padding
            attention     float32 [batch, t_out, t_in]
            length        int32   [batch]           non-padding entries of `tokens`

Signature `translate_text`, greedy decoding, the translation alone: `translate`'s `text`, with less
work per call (no output tokens, source tokens or attention to make and return), for servers whose
clients read only the text:
    input   text  string  [batch]
    output  text  string  [batch]

Signature `translate_beam`, beam search with the GNMT length penalty `((5 + len) / 6) ** alpha`:
    inputs  text            string  [batch]
            beam_width      int32   []    clamped to [1, min(target vocabulary, 64)]
            length_penalty  float32 []    alpha, clamped to [0, 5]; NaN counts as 0
    (the loaded object's `translate_beam` function also takes int64 and float64 scalars)
    outputs text, tokens, input_tokens, attention, length   as above, for the best hypothesis
            score           float32 [batch]       its length-normalized log-probability
            nbest_text      string  [batch, n]    all `n = beam_width` hypotheses, best first
            nbest_score     float32 [batch, n]
            nbest_tokens    string  [batch, n, t_out]         each hypothesis' tokens, as `tokens`
            nbest_attention float32 [batch, n, t_out, t_in]   each hypothesis' own attention

Signature `translate_heads`, only for models with several heads or layers of cross-attention
(multi-head Luong attention, the Transformer), whose `attention` is a reduction (docs/models.md):
    input   text            string  [batch]
    outputs as `translate`, and
            attention_heads float32 [batch, layers, heads, t_out, t_in]   every block's every head,
                            from a teacher-forced pass over the greedy tokens
    (`tfattn.plot.plot_heads(out["attention_heads"][i], ...)` draws sentence `i`'s).

With `replace_unknown` (a `Translator` option, saved in `tfattn_config.json`), every `[UNK]` of
`tokens`, `text`, `nbest_text` and `nbest_tokens` is replaced by the source token it attends to most (see
`tfattn.serving.alignments`).

Input is truncated to the source tokenizer's `max_length` tokens (`[START]` and `[END]` included).
Output length is limited to `min(max_length, ratio * source tokens + extra)` (see `DecodeConfig`),
so decoding always ends. An empty batch gives empty outputs. An empty or whitespace-only text (no
source token) gets an empty translation: `text` "", no `tokens`, zero attention rows, `length` 0
(and `score` 0, `nbest_text` "", no `nbest_tokens`), not one the decoder would invent from `[START] [END]` alone.
"""

import contextlib
import logging
import os

import numpy as np
import tensorflow as tf
from google.protobuf import message

from tfattn import files
from tfattn.accel import seq2seq as fast
from tfattn.core import ensure_built
from tfattn.data.text import Tokenizer
from tfattn.ids import START_ID
from tfattn.search import BeamSearch, DecodeConfig, Greedy, decode
from tfattn.serving.alignments import replace_unknown as replace_unknown_tokens
from tfattn.serving.core_text import CoreTokenizer

CONFIG_FILE = "tfattn_config.json"
TEXT = tf.TensorSpec([None], tf.string, name="text")
BEAM_WIDTH = tf.TensorSpec([], tf.int32, name="beam_width")
LENGTH_PENALTY = tf.TensorSpec([], tf.float32, name="length_penalty")
BEAM_DTYPES = [(w, p) for w in (tf.int32, tf.int64) for p in (tf.float32, tf.float64)]  # what clients send
TOKENIZER_OPS = ("core", "text")
OUTPUTS = ("text", "tokens", "input_tokens", "attention", "length")
BEAM_OUTPUTS = OUTPUTS + ("score", "nbest_text", "nbest_score", "nbest_tokens", "nbest_attention")
HEADS_OUTPUTS = OUTPUTS + ("attention_heads",)
TEXT_OUTPUTS = ("text",)


class Translator(tf.Module):
    """A model with its tokenizers: translates strings, in Python or as an exported SavedModel.

    Args:
        model: a `Seq2Seq` model.
        source_tokenizer, target_tokenizer: `tfattn.data.text.Tokenizer`s the model was trained with.
        decode_config: `DecodeConfig` for output length limits; defaults to `DecodeConfig()` with
            the target tokenizer's `max_length`.
        config: optional JSON-serializable dict saved with the export (`tfattn_config.json`).
        accel: bool or None. Decode by the fast tier (`tfattn.accel`); the translations are the same
            within float32 rounding. Defaults to `None`: `tfattn.tier.accel_enabled()`; chosen once,
            here (`tfattn.accel.seq2seq.choose`).
        stored_weights: bool. With `accel`, keep a copy of what the decoder's step reads, made ahead
            (`tfattn.accel.seq2seq.decoding_weights` with token tables: what the previous token adds
            to a step is looked up, not computed). The translator then holds these and the
            variables of the encoder and the attention layer. It is a snapshot, so `export` sets
            this and a translator of a model that goes on training must not. Defaults to `False`.
        replace_unknown: bool. In every translation (greedy and beam, the exported signatures too),
            replace each output `[UNK]` by the real source token (not `[START]` or `[END]`) that it
            attends to most, the lower position on ties; the `tokens` and `text` outputs both show it
            (`tfattn.serving.alignments.replace_unknown`). A source word the target vocabulary lacks,
            such as a name or a number, is then copied. Defaults to `False`.

    Example:

    >>> translator = Translator(model, source_tokenizer, target_tokenizer)
    >>> translator(["tue 5 march 2019"])["text"]
    array([b'2019-03-05'], dtype=object)
    >>> translator.beam(["tue 5 march 2019"], beam_width=4)["nbest_text"].shape
    (1, 4)
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, decode_config=None, config=None,
                 accel=None, stored_weights=False, replace_unknown=False):
        super().__init__(name="translator")
        # The model's tf.Variables are tracked themselves, not the Keras objects around them, so that
        # the SavedModel also restores in session-based loaders (TF Serving, `saved_model_cli run`).
        object.__setattr__(self, "model", ensure_built(model))  # not tracked
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.decode_config = decode_config or DecodeConfig(max_length=target_tokenizer.max_length)
        self.config = dict(config or {})
        self.accel = accel = fast.choose(accel, model, model.dtype_policy.name)
        self.replace_unknown = bool(replace_unknown)
        self.decoding_weights = {}
        variables = model.variables
        if accel and stored_weights:
            weights = fast.decoding_weights(model.decoder, token_tables=True)
            self.decoding_weights = {k: tf.Variable(v, trainable=False, name=k) for k, v in weights.items()
                                     if v is not None}
            object.__setattr__(self, "absent_weights", tuple(k for k, v in weights.items() if v is None))
            variables = model.encoder.variables + model.decoder.attention_layer.variables  # what else is read
            if head_grid(model) != (1, 1):  # `translate_heads` runs the model's own layers
                variables = model.variables
        self.model_variables = [v.value for v in variables]

    @tf.function(input_signature=[TEXT], autograph=False)
    def translate(self, text):
        """Greedy translation of a `[batch]` string tensor; see the module docstring for outputs."""
        return self._unless_empty(text, self._greedy, OUTPUTS)

    @tf.function(input_signature=[TEXT], autograph=False)
    def translate_text(self, text):
        """Greedy translation, the text alone: `translate`'s `text`, without the work of its other
        outputs (output tokens, input tokens, attention, length), for a caller that reads only the text."""
        return self._unless_empty(text, self._greedy_text, TEXT_OUTPUTS)

    @tf.function(autograph=False)
    def translate_beam(self, text, beam_width, length_penalty):
        """Beam search; `beam_width` int32 or int64 is clamped to [1, min(vocab, 64)], `length_penalty`
        float32 or float64 to [0, 5] (NaN counts as 0). An export holds one concrete function per
        pair of dtypes, each a cast and a call of the int32/float32 one (`BEAM_DTYPES`). Both are
        checked to be scalars when the graph runs (a caller of the exported signature can feed any
        shape, and a vector would fail deep in the search), as `text` is checked to be `[batch]`."""
        beam_width = tf.ensure_shape(beam_width, [], name="beam_width_must_be_a_scalar")
        length_penalty = tf.ensure_shape(length_penalty, [], name="length_penalty_must_be_a_scalar")
        beam_width = tf.cast(tf.clip_by_value(beam_width, tf.int32.min, tf.int32.max), tf.int32)
        return self._translate_beam(text, beam_width, tf.cast(length_penalty, tf.float32))

    @tf.function(input_signature=[TEXT, BEAM_WIDTH, LENGTH_PENALTY], autograph=False)
    def _translate_beam(self, text, beam_width, length_penalty):
        return self._unless_empty(text, lambda t: self._beam(t, beam_width, length_penalty), BEAM_OUTPUTS)

    @tf.function(autograph=False)  # no input_signature: saving traces only what `export` asks for (`head_grid`)
    def translate_heads(self, text):
        """Greedy translation with every head of the cross-attention (`attention_heads`); exported
        as a signature for models with several heads or layers (`head_grid`)."""
        return self._unless_empty(text, lambda t: self._greedy(t, heads=True), HEADS_OUTPUTS)

    def _unless_empty(self, text, fn, names):
        """`fn(text)`, or empty outputs for an empty batch (some RNN kernels refuse batch 0).

        `text` is checked to be `[batch]` when the graph runs: a caller of the exported signature
        (TensorFlow Serving, C++, `signatures[...]` in Python) can feed any shape, and another one
        would fail deep in the tokenizer."""
        text = tf.ensure_shape(text, [None], name="text_must_be_a_batch_of_strings")
        empty = {name: tf.zeros([0] * EMPTY_RANKS[name], EMPTY_DTYPES[name]) for name in names}
        translated = lambda: {k: v for k, v in blank_empty_sources(fn(text)).items() if k in names}  # noqa: E731
        return tf.cond(tf.size(text) > 0, translated, lambda: empty)

    def _decoding_model(self):
        """The model as the decoding loops take it: stepping with the stored weights, if any."""
        if self.decoding_weights:
            stored = {k: v.value() for k, v in self.decoding_weights.items()}
            return fast.Stepping(self.model, lambda: {**dict.fromkeys(self.absent_weights), **stored})
        return self.model

    def _greedy(self, text, heads=False):
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)  # (batch, t_in), markers included
        out = decode(self._decoding_model(), source, Greedy(), self.decode_config, self.accel)
        text, tokens = self._text_and_tokens(out["ids"], out["attention"], input_tokens)
        result = {
            "text": text,
            "tokens": tokens,  # (batch, t_out), "" padding
            "input_tokens": input_tokens,
            "attention": out["attention"],
            "length": out["length"],
        }
        if heads:
            result["attention_heads"] = self._heads(source, out["ids"], out["length"])
        return result

    def _greedy_text(self, text):
        """`_greedy`'s text, with the source tokens that say which texts are blank."""
        if self.replace_unknown:  # the replacement reads the attention and the source tokens
            out = self._greedy(text)
            return {"text": out["text"], "input_tokens": out["input_tokens"]}
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)  # (batch, t_in)
        out = decode(self._decoding_model(), source, Greedy(), self.decode_config, self.accel)
        return {"text": self.target_tokenizer.detokenize(out["ids"]), "input_tokens": input_tokens}

    def _heads(self, source, ids, length):
        """Every head `(batch, layers, heads, t_out, t_in)` for the output `ids (batch, t_out)`:
        the model teacher-forced on `[START]` and the tokens, rows past each `length` zero."""
        start = tf.fill([tf.shape(ids)[0], 1], START_ID)
        heads = self.model.attention_heads(source, tf.concat([start, ids[:, :-1]], axis=1))
        steps = tf.sequence_mask(length, tf.shape(ids)[1])  # (batch, t_out)
        return tf.where(steps[:, None, None, :, None], heads, 0.0)

    def _beam(self, text, beam_width, length_penalty):
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)
        strategy = BeamSearch(beam_width, length_penalty)
        out = decode(self._decoding_model(), source, strategy, self.decode_config, self.accel)
        ids = out["ids"]  # (batch, n, t_out)
        if self.replace_unknown:
            nbest, tokens = self._nbest_replaced(ids, out["attention"], input_tokens)
        else:
            shape = tf.shape(ids)
            flat = tf.reshape(ids, [-1, shape[2]])  # (batch * n, t_out)
            nbest = tf.reshape(self.target_tokenizer.detokenize(flat), shape[:2])  # (batch, n)
            tokens = tf.reshape(self.target_tokenizer.ids_to_tokens(flat), shape)  # (batch, n, t_out)
        return {
            "text": nbest[:, 0],  # the best of each sentence
            "tokens": tokens[:, 0],
            "input_tokens": input_tokens,
            "attention": out["attention"][:, 0],
            "length": out["length"][:, 0],
            "score": out["scores"][:, 0],
            "nbest_text": nbest,
            "nbest_score": out["scores"],
            "nbest_tokens": tokens,
            "nbest_attention": out["attention"],  # (batch, n, t_out, t_in)
        }

    def _text_and_tokens(self, ids, attention, input_tokens):
        """Ids `(batch, t_out)` -> text `(batch,)` and tokens `(batch, t_out)`, with `[UNK]` replaced
        if `replace_unknown` (`attention` `(batch, t_out, t_in)` says by which `input_tokens`)."""
        tokens = self.target_tokenizer.ids_to_tokens(ids)  # (batch, t_out)
        if not self.replace_unknown:
            return self.target_tokenizer.detokenize(ids), tokens
        tokens = replace_unknown_tokens(tokens, attention, input_tokens)
        return self.target_tokenizer.detokenize_tokens(tokens), tokens

    def _nbest_replaced(self, ids, attention, input_tokens):
        """Beam ids `(batch, n, t_out)` -> all texts `(batch, n)` and tokens `(batch, n, t_out)`,
        `[UNK]` replaced in every hypothesis (by its own attention `(batch, n, t_out, t_in)`)."""
        shape, t_in = tf.shape(ids), tf.shape(attention)[3]
        text, tokens = self._text_and_tokens(
            tf.reshape(ids, [-1, shape[2]]),  # (batch * n, t_out)
            tf.reshape(attention, [-1, shape[2], t_in]),  # (batch * n, t_out, t_in)
            tf.repeat(input_tokens, shape[1], axis=0))  # (batch * n, t_in)
        return tf.reshape(text, shape[:2]), tf.reshape(tokens, shape)

    def __call__(self, texts):
        """Greedy translation of a batch of texts (see `as_batch`); returns the outputs as NumPy arrays."""
        out = self.translate(as_batch(texts))
        return {k: v.numpy() for k, v in out.items()}

    def beam(self, texts, beam_width=4, length_penalty=0.6):
        """Beam search over a batch of texts (see `as_batch`); returns the outputs as NumPy arrays."""
        out = self._translate_beam(as_batch(texts), tf.constant(beam_width, tf.int32),
                                   tf.constant(length_penalty, tf.float32))
        return {k: v.numpy() for k, v in out.items()}


def blank_empty_sources(out):
    """Outputs -> the same, with an empty translation for each sentence without a source token (an
    empty or whitespace-only text): empty `text` and `nbest_text`, no `tokens` (`nbest_tokens`) or
    attention rows, `length` 0, scores 0. Tokens and attention are cut to the longest translation left. Works on
    the signatures' outputs in a graph and eagerly (`tfattn translate` applies it to older exports).
    Of the outputs, only `input_tokens` must be there (`translate_text` has no `tokens` or attention)."""
    blank = tf.reduce_sum(tf.cast(out["input_tokens"] != "", tf.int32), axis=1) <= 2  # only [START] [END]
    result = dict(out)
    if "tokens" in out:
        width = tf.where(tf.reduce_all(blank), 0, tf.shape(out["tokens"])[1])  # no rows when all are blank
        result.update({"length": tf.where(blank, 0, out["length"]),
                       "tokens": tf.where(blank[:, None], "", out["tokens"])[:, :width],
                       "attention": tf.where(blank[:, None, None], 0.0, out["attention"])[:, :width]})
        if "attention_heads" in out:  # (batch, layers, heads, t_out, t_in)
            result["attention_heads"] = tf.where(blank[:, None, None, None, None], 0.0,
                                                 out["attention_heads"])[:, :, :, :width]
        if "nbest_tokens" in out:  # (batch, n, t_out) and (batch, n, t_out, t_in)
            result["nbest_tokens"] = tf.where(blank[:, None, None], "", out["nbest_tokens"])[:, :, :width]
            result["nbest_attention"] = tf.where(blank[:, None, None, None], 0.0,
                                                 out["nbest_attention"])[:, :, :width]
    for name, value in {"text": "", "score": 0.0, "nbest_text": "", "nbest_score": 0.0}.items():
        if name in out:
            mask = blank if name in ("text", "score") else blank[:, None]
            result[name] = tf.where(mask, tf.constant(value, out[name].dtype), out[name])
    return result


def as_batch(texts):
    """A `[batch]` string tensor from a list (or tuple, NumPy array, string tensor) of `str` or
    `bytes`; a single `str` or `bytes` is a batch of one."""
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    if isinstance(texts, (tf.Tensor, np.ndarray)):
        if texts.ndim != 1:
            raise ValueError(f"texts must be one-dimensional, a batch of texts. Received: shape {texts.shape}")
        if isinstance(texts, tf.Tensor) and texts.dtype == tf.string:
            return texts
        texts = texts.numpy().tolist() if isinstance(texts, tf.Tensor) else texts.tolist()
    texts = list(texts)
    wrong = next((t for t in texts if not isinstance(t, (str, bytes))), None)
    if wrong is not None:
        raise ValueError(f"texts must be a list of str or bytes. Received an item {wrong!r} of type "
                         f"{type(wrong).__name__}")
    return tf.constant(texts, tf.string, shape=[len(texts)])


EMPTY_RANKS = {"text": 1, "tokens": 2, "input_tokens": 2, "attention": 3, "length": 1, "score": 1,
               "nbest_text": 2, "nbest_score": 2, "nbest_tokens": 3, "nbest_attention": 4, "attention_heads": 5}
EMPTY_DTYPES = {"text": tf.string, "tokens": tf.string, "input_tokens": tf.string, "attention": tf.float32,
                "length": tf.int32, "score": tf.float32, "nbest_text": tf.string, "nbest_score": tf.float32,
                "nbest_tokens": tf.string, "nbest_attention": tf.float32, "attention_heads": tf.float32}


def export(translator, path, tokenizer_ops="core"):
    """Writes `translator` as a SavedModel at `path`; returns `path`.

    With `tokenizer_ops="core"` (the default) the tokenizers fold case and normalize text with core
    TensorFlow ops (`tfattn.serving.core_text.CoreTokenizer`), so the export runs in any TensorFlow
    runtime: `saved_model_cli run`, TensorFlow Serving, TF Java, without tensorflow-text's kernels or
    ICU data. It translates what the tensorflow-text ops do. Where core ops would not give exactly the
    same tokens (a source tokenizer's NFC and NFKC forms), that tokenizer keeps tensorflow-text's
    ops, and loading then needs `tensorflow_text` (`tfattn_config.json` says so under
    `"tokenizer_ops"`). `tokenizer_ops="text"` keeps tensorflow-text's ops everywhere.

    The SavedModel has the signatures `translate` (also `serving_default`), `translate_text` and
    `translate_beam`, the vocabularies as asset files (`assets/source_vocab.txt`,
    `assets/target_vocab.txt`) that fill its lookup tables when it loads, and `tfattn_config.json`
    (the translator's config, the tokenizers' settings, the length limits and the signatures), as an
    asset and beside `saved_model.pb`.

    The export is written whole into a private workspace inside `path` and then its entries are put
    in place of the old export's (`tfattn.files.swap_in`): files the export does not write (notes,
    a plot, data) stay, and a symlink `path` is written through (the directory it points to is
    updated). A failed write leaves the old export and nothing else; what a kill leaves, the next
    export (or `tfattn translate`/`evaluate`) finishes or removes (`tfattn.files.recover_export`).
    A model with a weight that is not finite (NaN, infinity: a diverged run) is not exported.

    Raises:
        FileExistsError: `path` is a file, or a directory that is neither empty nor an export.
        ValueError: a weight of the model is not finite.
        tfattn.files.WriteError: the export could not be written (disk full, no permission).
    """
    if tokenizer_ops not in TOKENIZER_OPS:
        raise ValueError(f"tokenizer_ops must be one of {TOKENIZER_OPS}. Received: tokenizer_ops={tokenizer_ops!r}")
    _check_finite(translator.model, path)
    try:
        files.recover_export(path)
        _check_export_path(path)
        with files.export_workspace(path) as (work, target):
            new, vocabulary = os.path.join(work, "new"), os.path.join(work, "vocabulary")
            os.mkdir(new)
            os.mkdir(vocabulary)
            _write_export(translator, new, vocabulary, tokenizer_ops)
            files.swap_in(work, target, new, retire=EXPORT_ENTRIES)
    except (OSError, tf.errors.OpError) as error:
        if isinstance(error, (files.WriteError, FileExistsError)):
            raise
        raise files.write_error("the export", path, error) from None
    return path


# What a SavedModel and an export are made of: these are replaced by an export, all else is kept.
EXPORT_ENTRIES = ("saved_model.pb", "saved_model.pbtxt", "variables", "assets", "assets.extra", "fingerprint.pb",
                  CONFIG_FILE)


def non_finite_weights(model):
    """`"NAME (k of n values)"` for the first weight of `model` holding NaN or infinity; None if none."""
    for variable in model.variables:
        values = np.asarray(variable.numpy())
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            return f"{variable.path} ({np.size(values) - np.isfinite(values).sum()} of {np.size(values)} values)"
    return None


def _check_finite(model, path):
    bad = non_finite_weights(model)
    if bad:
        raise ValueError(f"Not exporting to {path}: the weight {bad} is not finite (NaN or infinity), so every "
                         f"translation would be empty; the model diverged. Export an earlier checkpoint or train "
                         f"again with a smaller --learning-rate. Received: path={path!r}")


def _check_export_path(path):
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"{path} is a file; an export is a directory. Received: path={path!r}")
    entries = set(os.listdir(path)) if os.path.isdir(path) else set()
    entries = {e for e in entries if not e.startswith(files.EXPORT_WORK)}  # live exports' workspaces
    if entries and not {"saved_model.pb", CONFIG_FILE} & entries:
        raise FileExistsError(f"{path} is not empty and is not an export (it holds {files.listing(entries)}); "
                              f"an export goes into a new or empty directory, or over an earlier export. "
                              f"Choose a new directory. Received: path={path!r}")


def _write_export(translator, path, vocabulary, tokenizer_ops):
    """The SavedModel at `path` (a new directory); the vocabulary files go to the directory
    `vocabulary` first (they are copied into `assets/`)."""
    src, tgt = translator.source_tokenizer, translator.target_tokenizer
    source = _from_file(src, vocabulary, "source_vocab.txt", tokenizer_ops, uses=("tokenize",))
    target = _from_file(tgt, vocabulary, "target_vocab.txt", tokenizer_ops, uses=("detokenize",))
    config_path = os.path.join(path, CONFIG_FILE)
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(files.strict_json(export_config(translator, ops_of(source), ops_of(target)), indent=2,
                                  ensure_ascii=False))
    serving = Translator(translator.model, source, target, translator.decode_config, translator.config,
                         translator.accel, stored_weights=translator.accel, replace_unknown=translator.replace_unknown)
    serving.config_file = tf.saved_model.Asset(config_path)
    with tracing_as_saving():
        greedy_fn = serving.translate.get_concrete_function()
        serving._translate_beam.get_concrete_function(TEXT, BEAM_WIDTH, LENGTH_PENALTY)  # what each beam pair calls
        beam_fns = [serving.translate_beam.get_concrete_function(TEXT, tf.TensorSpec([], w, name="beam_width"),
                                                                 tf.TensorSpec([], p, name="length_penalty"))
                    for w, p in BEAM_DTYPES]
        signatures = {"translate": greedy_fn, "serving_default": greedy_fn, "translate_beam": beam_fns[0],
                      "translate_text": serving.translate_text.get_concrete_function()}
        if head_grid(translator.model) != (1, 1):
            signatures["translate_heads"] = serving.translate_heads.get_concrete_function(TEXT)
    with tensorflow_info_off():
        tf.saved_model.save(serving, path, signatures=signatures)


def tracing_as_saving():
    """The context `tf.saved_model.save` traces functions in (default `SaveOptions`), for the block.

    `save` gets each function's concrete functions again inside its own context, and a function
    traced outside it is traced a second time there (the context is part of the function cache's key),
    which doubled an export's time. Traced inside it, they are found in the cache. TensorFlow's own
    module (not public API): where it is missing, nothing changes but the time."""
    try:
        from tensorflow.python.saved_model import save_context, save_options
    except ImportError:
        return contextlib.nullcontext()
    return save_context.save_context(save_options.SaveOptions())


@contextlib.contextmanager
def tensorflow_info_off():
    """TensorFlow's Python logger at WARNING at least, for the block. In an interactive session (a
    notebook, the Python prompt) TensorFlow sets it to INFO, and `tf.saved_model.save` then prints
    `INFO:tensorflow:Assets written to: ...` into the user's output."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def head_grid(model):
    """`(layers, heads)` of a model's cross-attention: `(1, 1)` but for a Transformer decoder and a
    multi-head attention layer, whose exports also have the `translate_heads` signature."""
    decoder = model.decoder
    if hasattr(decoder, "cross_attention_heads"):
        return decoder.num_layers, decoder.num_heads
    return 1, getattr(getattr(decoder, "attention_layer", None), "heads", None) or 1


def _from_file(tokenizer, directory, name, tokenizer_ops, uses):
    """The same tokenizer, its tables filled from a vocabulary file (saved as an asset); a
    `CoreTokenizer` for `tokenizer_ops="core"` where it gives the same tokens, with the tables of
    `uses`."""
    path = tokenizer.write_vocabulary(os.path.join(directory, name))
    if tokenizer_ops == "core" and CoreTokenizer.exact_for(tokenizer):
        return CoreTokenizer.like(tokenizer, vocabulary_file=path, uses=uses)
    return Tokenizer(vocabulary_file=path, **tokenizer.get_config())


def ops_of(tokenizer):
    """`"core"` for a tokenizer of core TensorFlow ops only, else `"text"` (it needs tensorflow-text)."""
    return "core" if isinstance(tokenizer, CoreTokenizer) else "text"


def export_config(translator, source_ops="text", target_ops="text"):
    """The JSON description saved with an export (`*_ops`: see `ops_of`)."""
    src, tgt = translator.source_tokenizer, translator.target_tokenizer
    settings = lambda tok: {k: v for k, v in tok.get_config().items() if k != "vocabulary"}  # noqa: E731
    return {
        **translator.config,
        "source_tokenizer": {**settings(src), "vocab_size": src.vocab_size, "vocabulary": "source_vocab.txt"},
        "target_tokenizer": {**settings(tgt), "vocab_size": tgt.vocab_size, "vocabulary": "target_vocab.txt"},
        "decode": vars(translator.decode_config),
        "accel": translator.accel,
        "replace_unknown": translator.replace_unknown,
        "tokenizer_ops": {"source": source_ops, "target": target_ops},
        "signatures": {"translate": {"inputs": ["text"], "outputs": list(OUTPUTS)},
                       "translate_text": {"inputs": ["text"], "outputs": list(TEXT_OUTPUTS)},
                       "translate_beam": {"inputs": ["text", "beam_width", "length_penalty"],
                                          "outputs": list(BEAM_OUTPUTS)},
                       **({"translate_heads": {"inputs": ["text"], "outputs": list(HEADS_OUTPUTS)}}
                          if head_grid(translator.model) != (1, 1) else {})},
    }


def load(path):
    """Loads an export (any process with `tensorflow` and `tensorflow_text`); returns the object."""
    import tensorflow_text  # noqa: F401  (registers the text ops of exports made with tokenizer_ops="text")

    for attempt in range(LOAD_ATTEMPTS):
        before = files.export_identity(path)
        try:
            with files.reading_export(path):  # an export being replaced (`tfattn.files.swap_in`) is waited out
                _check_graph_file(path)
                return tf.saved_model.load(path)
        except (FileNotFoundError, _EmptyGraph):
            raise
        except (tf.errors.OpError, ValueError, IndexError, OSError, message.DecodeError) as error:
            if files.export_identity(path) != before and attempt + 1 < LOAD_ATTEMPTS:
                continue  # replaced while it loaded, where the file system takes no locks: again, quietly
            raise ValueError(f"{path} does not load as a SavedModel ({files.reason_of(error)}): it is damaged or "
                             f"incomplete. Write it again (tfattn export, or tfattn train --resume for a run's "
                             f"export). Received: path={path!r}") from None


LOAD_ATTEMPTS = 3  # loads of an export that another process keeps replacing, before it is called damaged


class _EmptyGraph(ValueError):
    """A saved_model.pb of 0 bytes."""


def _check_graph_file(path):
    graph = os.path.join(path, "saved_model.pb")
    if not os.path.exists(graph):
        raise FileNotFoundError(f"Not a SavedModel directory (no saved_model.pb). Received: path={path!r}")
    if os.path.getsize(graph) == 0:
        raise _EmptyGraph(f"{graph} is empty (0 bytes): the export was cut short. Write it again (tfattn export, "
                          f"or tfattn train --resume for a run's export). Received: path={path!r}")
