"""Tests for tfattn.data.text: the in-graph Tokenizer (normalize, split, vocabulary, ids, detokenize).

Expected tokens are written in NFKD, the default normalization: "é" is "e\u0301" in tokens.
"""

import json
import re

import pytest
import tensorflow as tf

from conftest import detokenized, ids, tokens
from tfattn.data.text import END_ID, PAD_ID, RESERVED, START_ID, UNK_ID, Tokenizer

E_ACUTE = "e\u0301"  # "é" after NFKD: "e" + COMBINING ACUTE ACCENT
SIGNATURE = [tf.TensorSpec([None], tf.string)]

# Sentences every tokenizer below is adapted on, so that they round-trip without [UNK].
ROUND_TRIP = [
    "i don't know, 3.5 cats!",
    "¿dónde está?",
    "hola, mundo!",
    "él es él.",
    "שלום, עולם!",  # right-to-left (Hebrew)
    "مرحبا بالعالم",  # right-to-left (Arabic)
    "😀 ok",
]


@pytest.fixture(scope="module")
def word():
    return Tokenizer.adapt(ROUND_TRIP, level="word")


@pytest.fixture(scope="module")
def char():
    return Tokenizer.adapt(ROUND_TRIP, level="char")


@pytest.fixture(scope="module", params=["word", "char"])
def either(request, word, char):
    return {"word": word, "char": char}[request.param]


# --- normalization and case --------------------------------------------------------------------


@pytest.mark.parametrize("level, expected", [("word", [E_ACUTE]), ("char", ["e", "\u0301"])])
def test_nfkd_decomposes_accents(level, expected):
    assert tokens(Tokenizer([], level=level), "é") == expected


@pytest.mark.parametrize(
    "normalization, expected",
    [("NFKD", E_ACUTE + "fi"), ("NFD", E_ACUTE + "fi"), ("NFC", "éfi"), ("NFKC", "éfi")],
)
def test_normalization_forms(normalization, expected):
    # Case folding (NFKC_Casefold) already turns the ligature "ﬁ" into "fi".
    assert tokens(Tokenizer([], normalization=normalization), "éﬁ") == [expected]


@pytest.mark.parametrize(
    "text, lowercase, expected",
    [
        ("HOLA", True, ["hola"]),
        ("ÉL", True, [E_ACUTE + "l"]),  # "ÉL" -> "él", non-ASCII too
        ("ÑANDÚ", True, ["n\u0303andu\u0301"]),
        ("ÉL", False, ["E\u0301L"]),
    ],
)
def test_lowercase(text, lowercase, expected):
    assert tokens(Tokenizer([], lowercase=lowercase), text) == expected


# --- splitting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("hola, mundo!", ["hola", ",", "mundo", "!"]),
        ("¿qué?", ["¿", "qu" + E_ACUTE, "?"]),
        ("i don't know, 3.5 cats!", ["i", "don", "'", "t", "know", ",", "3", ".", "5", "cats", "!"]),
        ("(a)-b", ["(", "a", ")", "-", "b"]),
        ("  a  \t\u00a0 b\n", ["a", "b"]),
    ],
)
def test_word_level_spaces_out_punctuation(text, expected):
    assert tokens(Tokenizer([], level="word"), text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a b", ["a", " ", "b"]),
        ("a  \t\u00a0b", ["a", " ", "b"]),  # a run of spaces, tab and NBSP is one space
        ("  ab  ", ["a", "b"]),  # stripped at the ends
        ("hi, yo!", ["h", "i", ",", " ", "y", "o", "!"]),
        ("qué", ["q", "u", "e", "\u0301"]),
    ],
)
def test_char_level_splits_characters_and_keeps_one_space(text, expected):
    assert tokens(Tokenizer([], level="char"), text) == expected


def test_start_and_end_markers_are_added():
    tok = Tokenizer(["a", "b"], level="word")
    assert tok.tokenize(["a b", "b", "", "b a b"], max_length=4).to_list() == [
        [b"[START]", b"a", b"b", b"[END]"],
        [b"[START]", b"b", b"[END]"],
        [b"[START]", b"[END]"],  # an empty row between others
        [b"[START]", b"b", b"a", b"[END]"],  # truncated before the markers go in
    ]


def test_tokens_and_ids_dense_with_markers_truncation_and_padding():
    """What serving and `__call__` use; `tokenize` is its ragged view."""
    tok = Tokenizer(["a", "b"], level="word")  # ids: a 4, b 5
    tokens, ids_ = tok.tokens_and_ids(tf.constant(["a b", "", "b a b c", "c"]), max_length=4)
    assert tokens.numpy().tolist() == [
        [b"[START]", b"a", b"b", b"[END]"],
        [b"[START]", b"[END]", b"", b""],  # an empty row, padded
        [b"[START]", b"b", b"a", b"[END]"],  # truncated before the markers go in
        [b"[START]", b"c", b"[END]", b""],  # unknown
    ]
    assert ids_.numpy().tolist() == [[2, 4, 5, 3], [2, 3, 0, 0], [2, 5, 4, 3], [2, 1, 3, 0]]
    assert tok.tokenize(["b", ""]).to_list() == [[b"[START]", b"b", b"[END]"], [b"[START]", b"[END]"]]
    empty_tokens, empty_ids = tok.tokens_and_ids(tf.constant([], tf.string))
    assert empty_tokens.shape == empty_ids.shape == (0, 2)


WORD_TEXTS = ["a b", "", "   ", "b a b c a", "¿Todavía?", "x" * 100, "a " * 50, "\t a\nb ", b"\xff\xfe", "😀 🎉"]


def marked_words_oracle(tok, texts, max_length):
    """Tokens and ids built in Python from `split`'s ragged words: `[START]`, the first `max_length - 2`
    words, `[END]`, "" padding to the longest; ids from the vocabulary's positions, 1 if unknown."""
    rows = [[b"[START]", *w[: max_length - 2], b"[END]"] for w in tok.split(texts).to_list()]
    rows = [r + [b""] * (max(map(len, rows)) - len(r)) for r in rows]
    ids_of = {t.encode(): i for i, t in enumerate(tok.vocabulary)}
    return rows, [[ids_of.get(t, 1) if t else 0 for t in r] for r in rows]


@pytest.mark.parametrize("max_length", [2, 3, 6, 40])
def test_word_tokens_are_the_split_words_between_markers(max_length):
    """The word level cuts and marks its words while each text is one string, then splits once; the
    oracle splits first (the ragged path the other levels take)."""
    tok = Tokenizer(["a", "b", "¿", "?", "todavi\u0301a", "x" * 100], level="word")
    want_tokens, want_ids = marked_words_oracle(tok, WORD_TEXTS, max_length)
    tokens, ids_ = tok.tokens_and_ids(tf.constant(WORD_TEXTS), max_length=max_length)
    assert tokens.numpy().tolist() == want_tokens
    assert ids_.numpy().tolist() == want_ids


def test_word_tokens_over_spa_eng_test():
    """Both sides of spa-eng TEST (2,380 sentences, some longer than 40 tokens) against the oracle."""
    from conftest import shared_data
    from tfattn.data.corpora import load_anki, split_pairs

    parts = split_pairs(load_anki(shared_data("spa-eng", "spa.txt")))
    for side in (0, 1):
        tok = Tokenizer.adapt([p[side] for p in parts["train"][::20]], max_tokens=3000, max_length=40)
        texts = [p[side] for p in parts["test"]]
        for max_length in (40, 8):
            want_tokens, want_ids = marked_words_oracle(tok, texts, max_length)
            tokens, ids_ = tok.tokens_and_ids(tf.constant(texts), max_length=max_length)
            assert tokens.numpy().tolist() == want_tokens
            assert ids_.numpy().tolist() == want_ids


def test_detokenize_skips_markers_between_words_and_leaves_no_extra_spaces():
    tok = Tokenizer.adapt(TINY)  # ids: cat 4, the 5, a 6, dog 7
    assert tok.detokenize([[5, 0, 2, 4, 3, 0, 7], [0, 0, 0, 0, 0, 0, 0]]).numpy().tolist() == [
        b"the cat dog",  # padding and markers anywhere are dropped with their separators
        b"",
    ]


# --- vocabulary --------------------------------------------------------------------------------

TINY = ["the cat", "the dog", "a cat"]  # counts: cat 2, the 2, a 1, dog 1


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({}, ["cat", "the", "a", "dog"]),  # by frequency, ties alphabetical
        ({"max_tokens": 6}, ["cat", "the"]),  # max_tokens counts the 4 reserved ids
        ({"max_tokens": 5}, ["cat"]),
        ({"max_tokens": 4}, []),
        ({"min_count": 2}, ["cat", "the"]),
        ({"min_count": 3}, []),
        ({"max_tokens": 5, "min_count": 2}, ["cat"]),
    ],
)
def test_adapt_vocabulary_by_frequency_then_alphabet(kwargs, expected):
    tok = Tokenizer.adapt(TINY, **kwargs)
    assert tok.vocabulary == ["", "[UNK]", "[START]", "[END]"] + expected
    assert tok.vocab_size == 4 + len(expected)


def test_reserved_ids():
    assert RESERVED == ("", "[UNK]", "[START]", "[END]")
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    tok = Tokenizer(["x", "[END]", "y"])  # reserved tokens in the list are not added twice
    assert tok.vocabulary == ["", "[UNK]", "[START]", "[END]", "x", "y"]


def test_adapt_char_level_vocabulary():
    # " " 2, "a" 2, "b" 2, "c" 1: ties alphabetical, and " " sorts before letters.
    tok = Tokenizer.adapt(["a b", "b a c"], level="char")
    assert tok.vocabulary[4:] == [" ", "a", "b", "c"]


def test_adapt_accepts_a_dataset():
    from_list = Tokenizer.adapt(TINY)
    from_dataset = Tokenizer.adapt(tf.data.Dataset.from_tensor_slices(TINY))
    assert from_dataset.vocabulary == from_list.vocabulary


def test_ids_unknown_tokens_and_right_padding():
    tok = Tokenizer.adapt(TINY)  # cat 4, the 5, a 6, dog 7
    assert ids(tok, ["the cat", "a", "the bird"]) == [
        [2, 5, 4, 3],
        [2, 6, 3, 0],
        [2, 5, 1, 3],  # "bird" is unknown
    ]
    assert tok(["a"]).dtype == tf.int32


def test_min_count_leaves_rare_tokens_unknown():
    tok = Tokenizer.adapt(TINY, min_count=2)
    assert ids(tok, ["a dog cat"]) == [[2, 1, 1, 4, 3]]


# --- detokenization ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_word_level_round_trip(word, text):
    assert detokenized(word, [text]) == [text]


def test_word_level_detokenize_recomposes_nfc(word):
    assert detokenized(word, ["¿DÓNDE ESTÁ?"]) == ["¿dónde está?"]  # "ó" is U+00F3 again
    assert detokenized(word, ["ÉL"]) == ["\u00e9l"]


@pytest.mark.parametrize("text", ["i don't know, 3.5 cats!", "hola, mundo!", "😀 ok", "שלום, עולם!"])
def test_char_level_round_trip_joins_without_spaces(char, text):
    assert detokenized(char, [text]) == [text]


@pytest.mark.parametrize("text", ["¿dónde está?", "él es él."])
def test_char_level_detokenize_recomposes_nfc(char, text):
    assert [ascii(s) for s in detokenized(char, [text])] == [ascii(text)]  # shows U+0301 if left


def test_detokenize_drops_padding_and_markers_but_keeps_unknown():
    tok = Tokenizer.adapt(TINY)
    assert tok.detokenize([[2, 5, 4, 3, 0, 0], [2, 6, 1, 3, 0, 0]]).numpy().tolist() == [
        b"the cat",
        b"a [UNK]",
    ]


# --- awkward input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "level, expected",
    [("word", ["\ufffd", "\ufffd", "abc"]), ("char", ["\ufffd", "\ufffd", "a", "b", "c"])],
)
def test_invalid_utf8_is_replaced(level, expected):
    tok = Tokenizer([], level=level)
    assert tokens(tok, b"\xff\xfeabc") == expected
    assert tok([b"\xff\xfeabc"]).shape == (1, len(expected) + 2)


@pytest.mark.parametrize("max_length", [3, 10, 64])
@pytest.mark.parametrize(
    "level, unit",
    [("word", "ab "), ("word", "é "), ("word", "a,"), ("char", "a"), ("char", "é"), ("char", "ab ")],
)
def test_very_long_input_is_truncated_to_max_length(level, unit, max_length):
    text = (unit * 10_000)[:10_000]
    out = Tokenizer(["a"], level=level, max_length=max_length)([text]).numpy()
    assert out.shape == (1, max_length)  # markers included
    assert out[0, 0] == START_ID and out[0, -1] == END_ID
    assert PAD_ID not in out


def test_one_very_long_word_is_one_token():
    assert ids(Tokenizer(["a"], max_length=10), ["a" * 10_000]) == [[START_ID, UNK_ID, END_ID]]


def test_long_run_of_spaces_does_not_hide_the_words_after_it():
    tok = Tokenizer(["hola"], max_length=4)
    assert ids(tok, [" " * 100 + "hola"]) == [[2, 4, 3]]


@pytest.mark.parametrize("text", ["", " ", "   ", "\t\n", "\u00a0\u2003", "\x00\x07"])
def test_empty_and_whitespace_only_give_start_end(either, text):
    assert ids(either, [text]) == [[START_ID, END_ID]]
    assert detokenized(either, [text]) == [""]


def test_empty_batch(either):
    out = either(tf.constant([], tf.string))
    assert out.shape[0] == 0 and out.dtype == tf.int32
    assert either.detokenize(out).shape == (0,)


@pytest.mark.parametrize(
    "text, word_tokens, char_tokens",
    [
        ("😀 ok", ["😀", "ok"], ["😀", " ", "o", "k"]),
        # The zero-width joiner is dropped.
        ("👩\u200d💻 ok", ["👩", "💻", "ok"], ["👩", "💻", " ", "o", "k"]),
        ("שלום, עולם!", ["שלום", ",", "עולם", "!"], ["ש", "ל", "ו", "ם", ",", " ", "ע", "ו", "ל", "ם", "!"]),
        ("a\u202eb", ["ab"], ["a", "b"]),  # bidi override (a format character) is dropped
        ("a\x00b\x07c\x1bd", ["a", "b", "c", "d"], ["a", " ", "b", " ", "c", " ", "d"]),  # controls become spaces
        ("a\tb\nc\r\nd", ["a", "b", "c", "d"], ["a", " ", "b", " ", "c", " ", "d"]),  # "\r\n" is one space
    ],
)
def test_emoji_right_to_left_and_control_characters(either, text, word_tokens, char_tokens):
    expected = word_tokens if either.level == "word" else char_tokens
    assert tokens(either, text) == expected
    # Ids: each token's place in the vocabulary adapted on ROUND_TRIP, [UNK] for a token not in it.
    vocabulary = either.vocabulary
    assert ids(either, [text]) == [[START_ID] + [vocabulary.index(t) if t in vocabulary else UNK_ID
                                                 for t in expected] + [END_ID]]
    if either.level == "char":  # none of ROUND_TRIP's sentences holds these characters
        assert {"b", "👩", "💻"}.isdisjoint(vocabulary) and {"a", "c", "d", "k", "😀", "ש", " "} <= set(vocabulary)


# --- tf.function, config, validation -----------------------------------------------------------

AWKWARD = [b"\xff\xfeabc", "".encode(), "¿DÓNDE está?".encode(), "😀 ok".encode(),
           ("x " * 5000).encode(), "hola, mundo!".encode()]


def test_tf_function_matches_eager_without_retracing(either):
    encode = tf.function(either.__call__, input_signature=SIGNATURE)
    round_trip = tf.function(lambda t: either.detokenize(either(t)), input_signature=SIGNATURE)
    batch = tf.constant(AWKWARD)
    assert encode(batch).numpy().tolist() == either(batch).numpy().tolist()
    assert round_trip(batch).numpy().tolist() == either.detokenize(either(batch)).numpy().tolist()
    for size in (0, 1, 3):  # other batch sizes and lengths reuse the one trace
        small = tf.constant(AWKWARD[:size], tf.string)
        assert encode(small).numpy().tolist() == either(small).numpy().tolist()
    assert encode.experimental_get_tracing_count() == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": "word"},
        {"level": "char", "lowercase": False, "normalization": "NFC", "max_length": 12},
        {"level": "word", "normalization": "NFKC", "max_length": 5},
    ],
)
def test_config_round_trip_gives_identical_ids(kwargs):
    tok = Tokenizer.adapt(ROUND_TRIP, **kwargs)
    config = tok.get_config()
    restored = Tokenizer.from_config(json.loads(json.dumps(config)))
    assert restored.get_config() == config
    assert restored.vocabulary == tok.vocabulary
    assert ids(restored, AWKWARD) == ids(tok, AWKWARD)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": "subword"},
        {"level": "Word"},
        {"normalization": "nfkd"},
        {"normalization": "NFKC_Casefold"},
        {"max_length": 2},
        {"max_length": 0},
        {"max_length": 10.0},
        {"max_length": "64"},
    ],
)
def test_invalid_arguments_raise_value_error_naming_the_value(kwargs):
    (name, value), = kwargs.items()
    with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}")):
        Tokenizer([], **kwargs)


@pytest.mark.parametrize("max_length, expected", [(2, []), (3, ["a"]), (4, ["a", "b"]), (99, list("abcde"))])
def test_tokenize_max_length_override(max_length, expected):
    tok = Tokenizer(list("abcde"), max_length=4)
    got = tok.tokenize(["a b c d e"], max_length=max_length).to_list()[0]
    assert got == [b"[START]"] + [t.encode() for t in expected] + [b"[END]"]
    assert len(tok.tokenize(["a b c d e"]).to_list()[0]) == 4  # the tokenizer's own is unchanged


def test_tokenize_rejects_max_length_below_two():
    with pytest.raises(ValueError, match="max_length=1"):
        Tokenizer(["a", "b", "c"]).tokenize(["a b c"], max_length=1)
