"""In-graph text processing with tensorflow-text: strings <-> token ids, carried inside the SavedModel.

    "¿Todavía está en casa?"
      -> repair UTF-8, case-fold, NFKD       "¿todavi\u0301a esta\u0301 en casa?"
      -> space out punctuation, split        ["¿", "todavi\u0301a", "esta\u0301", "en", "casa", "?"]
      -> add markers, truncate, look up      [2, 57, 31, 14, 102, 8, 3]      ([START] ... [END])

Three levels: `"char"` (characters), `"word"` (words and punctuation marks, as above) and
`"wordpiece"`, where each of those words is then split into WordPiece subwords, `"##"` marking a
piece that continues a word (`"todavi\u0301a"` -> `["toda", "##vi\u0301a"]`); the pieces are learned
from the training text by tensorflow-text's vocabulary tool.

Ids 0-3 are reserved: 0 padding, 1 `[UNK]`, 2 `[START]`, 3 `[END]`. Detokenization drops them, joins
tokens (with spaces at the word level, without at the character level, and `"##"` pieces back into
their words), re-attaches punctuation and recomposes accents (NFC), so that the output reads like
ordinary text.
"""

import collections
import unicodedata

import tensorflow as tf
import tensorflow_text as tf_text

from tfattn.ids import END, END_ID, PAD, PAD_ID, RESERVED, START, START_ID, UNK, UNK_ID  # noqa: F401 (public here too)

LEVELS = ("char", "word", "wordpiece")
SUFFIX = "##"  # marks a WordPiece that continues a word: "cats" -> ["cat", "##s"]
PAD_LINE = "[PAD]"  # the padding token in a vocabulary file, where an empty line is not allowed
NORMALIZATIONS = ("NFKD", "NFKC", "NFD", "NFC")

# Any character that is not a letter, a combining mark, a digit or a space is a token of its own.
_PUNCTUATION = r"([^\pL\pM\pN\s])"
_MAX_REPEAT = 1000  # the largest count `{n}` a regular expression takes (RE2)


class Tokenizer(tf.Module):
    """Turns strings into token ids and back, with TensorFlow ops only (so it exports).

    Args:
        vocabulary: list of str. Tokens after the reserved ones (which are added if missing).
        level: str. `"char"`, `"word"` or `"wordpiece"`. Defaults to `"word"`.
        lowercase: bool. Case-fold the text. Defaults to `True`.
        normalization: str. Unicode normalization form. Defaults to `"NFKD"`.
        max_length: int. Maximum tokens per sentence including `[START]` and `[END]`; longer input
            is truncated (the first `max_length - 2` tokens are kept). Defaults to `64`.
        vocabulary_file: str or None. A file written by `write_vocabulary` to fill the lookup tables
            from (a SavedModel then carries it as an asset); it must hold `vocabulary`. Defaults to
            `None` (tables filled from `vocabulary` in memory).
        name: str. Module name.

    Example:

    >>> tok = Tokenizer.adapt(["a cat.", "a dog!"], level="word")
    >>> tok.vocabulary
    ['', '[UNK]', '[START]', '[END]', 'a', '!', '.', 'cat', 'dog']
    >>> tok(["a cat!"]).numpy().tolist()
    [[2, 4, 7, 5, 3]]
    >>> tok.detokenize(tok(["A CAT !"])).numpy().tolist()
    [b'a cat!']

    At the wordpiece level each word is split into the longest pieces of the vocabulary, from the
    left; a word that cannot be split (an unknown character, or longer than 100 bytes) is one `[UNK]`:

    >>> tok = Tokenizer(["un", "able", "##able", "##s", "cat", "!"], level="wordpiece")
    >>> tok.split(["Unables, cats!"]).to_list()
    [[b'un', b'##able', b'##s', b'[UNK]', b'cat', b'##s', b'!']]
    >>> tok.detokenize(tok(["Unable cats!"])).numpy().tolist()
    [b'unable cats!']
    """

    def __init__(self, vocabulary, level="word", lowercase=True, normalization="NFKD", max_length=64,
                 vocabulary_file=None, name=None):
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
        self.vocabulary_file = vocabulary_file
        to_id, to_token = self._initializers(vocabulary_file)
        self._to_id = tf.lookup.StaticHashTable(to_id, UNK_ID)
        self._to_token = tf.lookup.StaticHashTable(to_token, UNK)
        self._wordpiece = self._wordpiece_tokenizer(to_id) if level == "wordpiece" else None

    def _initializers(self, vocabulary_file):
        """token -> id and id -> token initializers, from the vocabulary in memory or from its file.

        With a file (written by `write_vocabulary`), a SavedModel keeps the file as an asset and
        fills the tables from it when it loads.
        """
        if vocabulary_file is None:
            tokens, ids = tf.constant(self._vocabulary), tf.range(len(self._vocabulary), dtype=tf.int64)
            to_id = tf.lookup.KeyValueTensorInitializer(tokens[1:], ids[1:])
            to_token = tf.lookup.KeyValueTensorInitializer(ids, tokens)
        else:
            line, number = tf.lookup.TextFileIndex.WHOLE_LINE, tf.lookup.TextFileIndex.LINE_NUMBER
            to_id = tf.lookup.TextFileInitializer(vocabulary_file, tf.string, line, tf.int64, number)
            to_token = tf.lookup.TextFileInitializer(vocabulary_file, tf.int64, number, tf.string, line)
        return to_id, to_token

    def _wordpiece_tokenizer(self, to_id):
        """The tensorflow-text WordPiece op, on its own table: int64 ids, -1 for a missing piece."""
        table = tf.lookup.StaticHashTable(to_id, -1)
        return tf_text.WordpieceTokenizer(table, suffix_indicator=SUFFIX, token_out_type=tf.string,
                                          unknown_token=UNK)

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
            min_count: int. Tokens seen fewer times are left out (they become `[UNK]`); at the
                wordpiece level, the least count a learned piece needs.
            **kwargs: the other constructor arguments.

        Ties in frequency are broken alphabetically, so the vocabulary is deterministic. At the
        wordpiece level the pieces are learned from the counts of the normalized words by
        `learn_wordpieces`.
        """
        probe = cls([], **kwargs)
        counts = collections.Counter()
        data = texts if isinstance(texts, tf.data.Dataset) else tf.data.Dataset.from_tensor_slices(list(texts))
        for batch in data.batch(4096):
            for row in probe._words(batch).to_list():
                counts.update(t.decode("utf-8") for t in row)
        if probe.level == "wordpiece":
            return cls(learn_wordpieces(counts, max_tokens, min_count), **kwargs)
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
        texts = self.fold_and_normalize(texts)
        if self.level != "char":
            texts = tf.strings.regex_replace(texts, _PUNCTUATION, r" \1 ")
        return tf.strings.strip(tf.strings.regex_replace(texts, " +", " "))

    def fold_and_normalize(self, texts):
        """`(batch,)` strings -> case-folded (if `lowercase`) and normalized to `normalization`, by
        tensorflow-text's ICU ops (`tfattn.serving.core_text.CoreTokenizer` does it in core ops)."""
        if self.lowercase:
            texts = tf_text.case_fold_utf8(texts)
        return tf_text.normalize_utf8(texts, self.normalization)

    def compose(self, texts):
        """`(batch,)` strings -> their NFC form (accents recomposed), by tensorflow-text's ICU op."""
        return tf_text.normalize_utf8(texts, "NFC")

    def split(self, texts):
        """`(batch,)` strings -> ragged `(batch, None)` string tokens, without markers or truncation."""
        words = self._words(texts)
        if self.level != "wordpiece":
            return words
        return self._wordpiece.tokenize(words).merge_dims(1, 2)  # (batch, words, pieces) -> (batch, None)

    def _words(self, texts):
        """`(batch,)` strings -> ragged `(batch, None)` normalized words (characters at the char level)."""
        texts = self.normalize(tf.convert_to_tensor(texts, tf.string))
        if self.level == "char":
            return tf.strings.unicode_split(texts, "UTF-8")
        return tf.strings.split(texts)

    def tokenize(self, texts, max_length=None):
        """`(batch,)` strings -> ragged string tokens `[START] ... [END]`, at most `max_length`.

        `max_length` defaults to the tokenizer's; the input pipeline asks for one more, to see (and
        drop) the training pairs that would otherwise be truncated.
        """
        tokens, _ = self.tokens_and_ids(texts, max_length)
        return tf.RaggedTensor.from_tensor(tokens, padding=PAD)  # (batch, None); no token is ""

    def __call__(self, texts):
        """`(batch,)` strings -> int32 ids `(batch, t)`, right-padded with 0 (t >= 2)."""
        return self.tokens_and_ids(texts)[1]

    def tokens_and_ids(self, texts, max_length=None):
        """`(batch,)` strings -> `(tokens, ids)`: tokens `[START] ... [END]`, at most `max_length`
        (defaults to the tokenizer's), and their ids, both `(batch, t)`, right-padded with "" and 0.
        An empty batch gives `(0, 2)` tensors.
        """
        max_length = self.max_length if max_length is None else max_length
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 2:
            raise ValueError(f"max_length must be an int >= 2. Received: max_length={max_length!r}")
        if self.level == "word" and max_length - 3 <= _MAX_REPEAT:
            tokens = self._word_tokens(texts, max_length)
        else:
            tokens = self._marked(self.split(texts), max_length)
        return tokens, tf.where(tokens == PAD, PAD_ID, self.lookup(tokens))

    def _word_tokens(self, texts, max_length):
        """Words: `(batch,)` strings -> tokens `(batch, t)`, `[START]`, the first `max_length - 2` words
        and `[END]`, "" padding. The words are cut and the markers joined on while each text is one
        string, then one split makes the dense tokens: about 15 graph nodes after `normalize`, where
        splitting into a ragged tensor first took about 55, which every translation paid for."""
        texts = self.normalize(tf.convert_to_tensor(texts, tf.string))  # words one space apart
        n = max_length - 2
        if n == 0:
            texts = tf.zeros_like(texts)  # no word is kept: ""
        else:  # the first n words and nothing after them
            texts = tf.strings.regex_replace(texts, f"(?s)^((?:[^ ]+ ){{{n - 1}}}[^ ]+) .*", r"\1")
        marked = tf.strings.join([START + " ", texts, " " + END])  # "[START]  [END]" without words
        where, tokens, shape = tf.raw_ops.StringSplitV2(input=marked, sep="")  # split at runs of whitespace
        return tf.scatter_nd(where, tokens, tf.maximum(shape, [0, 2]))  # (batch, t); (0, 2) for no text

    def _marked(self, words, max_length):
        """Ragged `(batch, None)` tokens -> `(batch, t)`, `[START]`, the first `max_length - 2` of them,
        `[END]`, "" padding. Truncation and markers are done on dense tensors: 52-61 graph nodes, where
        ragged slicing and concat took 196."""
        lengths = tf.minimum(words.row_lengths(), max_length - 2)  # (batch,)
        words = words.to_tensor(PAD)[:, : max_length - 2]  # (batch, w)
        batch = tf.shape(words)[0]
        tokens = tf.concat([tf.fill([batch, 1], START), words, tf.fill([batch, 1], PAD)], axis=1)  # (batch, w + 2)
        end = tf.range(tf.shape(tokens, out_type=tf.int64)[1]) == lengths[:, None] + 1  # (batch, w + 2)
        return tf.where(end, END, tokens)

    def lookup(self, tokens):
        """String tokens (any shape, ragged or dense) -> int32 ids; unknown tokens -> `[UNK]`."""
        if isinstance(tokens, tf.RaggedTensor):
            return tokens.with_flat_values(self.lookup(tokens.flat_values))
        return tf.cast(self._to_id.lookup(tokens), tf.int32)

    # -- ids -> tokens -> strings -----------------------------------------------------------------

    def ids_to_tokens(self, ids):
        """Int ids (any shape) -> string tokens; padding becomes the empty string."""
        ids = tf.cast(ids, tf.int64)
        return tf.where(ids == PAD_ID, PAD, self._to_token.lookup(ids))  # out of range -> "[UNK]"

    def detokenize(self, ids):
        """Int ids `(batch, t)` -> `(batch,)` readable strings; padding and markers are dropped."""
        ids = tf.cast(ids, tf.int32)
        # Dense, not ragged: 27 graph nodes instead of 138, which every translation pays for;
        # padding and markers become "", then their extra separators go.
        keep = (ids == UNK_ID) | (ids > END_ID)  # (batch, t)
        return self._join(tf.where(keep, self.ids_to_tokens(ids), ""))

    def detokenize_tokens(self, tokens):
        """String tokens `(batch, t)` -> `(batch,)` readable strings, as `detokenize` makes them from
        ids: `""`, `[START]` and `[END]` are dropped. For tokens that are not all in the vocabulary,
        such as output tokens with `[UNK]` replaced by source tokens (`Translator(replace_unknown=True)`)."""
        marker = (tokens == PAD) | (tokens == START) | (tokens == END)  # (batch, t)
        return self._join(tf.where(marker, "", tokens))

    def _join(self, tokens):
        """String tokens `(batch, t)`, "" where dropped -> `(batch,)` readable strings."""
        if self.level == "char":
            text = tf.strings.reduce_join(tokens, axis=-1)
        else:  # words and pieces hold no spaces, so runs of them are separators only
            text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
            text = tf.strings.strip(tf.strings.regex_replace(text, " {2,}", " "))
            if self.level == "wordpiece":  # "un ##able" -> "unable" (a stray "##" at the start goes too)
                text = tf.strings.regex_replace(text, f"(^| ){SUFFIX}", "")
            text = attach_punctuation(text)
        return self.compose(text)

    def write_vocabulary(self, path):
        """Writes the vocabulary to `path`, UTF-8, one token per line: line `i` (0-based) holds id `i`.

        Line 0 holds `"[PAD]"` for the padding id, because `tf.lookup.TextFileInitializer` refuses
        empty lines; with `LINE_NUMBER` values it then gives the ids of `lookup`, and
        `tf_text.WordpieceTokenizer(path)` splits words like this tokenizer. Returns `path`.
        """
        bad = [t for t in self._vocabulary[1:] if not t or "\n" in t or "\r" in t]
        if bad:
            raise ValueError(f"Tokens must be non-empty, without line breaks. Received: tokens={bad[:3]!r}")
        lines = (PAD_LINE,) + self._vocabulary[1:]
        with tf.io.gfile.GFile(str(path), "wb") as f:
            f.write("".join(t + "\n" for t in lines).encode("utf-8"))
        return path

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


def learn_wordpieces(word_counts, max_tokens=None, min_count=1):
    """Learns WordPiece pieces from word counts with tensorflow-text's vocabulary tool.

    The tool (the learner behind `bert_vocab_from_dataset`) binary-searches a count threshold so
    that the vocabulary gets close to, and not above, `max_tokens`: every character seen, alone and
    as a `"##"` suffix, then the pieces (often whole words) whose count reaches the threshold. The
    characters come first, so that if even they do not fit, what is cut is the rarest pieces.
    Punctuation is a word of its own after normalization, so its suffixes (`"##?"`) are left out.

    Args:
        word_counts: dict of str -> int. Normalized words and how often they occur.
        max_tokens: int or None. Vocabulary size including the 4 reserved ids; `None` keeps every
            piece counted `min_count` times or more.
        min_count: int. The least count of a learned piece (the lowest threshold tried).

    Returns:
        list of str: the pieces, without the reserved tokens.

    Example:

    >>> counts = {"walk": 9, "talk": 9, "walking": 4, "talking": 4, "walks": 2}
    >>> learn_wordpieces(counts, max_tokens=26)[18:]  # after the 9 characters, alone and as "##" suffixes
    ['talk', 'walk', '##ing']
    >>> learn_wordpieces({"hi": 2, "?": 1})
    ['?', 'h', 'i', '##h', '##i', 'hi']
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    if not word_counts:
        return []
    unlimited = max_tokens is None
    vocab = learner.learn(dict(word_counts), 2**31 if unlimited else max_tokens, list(RESERVED),
                          lower_thresh=min_count, upper_thresh=min_count if unlimited else None)
    pieces = [t for t in vocab if t not in RESERVED and not _continues_punctuation(t)]
    pieces.sort(key=_characters_first)  # stable: the learner's order within each group
    return pieces if unlimited else pieces[: max(0, max_tokens - len(RESERVED))]


def _continues_punctuation(piece):
    """True for `"##?"`: a one-character suffix that is not a letter, mark or digit."""
    return _is_character_suffix(piece) and unicodedata.category(piece[-1])[0] not in "LMN"


def _characters_first(piece):
    """Sort key: 0 for a character, 1 for a character continuing a word (`"##s"`), 2 for the rest."""
    return 0 if len(piece) == 1 else 1 if _is_character_suffix(piece) else 2


def _is_character_suffix(piece):
    return piece.startswith(SUFFIX) and len(piece) == len(SUFFIX) + 1


def attach_punctuation(text):
    """Undoes the spacing of punctuation: `"hello , world !"` -> `"hello, world!"`."""
    text = tf.strings.regex_replace(text, r"(\pN) ([.,:]) (\pN)", r"\1\2\3")  # 3 . 5 -> 3.5
    text = tf.strings.regex_replace(text, r"(\pL) ' (\pL)", r"\1'\2")  # don ' t -> don't
    text = tf.strings.regex_replace(text, r" ([.,!?;:%)\]}»…])", r"\1")  # no space before
    return tf.strings.regex_replace(text, r"([¿¡(\[{«$]) ", r"\1")  # no space after
