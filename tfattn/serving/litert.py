"""A LiteRT (TensorFlow Lite) export of greedy translation, for phones, the browser and microcontrollers.

    tfattn.export_litert(translator, "models/dates-lite")      # or: tfattn export --format litert

writes a directory:

    model.tflite          greedy translation, LiteRT's builtin ops only (no Flex delegate needed)
    source_vocab.txt      one token a line, line i is id i (the same files as a SavedModel export's assets)
    target_vocab.txt
    tfattn_litert.json    the tokenizers' settings, the length limits, the signature

Signature `serving_default` (the model's one function, `translate_ids`), one sentence a call:
    input   source     int32   [1, t_in]          `[START]` token ids `[END]`
    outputs ids        int32   [1, t_out]         output ids, `[END]` included
            length     int32   [1]                entries of `ids` up to `[END]`, `[END]` included
            attention  float32 [1, t_out, t_in]

A source without a token but `[START]` and `[END]` gets `length` 0, `ids` `[[0]]` and one row of zero
attention (a LiteRT output cannot have zero size). One sentence a call, because the encoder's
recurrent layers loop over TensorArrays whose element shape `(batch, units)` the converter must know:
a batch of 1 makes it known. (A phone translates what its user typed, one sentence at a time.)

Token ids, not text: LiteRT's builtin ops have no string ops, so neither tokenizer converts, not even
the core-ops one of a SavedModel export (`tfattn.serving.core_text`: its `UnicodeDecode`,
`UnicodeEncode`, `UnsortedSegmentJoin`, `StringSplitV2`, regular expressions and string lookup tables
exist in LiteRT only as Select TF ops, which need the Flex delegate, a TensorFlow build inside the
app that ai-edge-litert's interpreter and most apps lack). The app tokenizes with the vocabulary
files beside the model; `LiteRTTranslator` does it in Python with tfattn's own `Tokenizer`.

The loop is `greedy_fixed`: greedy search over a tensor of `max_length` steps that each step adds its
token and attention to, where the reference loop (`tfattn.decoding.loop`) writes TensorArrays whose
element shapes are not known before the loop, which LiteRT's converter cannot lower to builtins. Each
step is the reference tier's `decoder.step` (the fast tier's decoding loop does not convert at all:
its row slicing runs functions the converter cannot inline), so every kind converts: Bahdanau, Luong
(any score, local, multi-head), the Transformer and the model without attention. The translations
are the SavedModel's, token for token (`tests/serving/test_litert.py`).
"""

import json
import os

import numpy as np
import tensorflow as tf

from tfattn import files
from tfattn.data.text import Tokenizer
from tfattn.ids import END_ID, PAD_ID, RESERVED, START_ID
from tfattn.decoding.loop import DecodeConfig, check_steps, length_limits, source_ids
from tfattn.decoding.strategies import Greedy
from tfattn.core import ensure_built

MODEL_FILE = "model.tflite"
CONFIG_FILE = "tfattn_litert.json"
SIGNATURE = "serving_default"  # the converter names the one function so
SOURCE = tf.TensorSpec([1, None], tf.int32, name="source")
OUTPUTS = ("ids", "length", "attention")


def greedy_fixed(model, source, config=None):
    """Greedy decoding of a batch of source ids, in ops that LiteRT's builtins cover.

    The same search as `tfattn.search.greedy` on the reference tier (the `Greedy` strategy,
    the same length limits), with each step's token and attention added into tensors of
    `config.max_length` steps rather than written to TensorArrays.

    Args:
        model: a `Seq2Seq` model (`encode`, and a `decoder` with `step` and `vocab_size`).
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.

    Returns:
        `greedy`'s dict: `ids (batch, t_out)`, `attention (batch, t_out, t_in)`, `length (batch,)`;
        a sentence without a source token (only `[START] [END]`) gets length 0, zero ids and zero
        attention, as an export's `translate` gives an empty or blank text; `t_out` is 1 at least.
    """
    config = config or DecodeConfig()
    check_steps(model.decoder, config)
    source = source_ids(source)
    batch, t_in, steps = tf.shape(source)[0], tf.shape(source)[1], config.max_length
    strategy, limits, mask = Greedy(), length_limits(source, config), source != 0
    memory, state = model.encode(source)

    def body(t, tokens, state, search, ids, attention):
        # 1. One decoder step and the strategy's choice: tokens (batch, 1), attention (batch, 1, t_in).
        logits, weights, state = model.decoder.step(tokens, state, memory)  # (batch, vocab), (batch, t_in)
        search, (token, _, weights) = strategy.select(t, logits, weights, search, limits, mask)
        # 2. Added at step t of the outputs: a one-hot over the steps picks the slot (not `tf.one_hot`,
        # which tf2onnx converts only for indices of rank 1).
        slot = tf.cast(tf.equal(tf.range(steps), t), tf.int32)  # (steps,): 1 at step t
        ids += token * slot[None, :]  # (batch, steps)
        attention += weights * tf.cast(slot, tf.float32)[None, :, None]  # (batch, steps, t_in)
        return t + 1, token[:, 0], state, search, ids, attention

    def not_finished(t, tokens, state, search, ids, attention):
        return tf.logical_not(tf.reduce_all(search["finished"]))

    start = (tf.constant(0), tf.fill([batch], START_ID), state, strategy.initialize(batch, t_in),
             tf.zeros([batch, steps], tf.int32), tf.zeros([batch, steps, t_in], tf.float32))
    t, _, _, _, ids, attention = tf.while_loop(not_finished, body, start, maximum_iterations=steps)
    return blank_without_source(source, ids[:, :t], attention[:, :t])


def blank_without_source(source, ids, attention):
    """The outputs, with nothing for a sentence whose source has no token but `[START]` and `[END]`."""
    blank = tf.math.count_nonzero(source, axis=1, dtype=tf.int32) <= 2  # (batch,)
    ids = tf.where(blank[:, None], PAD_ID, ids)  # (batch, t_out)
    attention = tf.where(blank[:, None, None], 0.0, attention)  # (batch, t_out, t_in)
    length = tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)  # (batch,), [END] included
    width = tf.reduce_max(tf.concat([length, [1]], axis=0))  # the longest translation left, 1 at least
    return {"ids": ids[:, :width], "length": length, "attention": attention[:, :width]}


class _Greedy(tf.Module):
    """What the `.tflite` holds: the model's variables and `translate_ids`."""

    def __init__(self, model, config):
        super().__init__(name="litert_translator")
        object.__setattr__(self, "model", model)  # not tracked: its variables are, below
        self.model_variables = [v.value for v in model.variables]
        self.config = config

    @tf.function(input_signature=[SOURCE], autograph=False)
    def translate_ids(self, source):
        return greedy_fixed(self.model, source, self.config)


def convert(translator):
    """The `.tflite` bytes of `translator`'s greedy translation (`translate_ids`), LiteRT builtins only.

    Raises:
        ValueError: the model does not convert to builtin ops (the converter's message names the op),
            or the translator asks for what the export cannot do (`replace_unknown`).
    """
    if translator.replace_unknown:
        raise ValueError("A LiteRT export cannot replace [UNK] by source tokens: that needs the tokens' text, and "
                         "it holds ids only. The app can do it from the attention output. Received: "
                         "replace_unknown=True")
    module = _Greedy(ensure_built(translator.model), translator.decode_config)
    function = module.translate_ids.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        return converter.convert()
    except Exception as error:  # the converter raises its own ConverterError, with MLIR's messages
        raise ValueError(f"This model does not convert to LiteRT's builtin ops: {_first_error(error)}. Received: "
                         f"a {type(translator.model.decoder).__name__}") from None


def _first_error(error):
    lines = [line.strip() for line in str(error).splitlines() if "error:" in line]
    return (lines[0].split("error:", 1)[1].strip() if lines else str(error).strip())[:300]


def export_litert(translator, path):
    """Writes `translator`'s greedy translation as a LiteRT model with its vocabularies at `path` (a
    new or empty directory, or an earlier LiteRT export); returns `path`. See the module docstring.

    Raises:
        FileExistsError: `path` is a file, or a directory that is neither empty nor a LiteRT export.
        ValueError: see `convert`.
        tfattn.files.WriteError: the files could not be written.
    """
    _check_path(path)
    flat = convert(translator)
    try:
        os.makedirs(path, exist_ok=True)
        translator.source_tokenizer.write_vocabulary(os.path.join(path, "source_vocab.txt"))
        translator.target_tokenizer.write_vocabulary(os.path.join(path, "target_vocab.txt"))
        files.write_json(os.path.join(path, CONFIG_FILE), litert_config(translator))
        with open(os.path.join(path, MODEL_FILE), "wb") as f:
            f.write(flat)
    except OSError as error:
        raise files.write_error("the LiteRT export", path, error) from None
    return path


def _check_path(path):
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"{path} is a file; a LiteRT export is a directory. Received: path={path!r}")
    entries = set(os.listdir(path)) if os.path.isdir(path) else set()
    if entries and CONFIG_FILE not in entries:
        raise FileExistsError(f"{path} is not empty and is not a LiteRT export (it holds {files.listing(entries)}); "
                              f"choose a new directory. Received: path={path!r}")


def litert_config(translator):
    """The JSON description written beside the model."""
    settings = lambda tok: {k: v for k, v in tok.get_config().items() if k != "vocabulary"}  # noqa: E731
    return {
        **translator.config,
        "source_tokenizer": {**settings(translator.source_tokenizer), "vocabulary": "source_vocab.txt"},
        "target_tokenizer": {**settings(translator.target_tokenizer), "vocabulary": "target_vocab.txt"},
        "decode": vars(translator.decode_config),
        "reserved_ids": {"padding": PAD_ID, "[START]": START_ID, "[END]": END_ID},
        "signature": {SIGNATURE: {"inputs": ["source"], "outputs": list(OUTPUTS)}},
    }


class LiteRTTranslator:
    """A LiteRT export run by ai-edge-litert's interpreter (`pip install "tfattn[litert]"`), with
    tfattn's tokenizers made from its vocabulary files around it.

    Args:
        path: str. A directory written by `export_litert`.

    Example:

    >>> lite = LiteRTTranslator("models/dates-lite")
    >>> lite(["tue 5 march 2019"])["text"]
    ['2019-03-05']
    >>> lite.translate_ids([[2, 27, 5, 19, 3]])["ids"].shape  # [START] 5 . 3 [END]: (1, t_out)
    (1, 11)
    """

    def __init__(self, path):
        from ai_edge_litert.interpreter import Interpreter

        with open(os.path.join(path, CONFIG_FILE), encoding="utf-8") as f:
            config = json.load(f)
        self.source_tokenizer = _tokenizer(path, config["source_tokenizer"])
        self.target_tokenizer = _tokenizer(path, config["target_tokenizer"])
        self.model_path = os.path.join(path, MODEL_FILE)
        self.interpreter = Interpreter(model_path=self.model_path)
        self.runner = self.interpreter.get_signature_runner(SIGNATURE)

    def translate_ids(self, source):
        """`source` int `(1, t_in)` -> `{"ids", "length", "attention"}` as NumPy arrays."""
        source = np.asarray(source)
        if source.ndim != 2 or source.shape[0] != 1 or source.shape[1] == 0 or source.dtype.kind not in "iu":
            raise ValueError(f"source must be the token ids of one sentence, shape (1, t_in). Received: shape "
                             f"{source.shape}, dtype {source.dtype}")
        return self.runner(source=source.astype(np.int32))

    def __call__(self, texts):
        """Greedy translations of a list of str, one call each: a dict of lists, one entry per text:
        `text` (str), `tokens` (str, `[END]` included), `input_tokens` (str, `[START]` and `[END]`
        included), `attention` `(t_out, t_in)` (rows up to `[END]`)."""
        out = {"text": [], "tokens": [], "input_tokens": [], "attention": []}
        for text in texts:
            input_tokens, source = self.source_tokenizer.tokens_and_ids(tf.constant([text], tf.string))
            result = self.translate_ids(source.numpy())
            n = int(result["length"][0])
            ids = tf.constant(result["ids"][:, :n])  # (1, length)
            out["text"].append(self.target_tokenizer.detokenize(ids).numpy()[0].decode("utf-8"))
            out["tokens"].append([t.decode("utf-8") for t in self.target_tokenizer.ids_to_tokens(ids).numpy()[0]])
            out["input_tokens"].append([t.decode("utf-8") for t in input_tokens.numpy()[0]])
            out["attention"].append(result["attention"][0, :n])
        return out


def _tokenizer(path, settings):
    """A `Tokenizer` from an export's vocabulary file (line i holds id i) and its settings."""
    with open(os.path.join(path, settings["vocabulary"]), encoding="utf-8") as f:
        vocabulary = f.read().splitlines()
    keys = ("level", "lowercase", "normalization", "max_length")
    return Tokenizer(vocabulary[len(RESERVED):], **{k: settings[k] for k in keys})
