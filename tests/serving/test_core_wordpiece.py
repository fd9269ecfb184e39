"""WordPiece splitting in core ops (`tfattn.serving.core_wordpiece`) against the rule as the BERT
paper and tensorflow-text's documentation state it, by hand, and against tensorflow-text's own op."""

import random

import pytest
import tensorflow as tf

from tfattn.serving.core_wordpiece import wordpiece_split

text = pytest.importorskip("tensorflow_text")


def table_of(pieces):
    keys = tf.constant(pieces)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.range(len(pieces), dtype=tf.int64)), -1)


def split(words, pieces, **kwargs):
    return [[p.decode("utf-8") for p in w] for w in wordpiece_split(tf.constant(words), table_of(pieces), **kwargs).to_list()]


def test_longest_match_first_by_hand():
    pieces = ["a", "abc", "abcdefghi", "##de", "##defgxy", "##deh", "##f", "##ghz"]
    # abcdefghz: "abc" (abcdefghi does not match), then of "defghz" "##de" (neither "##defgxy" nor
    # "##deh" matches), then "##f", then "##ghz".
    assert split(["abcdefghz"], pieces) == [["abc", "##de", "##f", "##ghz"]]
    # abcdefghq: the same until "ghq", which no piece starts: the whole word is unknown.
    assert split(["abcdefghq"], pieces) == [["[UNK]"]]
    assert split(["a", "abcdeh", "b"], pieces) == [["a"], ["abc", "##deh"], ["[UNK]"]]


def test_pieces_end_on_characters_and_long_words_are_unknown():
    pieces = ["é", "##é", "ca", "##fé", "日", "##本"]
    assert split(["café", "éé", "日本", "本"], pieces) == [["ca", "##fé"], ["é", "##é"], ["日", "##本"], ["[UNK]"]]
    # 100 bytes is the limit: 50 two-byte letters pass, 51 do not.
    assert split(["é" * 50, "é" * 51], pieces) == [["é"] + ["##é"] * 49, ["[UNK]"]]
    assert split(["é" * 51], pieces, max_bytes=102) == [["é"] + ["##é"] * 50]


def test_ragged_words_and_no_words():
    table = table_of(["a", "##b"])
    words = tf.ragged.constant([["ab", "a"], [], ["b"]])
    assert wordpiece_split(words, table).to_list() == [[[b"a", b"##b"], [b"a"]], [], [[b"[UNK]"]]]
    assert wordpiece_split(tf.constant([], tf.string), table).to_list() == []


def test_the_same_pieces_as_tensorflow_texts_op():
    rng = random.Random(0)
    letters = "abcdeé日"
    word = lambda n: "".join(rng.choice(letters) for _ in range(n))  # noqa: E731
    for trial in range(20):
        pieces = sorted({word(rng.randint(1, 3)) for _ in range(12)} | {"##" + word(rng.randint(1, 3)) for _ in range(12)})
        words = [word(rng.randint(1, 9)) for _ in range(60)] + ["é" * 50, "é" * 51]
        expected = text.WordpieceTokenizer(table_of(pieces), token_out_type=tf.string).tokenize(tf.constant(words))
        assert wordpiece_split(tf.constant(words), table_of(pieces)).to_list() == expected.to_list(), (trial, pieces)
