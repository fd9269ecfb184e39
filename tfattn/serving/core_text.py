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
2. Canonical order. A run of combining marks is put in the order of their combining classes, as
   decomposition does (`"e\u0301\u0323"` -> `"e\u0323\u0301"`), by regular-expression swaps, run only
   on texts that hold two marks side by side.
3. Composition (NFC, for detokenized output): the text is cut into clusters (a character and the
   marks after it; a Hangul syllable's jamo) and each cluster is looked up in a table of composed
   forms: every precomposed character's decomposition, and every cluster of a character of the
   vocabularies with one or two of their marks (three, for vocabularies of up to 12 marks).

Where it differs from ICU: a cluster of marks that neither covers (more marks than that, or marks
after a character outside the vocabularies) stays decomposed in detokenized text where ICU would
compose part of it. The composing forms (NFC, NFKC) of a source tokenizer would share that limit in
its tokens, so `CoreTokenizer.exact_for` takes only NFKD (the default) and NFD tokenizers. The
combining classes are Python's `unicodedata` (Unicode 14): a mark assigned later counts as class 0.
`tests/serving/test_core_text.py` checks tokens, ids and text against ICU over mixed scripts.
"""

import functools
import sys
import unicodedata

import tensorflow as tf

from tfattn.data.text import Tokenizer

USES = ("tokenize", "detokenize")
MISSING = "\x00"  # a table's default: no folded, normalized or composed form holds a NUL
CLUSTER = "\x1f"  # put before each cluster to cut a text into clusters; controls never reach here
HANGUL_CLUSTER = "[\u1100-\u1112][\u1161-\u1175][\u11a8-\u11c2]?"  # leading, vowel, optional trailing jamo


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


@functools.lru_cache(maxsize=8)
def composition_pairs(characters=frozenset()):
    """(clusters, composed forms): every precomposed character's canonical decomposition, and each
    cluster of a base in `characters` (or a space, or none) with one or two marks of `characters`,
    whose NFC form (by tensorflow-text, ICU) differs from it."""
    import tensorflow_text as tf_text

    pairs = dict(_precomposed())
    marks = sorted(c for c in characters if unicodedata.category(c).startswith("M"))
    bases = sorted({c for c in characters if c not in marks} | {" ", ""})
    runs = [m for m in marks] + ([a + b for a in marks for b in marks] if len(marks) <= 32 else [])
    runs += [a + b + c for a in marks for b in marks for c in marks] if len(marks) <= 12 else []
    clusters = [b + r for b in bases for r in runs if b + r not in pairs]
    if clusters:
        composed = _icu_map(clusters, lambda x: tf_text.normalize_utf8(x, "NFC"))
        pairs.update({k: v for k, v in zip(clusters, composed) if k != v})
    return tuple(pairs), tuple(pairs.values())


@functools.lru_cache(maxsize=1)
def _precomposed():
    """(decomposition, character) for every precomposed character (ICU's NFC gives it back)."""
    import tensorflow_text as tf_text

    chars = _code_points()
    decomposed = _icu_map(chars, lambda x: tf_text.normalize_utf8(x, "NFD"))
    recomposed = _icu_map(decomposed, lambda x: tf_text.normalize_utf8(x, "NFC"))
    return tuple((d, c) for c, d, r in zip(chars, decomposed, recomposed) if d != c and r == c)


def _class_of(chars):
    """A regular-expression character class of `chars` (sorted code points), as ranges."""
    ranges, start = [], None
    for i, c in enumerate(chars):
        if start is None:
            start = c
        if i + 1 == len(chars) or ord(chars[i + 1]) != ord(c) + 1:
            ranges.append(f"\\x{{{ord(start):x}}}" + ("" if start == c else f"-\\x{{{ord(c):x}}}"))
            start = None
    return "[" + "".join(ranges) + "]"


@functools.lru_cache(maxsize=1)
def reordering_patterns():
    """(a pattern for two adjacent marks of a non-zero class, one swap pattern per class k: a mark
    of a higher class followed by a mark of class k)."""
    classes = {}
    for c in _code_points():
        k = unicodedata.combining(c)
        if k:
            classes.setdefault(k, []).append(c)
    marks = _class_of(sorted(c for chars in classes.values() for c in chars))
    swaps = []
    for k in sorted(classes):
        higher = sorted(c for j, chars in classes.items() if j > k for c in chars)
        if higher:
            swaps.append(f"({_class_of(higher)})({_class_of(classes[k])})")
    return f"(?s).*{marks}{marks}.*", tuple(swaps)


@functools.lru_cache(maxsize=1)
def cluster_pattern():
    """A pattern for one cluster: a Hangul syllable's jamo, or any character followed by the marks that
    may compose with it (those of a non-zero combining class, and the few of class 0 that are the
    second of a canonical pair, such as Oriya's U+0B3E)."""
    following = []
    for c in _code_points():
        parts = unicodedata.decomposition(c).split()
        if unicodedata.combining(c):
            following.append(c)
        if len(parts) == 2 and not parts[0].startswith("<") and not unicodedata.combining(chr(int(parts[1], 16))):
            following.append(chr(int(parts[1], 16)))
    return f"(?s)({HANGUL_CLUSTER}|.{_class_of(sorted(set(following)))}*)"


def lookup_or_keep(table, strings):
    """Each string's value in `table`, or the string itself where the table has none."""
    found = table.lookup(strings)
    return tf.where(found == MISSING, strings, found)


def join_rows(pieces, row, rows):
    """Strings `(n,)` and the row of each `(n,)`, in order -> `(rows,)` strings, each its pieces joined.

    Raw ops on flat tensors, not ragged ones: a dozen graph nodes where ragged splitting and joining
    took over a hundred, which every call of an export pays for."""
    return tf.raw_ops.UnsortedSegmentJoin(inputs=pieces, segment_ids=row, num_segments=rows)


def canonical_order(texts):
    """`(batch,)` strings -> the same with each run of combining marks in canonical order (stable by
    combining class). Only texts with two adjacent marks make the swaps run."""
    adjacent, swaps = reordering_patterns()

    def sweep(t):
        for pattern in swaps:
            t = tf.strings.regex_replace(t, pattern, r"\2\1")
        return t

    def step(t, done):
        swapped = sweep(t)
        return swapped, tf.reduce_all(swapped == t)

    def reorder():
        start = (texts, tf.constant(False))
        return tf.while_loop(lambda t, done: tf.logical_not(done), step, start, maximum_iterations=16)[0]

    return tf.cond(tf.reduce_any(tf.strings.regex_full_match(texts, adjacent)), reorder, lambda: texts)


class CoreTokenizer(Tokenizer):
    """A `Tokenizer` whose case folding and Unicode normalization are core TensorFlow ops.

    It gives the same tokens, ids and detokenized text as `Tokenizer` (see the module docstring for
    how and where not), so a SavedModel holding it runs where tensorflow-text's ops do not. Its
    tables are computed with tensorflow-text when it is made (about a second). WordPiece splitting
    stays tensorflow-text's op.

    Args:
        vocabulary, level, lowercase, normalization, max_length, vocabulary_file, name: as `Tokenizer`.
        other_vocabulary: list of str. Tokens of another vocabulary whose characters detokenized text
            may hold (the source's, where `[UNK]` is replaced by source tokens). Defaults to `()`.
        uses: tuple of str. `"tokenize"` (strings to tokens: the folding table) and `"detokenize"`
            (ids to strings: the composition table); an export's source tokenizer only tokenizes
            and its target tokenizer only detokenizes, so each holds one table. Defaults to both.

    Example:

    >>> tok = CoreTokenizer(["todavi\u0301a", "¿", "?"], level="word")
    >>> tok.tokenize(["¿TODAVÍA?"]).to_list()
    [[b'[START]', b'\xc2\xbf', b'todavi\xcc\x81a', b'?', b'[END]']]
    >>> tok.detokenize(tok(["¿TODAVÍA?"])).numpy()[0].decode()
    '¿todavía?'
    """

    def __init__(self, vocabulary, level="word", lowercase=True, normalization="NFKD", max_length=64,
                 vocabulary_file=None, name=None, other_vocabulary=(), uses=USES):
        super().__init__(vocabulary, level=level, lowercase=lowercase, normalization=normalization,
                         max_length=max_length, vocabulary_file=vocabulary_file, name=name)
        if not uses or set(uses) - set(USES):
            raise ValueError(f"uses must hold one or both of {USES}. Received: uses={uses!r}")
        self.uses = tuple(uses)
        if "tokenize" in uses:
            self._folding = _table(*folding_pairs(lowercase, normalization))
        if "detokenize" in uses or normalization in ("NFC", "NFKC"):
            characters = frozenset(c for t in [*vocabulary, *other_vocabulary] for c in t)
            self._composition = _table(*composition_pairs(characters))

    @classmethod
    def like(cls, tokenizer, vocabulary_file=None, other_vocabulary=(), uses=USES):
        """A `CoreTokenizer` with `tokenizer`'s settings and vocabulary."""
        return cls(**tokenizer.get_config(), vocabulary_file=vocabulary_file, other_vocabulary=other_vocabulary,
                   uses=uses)

    @staticmethod
    def exact_for(tokenizer):
        """Whether a `CoreTokenizer` gives exactly `tokenizer`'s tokens: for the decomposing forms."""
        return tokenizer.normalization in ("NFKD", "NFD")

    def fold_and_normalize(self, texts):
        """`(batch,)` strings -> folded (if `lowercase`) and normalized: character by character from
        the folding table, marks in canonical order, then composed for NFC and NFKC."""
        self._check_use("tokenize")
        splits, code_points = tf.raw_ops.UnicodeDecode(input=texts, input_encoding="UTF-8", Tsplits=tf.int32)
        chars = tf.raw_ops.UnicodeEncode(  # one string per character: (characters,)
            input_values=code_points, input_splits=tf.range(tf.size(code_points) + 1), output_encoding="UTF-8")
        row = tf.raw_ops.UpperBound(sorted_inputs=splits[None, 1:], values=tf.range(tf.size(code_points))[None],
                                    out_type=tf.int32)[0]  # (characters,): the row of each
        texts = join_rows(lookup_or_keep(self._folding, chars), row, tf.size(texts))  # (batch,)
        texts = canonical_order(texts)
        return self.compose(texts) if self.normalization in ("NFC", "NFKC") else texts

    def compose(self, texts):
        """`(batch,)` canonically decomposed strings -> NFC, cluster by cluster from the composition table."""
        if self.normalization not in ("NFC", "NFKC"):
            self._check_use("detokenize")
        marked = tf.strings.regex_replace(texts, cluster_pattern(), CLUSTER + r"\1")
        where, clusters, _ = tf.raw_ops.StringSplitV2(input=marked, sep=CLUSTER)  # (clusters, 2), (clusters,)
        return join_rows(lookup_or_keep(self._composition, clusters), where[:, 0], tf.size(texts))


    def _check_use(self, use):
        if use not in self.uses:
            raise ValueError(f"This CoreTokenizer was made without its {use} table. Received: uses={self.uses!r}")


def _table(keys, values):
    if not keys:  # a table needs one key at least
        keys, values = (MISSING,), (MISSING,)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(list(keys), list(values)), MISSING)
