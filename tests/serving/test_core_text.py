"""`CoreTokenizer`: case folding and normalization in core ops, by hand-checked examples and against
tensorflow-text's ICU ops (`Tokenizer`) over strings mixing scripts, marks and compatibility forms."""

import random
import unicodedata

import pytest
import tensorflow as tf

import tfattn
from conftest import ids, tokens
from tfattn.serving.core_text import CoreTokenizer


@pytest.mark.parametrize("text,expected", [
    ("ÉTÉ", ["e\u0301te\u0301"]),  # case folded, accents decomposed (NFKD)
    ("ﬁne Straße", ["fine", "strasse"]),  # a ligature, and ß folded to ss
    ("Ｍａｒｃｈ５", ["march5"]),  # full-width forms
    ("e\u0301\u0323", ["e\u0323\u0301"]),  # marks in canonical order: dot below (220) before acute (230)
    ("\u1ec7", ["e\u0323\u0302"]),  # ệ
    ("ca\u034fsa", ["casa"]),  # a default-ignorable mark goes
    ("½", ["1", "\u2044", "2"]),  # 1⁄2: the fraction slash is punctuation, a token of its own
    ("ΣΑΣ", ["σασ"]),  # case folding, not lowercasing: no final sigma
])
def test_hand_checked_word_tokens(text, expected):
    tok = CoreTokenizer([], level="word")
    assert tokens(tok, text) == expected


@pytest.mark.parametrize("chars,expected", [
    (["e", "\u0301"], "é"),
    (["e", "\u0323", "\u0302"], "\u1ec7"),
    (["e", "\u0302", "\u0323"], "\u1ec7"),  # composed whatever the order of the marks
    (["\u1100", "\u1161"], "가"),  # Hangul jamo
    (["\u0301", "e"], "\u0301e"),  # a mark with nothing before it stays
])
def test_hand_checked_composition_of_characters(chars, expected):
    tok = CoreTokenizer(chars, level="char")
    assert tok.detokenize(tok.lookup(tf.constant([chars]))).numpy()[0].decode() == expected


POOL = list("abcdeéñüçABCÉÑÜ ¿?!.,'05") + [
    "\u0301", "\u0323", "\u0302", "\u0308", "ﬁ", "Ⅻ", "①", "ｆｕｌｌ", "ß", "ẞ", "İ", "ı", "Σ", "ς", "ǅ", "\u00ad",
    "\u034f", "가", "\u1100\u1161", "ệ", "Ệ", "ǖ", "ᾯ", "\u0345", "½", "㈠", "™", "क़", "\u212b", "Å", "\u0344", "ắ"]


def mixed_texts(n, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(0, 10))) for _ in range(n)]


def marks_in_a_row(text):
    longest = run = 0
    for c in unicodedata.normalize("NFKD", text):
        run = run + 1 if unicodedata.combining(c) else 0
        longest = max(longest, run)
    return longest


@pytest.mark.parametrize("level", ["word", "char"])
@pytest.mark.parametrize("normalization,lowercase", [("NFKD", True), ("NFKD", False), ("NFD", True)])
def test_same_as_tensorflow_text(level, normalization, lowercase):
    texts = mixed_texts(1500)
    text_tok = tfattn.Tokenizer.adapt(texts[:200], level=level, normalization=normalization, lowercase=lowercase,
                                      max_length=30)
    core_tok = CoreTokenizer.like(text_tok)
    assert CoreTokenizer.exact_for(text_tok)
    assert core_tok.tokenize(texts).to_list() == text_tok.tokenize(texts).to_list()
    assert ids(core_tok, texts) == ids(text_tok, texts)
    # Text from ids: exact for clusters of up to two marks of the vocabulary (three where it holds at
    # most 12 marks; this one holds 14): see the module docstring.
    shown = [t for t in texts if marks_in_a_row(t) <= 2]
    assert len(shown) > 1000
    want = text_tok.detokenize(text_tok(shown)).numpy().tolist()
    assert core_tok.detokenize(text_tok(shown)).numpy().tolist() == want


def test_composing_forms_are_left_to_tensorflow_text():
    assert not CoreTokenizer.exact_for(tfattn.Tokenizer([], normalization="NFC"))
    assert not CoreTokenizer.exact_for(tfattn.Tokenizer([], normalization="NFKC"))


def test_a_table_it_was_made_without_is_named():
    tok = CoreTokenizer(["a"], uses=("detokenize",))
    with pytest.raises(ValueError, match="without its tokenize table"):
        tok(["a"])
    with pytest.raises(ValueError, match="uses must hold"):
        CoreTokenizer(["a"], uses=("split",))
