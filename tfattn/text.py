"""In-graph text processing with tensorflow-text: strings <-> token ids, carried inside the SavedModel.

    "¿Todavía está en casa?"
      -> repair UTF-8, case-fold, NFKD       "¿todavi\u0301a esta\u0301 en casa?"
      -> space out punctuation, split        ["¿", "todavi\u0301a", "esta\u0301", "en", "casa", "?"]
      -> add markers, truncate, look up      [2, 57, 31, 14, 102, 8, 3]      ([START] ... [END])

Ids 0-3 are reserved: 0 padding, 1 `[UNK]`, 2 `[START]`, 3 `[END]`. Detokenization drops them, joins
tokens (with spaces at the word level, without at the character level), re-attaches punctuation and
recomposes accents (NFC), so that the output reads like ordinary text.
"""

import collections

import tensorflow as tf
import tensorflow_text as tf_text

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
RESERVED = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
LEVELS = ("char", "word")
NORMALIZATIONS = ("NFKD", "NFKC", "NFD", "NFC")

# Any character that is not a letter, a combining mark, a digit or a space is a token of its own.
_PUNCTUATION = r"([^\pL\pM\pN\s])"


class Tokenizer(tf.Module):
    """Turns strings into token ids and back, with TensorFlow ops only (so it exports).

    Args:
        vocabulary: list of str. Tokens after the reserved ones (which are added if missing).
        level: str. `"char"` or `"word"`. Defaults to `"word"`.
        lowercase: bool. Case-fold the text. Defaults to `True`.
        normalization: str. Unicode normalization form. Defaults to `"NFKD"`.
        max_length: int. Maximum tokens per sentence including `[START]` and `[END]`; longer input
            is truncated (the first `max_length - 2` tokens are kept). Defaults to `64`.
        name: str. Module name.

    Example:

    >>> tok = Tokenizer.adapt(["a cat.", "a dog!"], level="word")
    >>> tok.vocabulary
    ['', '[UNK]', '[START]', '[END]', 'a', '!', '.', 'cat', 'dog']
    >>> tok(["a cat!"]).numpy().tolist()
    [[2, 4, 7, 5, 3]]
    >>> tok.detokenize(tok(["A CAT !"])).numpy().tolist()
    [b'a cat!']
    """

    def __init__(self, vocabulary, level="word", lowercase=True, normalization="NFKD", max_length=64,
                 name=None):
        super().__init__(name=name)
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}. Received: level={level!r}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}. "
                             f"Received: normalization={normalization!r}")
        if not isinstance(max_length, int) or max_length < 3:
            raise ValueError(f"max_length must be an int >= 3. Received: max_length={max_length!r}")
        # A tuple, so that tf.Module does not wrap it; `vocabulary` gives it back as a list.
        self._vocabulary = tuple(RESERVED) + tuple(t for t in vocabulary if t not in RESERVED)
        self.level = level
        self.lowercase = lowercase
        self.normalization = normalization
        self.max_length = max_length
        self._tokens = tf.constant(self._vocabulary)  # id -> token
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(self._tokens[1:], tf.range(1, len(self._vocabulary))),
            default_value=UNK_ID,
        )

    @property
    def vocabulary(self):
        return list(self._vocabulary)

    @property
    def vocab_size(self):
        return len(self._vocabulary)

    @classmethod
    def adapt(cls, texts, max_tokens=None, min_count=1, **kwargs):
        """Builds a tokenizer whose vocabulary is the most frequent tokens of `texts`.

        Args:
            texts: iterable of str (or a `tf.data.Dataset` of string scalars).
            max_tokens: int or None. Vocabulary size including the 4 reserved ids.
            min_count: int. Tokens seen fewer times are left out (they become `[UNK]`).
            **kwargs: the other constructor arguments.

        Ties in frequency are broken alphabetically, so the vocabulary is deterministic.
        """
        probe = cls([], **kwargs)
        counts = collections.Counter()
        data = texts if isinstance(texts, tf.data.Dataset) else tf.data.Dataset.from_tensor_slices(list(texts))
        for batch in data.batch(4096):
            for row in probe.split(batch).to_list():
                counts.update(t.decode("utf-8") for t in row)
        ranked = sorted((t for t, n in counts.items() if n >= min_count), key=lambda t: (-counts[t], t))
        if max_tokens is not None:
            ranked = ranked[: max(0, max_tokens - len(RESERVED))]
        return cls(ranked, **kwargs)

    # -- strings -> tokens -> ids -----------------------------------------------------------------

    def normalize(self, texts):
        """`(batch,)` strings -> cleaned `(batch,)` strings (valid UTF-8, folded, normalized)."""
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
        texts = tf.strings.regex_replace(texts, r"\p{Cf}+", "")  # format characters: ZWJ, bidi marks
        texts = tf.strings.regex_replace(texts, r"[\p{Cc}\p{Z}\s]+", " ")  # controls, odd spaces
        # Bound the work done on huge inputs: no sentence we keep needs more characters than this.
        texts = tf.strings.substr(tf.strings.strip(texts), 0, 16 * self.max_length, unit="UTF8_CHAR")
        if self.lowercase:
            texts = tf_text.case_fold_utf8(texts)
        texts = tf_text.normalize_utf8(texts, self.normalization)
        if self.level == "word":
            texts = tf.strings.regex_replace(texts, _PUNCTUATION, r" \1 ")
        return tf.strings.strip(tf.strings.regex_replace(texts, " +", " "))

    def split(self, texts):
        """`(batch,)` strings -> ragged `(batch, None)` string tokens, without markers or truncation."""
        texts = self.normalize(tf.convert_to_tensor(texts, tf.string))
        if self.level == "char":
            return tf.strings.unicode_split(texts, "UTF-8")
        return tf.strings.split(texts)

    def tokenize(self, texts, max_length=None):
        """`(batch,)` strings -> ragged string tokens `[START] ... [END]`, at most `max_length`.

        `max_length` defaults to the tokenizer's; the input pipeline asks for one more, to see (and
        drop) the training pairs that would otherwise be truncated.
        """
        max_length = self.max_length if max_length is None else max_length
        if not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length must be an int >= 2. Received: max_length={max_length!r}")
        tokens = self.split(texts)[:, : max_length - 2]
        batch = tokens.nrows()
        start = tf.fill([batch, 1], START)
        end = tf.fill([batch, 1], END)
        return tf.concat([start, tokens, end], axis=1)  # (batch, None) ragged

    def __call__(self, texts):
        """`(batch,)` strings -> int32 ids `(batch, t)`, right-padded with 0 (t >= 2)."""
        return self.lookup(self.tokenize(texts)).to_tensor(default_value=PAD_ID)

    def lookup(self, tokens):
        """String tokens (any shape, ragged or dense) -> int32 ids; unknown tokens -> `[UNK]`."""
        if isinstance(tokens, tf.RaggedTensor):
            return tokens.with_flat_values(self._table.lookup(tokens.flat_values))
        return self._table.lookup(tokens)

    # -- ids -> tokens -> strings -----------------------------------------------------------------

    def ids_to_tokens(self, ids):
        """Int ids (any shape) -> string tokens; padding becomes the empty string."""
        return tf.gather(self._tokens, tf.clip_by_value(tf.cast(ids, tf.int32), 0, self.vocab_size - 1))

    def detokenize(self, ids):
        """Int ids `(batch, t)` -> `(batch,)` readable strings; padding and markers are dropped."""
        ids = tf.cast(ids, tf.int32)
        keep = tf.ragged.boolean_mask(ids, (ids == UNK_ID) | (ids > END_ID))  # drop pad, [START], [END]
        tokens = tf.gather(self._tokens, keep)
        if self.level == "char":
            text = tf.strings.reduce_join(tokens, axis=-1)
        else:
            text = attach_punctuation(tf.strings.reduce_join(tokens, axis=-1, separator=" "))
        return tf_text.normalize_utf8(text, "NFC")

    def get_config(self):
        return {
            "vocabulary": self.vocabulary[len(RESERVED):],
            "level": self.level,
            "lowercase": self.lowercase,
            "normalization": self.normalization,
            "max_length": self.max_length,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def attach_punctuation(text):
    """Undoes the spacing of punctuation: `"hello , world !"` -> `"hello, world!"`."""
    text = tf.strings.regex_replace(text, r"(\pN) ([.,:]) (\pN)", r"\1\2\3")  # 3 . 5 -> 3.5
    text = tf.strings.regex_replace(text, r"(\pL) ' (\pL)", r"\1'\2")  # don ' t -> don't
    text = tf.strings.regex_replace(text, r" ([.,!?;:%)\]}»…])", r"\1")  # no space before
    return tf.strings.regex_replace(text, r"([¿¡(\[{«$]) ", r"\1")  # no space after
