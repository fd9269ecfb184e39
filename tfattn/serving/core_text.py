"""Case folding and Unicode normalization in core TensorFlow ops, for an export any runtime loads.

`tfattn.data.text.Tokenizer` folds case and normalizes with tensorflow-text's ICU ops
(`CaseFoldUTF8`, `NormalizeUTF8`). Runtimes without tensorflow-text's kernels (`saved_model_cli
run`, TensorFlow Serving, TF Java, the C API) or without ICU's normalization data cannot run them.
`CoreTokenizer` gives the same strings with core ops only, from tables the exporting process
computes with those very ICU ops:

1. Folding. Every code point whose folded and decomposed form differs from itself (22,269 of them:
   capitals, accented letters, compatibility forms such as `ﬁ` or full-width digits, Hangul
   syllables) is a key of a table; a text is cut into characters (`UnicodeDecode`, `UnicodeEncode`),
   each looked up, and joined again. Case folding and decomposition map one character at a time,
   so this equals ICU's result up to the order of combining marks.
2. Canonical order. Each run of combining marks is sorted by combining class, stably, as
   decomposition does (`"e\u0301\u0323"` -> `"e\u0323\u0301"`): one sort of the text's code points
   by (run, class), whatever the length of the run (no pass count that a long run could exceed).
3. Composition (NFC, for detokenized output): Unicode's canonical composition algorithm (UAX #15,
   section 1.3), run on the code points of every run of a starter and the characters that may
   compose with it: each is composed into the last starter when a pair table (every primary
   composite's two characters, checked with ICU, and the Hangul syllables) holds the pair and no
   character between them blocks it. A loop over the positions in a run: as many steps as the
   longest run has characters, no fixed number.

So tokens, ids and detokenized text are ICU's by construction, for any input:
`tests/serving/test_core_text.py` compares them with ICU's over random strings of stacked marks,
emoji and invalid bytes. Where they can differ: the combining classes are Python's `unicodedata`
(Unicode 14), so a mark assigned later than ICU's data counts as class 0 here, and the composing
forms (NFC, NFKC) of a source tokenizer are left to tensorflow-text (`CoreTokenizer.exact_for`).
"""

import functools
import sys
import unicodedata

import tensorflow as tf

from tfattn.data.text import SUFFIX, UNK, Tokenizer
from tfattn.serving.core_wordpiece import CoreWordpiece

USES = ("tokenize", "detokenize")
MISSING = "\x00"  # a table's default: no folded, normalized or composed form holds a NUL
PAIR = 0x110000  # a pair of code points (a, b) is the key a * PAIR + b of the composition table


def _code_points():
    return [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]  # no surrogates


def _icu_map(strings, fn):
    """`fn` (tensorflow-text ops) applied to a list of str, as a list of str."""
    out = fn(tf.constant([s.encode("utf-8") for s in strings], tf.string)).numpy()
    return [s.decode("utf-8") for s in out]


@functools.lru_cache(maxsize=8)
def folding_pairs(lowercase, normalization):
    """(characters, their forms): each code point whose case-folded (if `lowercase`) and decomposed
    form differs from itself, with that form, computed by tensorflow-text (ICU). The decomposition is
    NFKD for the compatibility forms (NFKD, NFKC), NFD for the canonical ones."""
    import tensorflow_text as tf_text

    form = "NFKD" if normalization in ("NFKD", "NFKC") else "NFD"
    fold = tf_text.case_fold_utf8 if lowercase else (lambda x: x)
    chars = _code_points()
    forms = _icu_map(chars, lambda x: tf_text.normalize_utf8(fold(x), form))
    pairs = [(c, f) for c, f in zip(chars, forms) if c != f]
    return tuple(c for c, _ in pairs), tuple(f for _, f in pairs)


@functools.lru_cache(maxsize=1)
def combining_classes():
    """(code points, their canonical combining class): every code point of a non-zero class
    (Python's `unicodedata`)."""
    pairs = [(c, unicodedata.combining(chr(c))) for c in map(ord, _code_points()) if unicodedata.combining(chr(c))]
    return tuple(c for c, _ in pairs), tuple(k for _, k in pairs)


@functools.lru_cache(maxsize=1)
def composition_pairs():
    """(first * 0x110000 + second, composite): every pair of code points that NFC composes into one,
    the primary composites' canonical decompositions that ICU composes again (exclusions and singletons
    left out) and the Hangul syllables' (leading + vowel jamo, then that syllable + trailing jamo)."""
    import tensorflow_text as tf_text

    candidates = {}
    for c in _code_points():
        parts = unicodedata.decomposition(c).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            candidates[chr(int(parts[0], 16)) + chr(int(parts[1], 16))] = c
    pairs = [(ord(k[0]), ord(k[1]), ord(v)) for k, v, nfc in zip(
        candidates, candidates.values(), _icu_map(list(candidates), lambda x: tf_text.normalize_utf8(x, "NFC")))
        if nfc == v]
    for lead in range(19):  # Hangul: 19 leading, 21 vowel, 27 trailing jamo (Unicode, section 3.12)
        for vowel in range(21):
            syllable = 0xAC00 + (lead * 21 + vowel) * 28
            pairs.append((0x1100 + lead, 0x1161 + vowel, syllable))
            pairs += [(syllable, 0x11A8 + trail, syllable + 1 + trail) for trail in range(27)]
    return tuple(a * PAIR + b for a, b, _ in pairs), tuple(c for _, _, c in pairs)


@functools.lru_cache(maxsize=1)
def second_starters():
    """The code points of class 0 that may compose with the character before them (the second of a
    composition pair, such as Oriya's U+0B3E or a Hangul vowel): a run of characters that may compose
    continues over them."""
    keys, _ = composition_pairs()
    return tuple(sorted({k % PAIR for k in keys if not unicodedata.combining(chr(k % PAIR))}))


def lookup_or_keep(table, strings):
    """Each string's value in `table`, or the string itself where the table has none."""
    found = table.lookup(strings)
    return tf.where(found == MISSING, strings, found)


def join_rows(pieces, row, rows):
    """Strings `(n,)` and the row of each `(n,)`, in order -> `(rows,)` strings, each its pieces joined.

    Raw ops on flat tensors, not ragged ones: a dozen graph nodes where ragged splitting and joining
    took over a hundred, which every call of an export pays for."""
    return tf.raw_ops.UnsortedSegmentJoin(inputs=pieces, segment_ids=row, num_segments=rows)


def code_points(texts):
    """`(batch,)` UTF-8 strings -> `(splits (batch + 1,), code points (chars,), row of each (chars,))`."""
    splits, points = tf.raw_ops.UnicodeDecode(input=texts, input_encoding="UTF-8", Tsplits=tf.int32)
    row = tf.raw_ops.UpperBound(sorted_inputs=splits[None, 1:], values=tf.range(tf.size(points))[None],
                                out_type=tf.int32)[0]  # (chars,)
    return splits, points, row


def each_character(table, texts):
    """`(batch,)` strings -> the same with each character replaced by its value in `table`, if any."""
    _, points, row = code_points(texts)
    chars = tf.raw_ops.UnicodeEncode(  # one string per character: (characters,)
        input_values=points, input_splits=tf.range(tf.size(points) + 1), output_encoding="UTF-8")
    return join_rows(lookup_or_keep(table, chars), row, tf.size(texts))  # (batch,)


def run_starts(splits, starts_run):
    """Bool `(chars,)`: where a run begins: at `starts_run (chars,)`, and at each text's first character."""
    first = tf.scatter_nd(splits[:-1, None], tf.ones_like(splits[:-1]), tf.shape(starts_run) + 1)[:-1]  # (chars,)
    return tf.logical_or(starts_run, first > 0)


def canonical_order(texts, classes):
    """`(batch,)` decomposed strings -> the same with each run of combining marks in canonical order:
    the code points sorted, stably, by (run, combining class), a run being a character of class 0 and
    the marks after it. `classes` maps a code point to its class (0 if absent)."""
    splits, points, _ = code_points(texts)
    k = classes.lookup(points)  # (chars,)
    run = tf.cumsum(tf.cast(run_starts(splits, k == 0), tf.int64))  # (chars,): non-decreasing
    order = tf.argsort(run * 256 + tf.cast(k, tf.int64), stable=True)  # classes are below 256
    return tf.raw_ops.UnicodeEncode(input_values=tf.gather(points, order), input_splits=splits,
                                    output_encoding="UTF-8")


def compose(texts, classes, seconds, pairs):
    """`(batch,)` canonically decomposed strings -> NFC: the canonical composition algorithm of UAX #15.

    A run is a character and the characters after it that may compose into a starter before them
    (a non-zero class, or `seconds`); runs are laid out as rows `(runs, longest)`, and a loop over the
    positions 1 .. longest - 1 composes each character into its run's last starter where `pairs`
    holds the pair and no character left between them blocks it (one of class 0, or of a class at
    least its own), as the algorithm does from left to right."""
    splits, points, row = code_points(texts)
    k = classes.lookup(points)  # (chars,)
    starts = run_starts(splits, tf.logical_and(k == 0, tf.logical_not(seconds.lookup(points) > 0)))
    run = tf.cumsum(tf.cast(starts, tf.int32)) - 1  # (chars,)
    first = tf.where(starts)[:, 0]  # (runs,): each run's first character
    position = tf.range(tf.size(points)) - tf.gather(tf.cast(first, tf.int32), run)  # (chars,)
    shape = tf.stack([tf.size(first), tf.reduce_max(tf.concat([position, [0]], 0)) + 1])  # (runs, longest)
    where = tf.stack([run, position], axis=1)  # (chars, 2)
    grid = tf.tensor_scatter_nd_update(tf.fill(shape, -1), where, points)  # (runs, longest), -1: none
    grid = _compose_runs(grid, tf.tensor_scatter_nd_update(tf.fill(shape, -1), where, k), pairs)
    kept = tf.gather_nd(grid, where)  # (chars,): the composed code point, or -1 where it went into one
    rows = tf.math.unsorted_segment_sum(tf.cast(kept >= 0, tf.int32), row, tf.size(texts))  # (batch,)
    return tf.raw_ops.UnicodeEncode(input_values=tf.boolean_mask(kept, kept >= 0),
                                    input_splits=tf.concat([[0], tf.cumsum(rows)], 0), output_encoding="UTF-8")


def _compose_runs(grid, classes, pairs):
    """The loop of `compose`: code points `grid (runs, longest)` and their classes -> composed, -1
    where a character went into its starter."""
    runs = tf.range(tf.shape(grid)[0])  # (runs,)

    def step(j, grid, starter, last):
        # starter (runs,): the position of the run's last starter (-1: none yet); last: the class of
        # the last character left since it (-1: none). Position j's character, c, of class kj:
        c, kj = grid[:, j], classes[:, j]
        base = tf.gather_nd(grid, tf.stack([runs, tf.maximum(starter, 0)], axis=1))  # (runs,)
        composite = pairs.lookup(tf.cast(base, tf.int64) * PAIR + tf.cast(c, tf.int64))  # -1: no pair
        unblocked = tf.where(kj == 0, last < 0, (last < 0) | ((last > 0) & (last < kj)))
        merge = (c >= 0) & (starter >= 0) & (composite >= 0) & unblocked  # (runs,)
        grid = tf.tensor_scatter_nd_update(grid, tf.stack([runs, tf.maximum(starter, 0)], 1),
                                           tf.where(merge, composite, base))
        grid = tf.tensor_scatter_nd_update(grid, tf.stack([runs, tf.fill(tf.shape(runs), j)], 1),
                                           tf.where(merge, -1, c))
        left = (c >= 0) & ~merge  # a character left in place: a new starter (class 0), or a blocker
        starter = tf.where(left & (kj == 0), j, starter)
        last = tf.where(left, tf.where(kj == 0, -1, kj), last)
        return j + 1, grid, starter, last

    start = tf.where(classes[:, 0] == 0, 0, -1)  # a run that opens with a mark has no starter
    _, grid, _, _ = tf.while_loop(lambda j, *_: j < tf.shape(grid)[1], step,
                                  (tf.constant(1), grid, start, -tf.ones_like(start)))
    return grid


class CoreTokenizer(Tokenizer):
    """A `Tokenizer` whose case folding and Unicode normalization are core TensorFlow ops.

    It gives the same tokens, ids and detokenized text as `Tokenizer` (see the module docstring for
    how and where not), so a SavedModel holding it runs where tensorflow-text's ops do not. Its
    tables are computed with tensorflow-text when it is made (about a second). WordPiece splitting
    is core ops too (`tfattn.serving.core_wordpiece`).

    Args:
        vocabulary, level, lowercase, normalization, max_length, vocabulary_file, name: as `Tokenizer`.
        uses: tuple of str. `"tokenize"` (strings to tokens: the folding table) and `"detokenize"`
            (ids to strings: the composition table); an export's source tokenizer only tokenizes
            and its target tokenizer only detokenizes, so each holds one table. Defaults to both.
            (The composition table holds every pair that NFC composes, whatever the vocabulary:
            detokenized text is ICU's also for tokens of another vocabulary, as `[UNK]` replaced by
            source tokens.)

    Example:

    >>> tok = CoreTokenizer(["todavi\u0301a", "¿", "?"], level="word")
    >>> tok.tokenize(["¿TODAVÍA?"]).to_list()
    [[b'[START]', b'\xc2\xbf', b'todavi\xcc\x81a', b'?', b'[END]']]
    >>> tok.detokenize(tok(["¿TODAVÍA?"])).numpy()[0].decode()
    '¿todavía?'
    """

    def __init__(self, vocabulary, level="word", lowercase=True, normalization="NFKD", max_length=64,
                 vocabulary_file=None, name=None, uses=USES):
        super().__init__(vocabulary, level=level, lowercase=lowercase, normalization=normalization,
                         max_length=max_length, vocabulary_file=vocabulary_file, name=name)
        if not uses or set(uses) - set(USES):
            raise ValueError(f"uses must hold one or both of {USES}. Received: uses={uses!r}")
        self.uses = tuple(uses)
        self._classes = _table(*combining_classes(), default=0)
        if "tokenize" in uses:
            self._folding = _table(*folding_pairs(lowercase, normalization))
        if "detokenize" in uses or normalization in ("NFC", "NFKC"):
            self._decomposition = _table(*folding_pairs(False, "NFD"))  # NFC composes what NFD gives
            self._pairs = _table(*composition_pairs(), default=-1)
            self._seconds = _table(second_starters(), (1,) * len(second_starters()), default=0)

    @classmethod
    def like(cls, tokenizer, vocabulary_file=None, uses=USES):
        """A `CoreTokenizer` with `tokenizer`'s settings and vocabulary."""
        return cls(**tokenizer.get_config(), vocabulary_file=vocabulary_file, uses=uses)

    @staticmethod
    def exact_for(tokenizer):
        """Whether a `CoreTokenizer` gives exactly `tokenizer`'s tokens: for the decomposing forms, at
        every level."""
        return tokenizer.normalization in ("NFKD", "NFD")

    def _wordpiece_tokenizer(self, to_id):
        """WordPiece splitting in core ops, on its own table (int64 ids, -1 for a missing piece);
        substrings longer than the vocabulary's longest entry are not looked up."""
        longest = max(len(token) for token in self._vocabulary)
        return CoreWordpiece(tf.lookup.StaticHashTable(to_id, -1), longest, suffix=SUFFIX, unknown=UNK)

    def fold_and_normalize(self, texts):
        """`(batch,)` strings -> folded (if `lowercase`) and normalized: character by character from
        the folding table, marks in canonical order, then composed for NFC and NFKC."""
        self._check_use("tokenize")
        texts = canonical_order(each_character(self._folding, texts), self._classes)
        return self.compose(texts) if self.normalization in ("NFC", "NFKC") else texts

    def compose(self, texts):
        """`(batch,)` strings -> NFC: decomposed (NFD), marks put in canonical order, then composed
        (`compose`), as ICU's NFC does."""
        if self.normalization not in ("NFC", "NFKC"):
            self._check_use("detokenize")
        decomposed = canonical_order(each_character(self._decomposition, texts), self._classes)
        return compose(decomposed, self._classes, self._seconds, self._pairs)


    def _check_use(self, use):
        if use not in self.uses:
            raise ValueError(f"This CoreTokenizer was made without its {use} table. Received: uses={self.uses!r}")


def _table(keys, values, default=MISSING):
    """A static table from `keys` to `values` (strings, or ints: int32 code points, int64 pairs)."""
    if not keys:  # a table needs one key at least
        keys, values = (MISSING,), (MISSING,)
    if isinstance(default, int):
        keys = tf.constant(keys, tf.int64 if max(keys) >= 2**31 else tf.int32)
        values = tf.constant(values, tf.int32)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), default)
