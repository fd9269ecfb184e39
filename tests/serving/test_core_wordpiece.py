"""WordPiece splitting in core ops (`tfattn.serving.core_wordpiece`) against the rule as the BERT
paper and tensorflow-text's documentation state it, by hand, and against tensorflow-text's own op."""

import random

import pytest
import tensorflow as tf

from tfattn.serving.core_wordpiece import wordpiece_split

text = pytest.importorskip("tensorflow_text")


def table_of(pieces):
    keys = tf.constant(pieces)
    ids = tf.range(len(pieces), dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), -1)


def split(words, pieces, **kwargs):
    split_words = wordpiece_split(tf.constant(words), table_of(pieces), **kwargs).to_list()
    return [[p.decode("utf-8") for p in w] for w in split_words]


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
    words = tf.ragged.constant([["ab", "a"], [], ["b", "ab", "a"]])  # words again: each row is its own
    want = [[[b"a", b"##b"], [b"a"]], [], [[b"[UNK]"], [b"a", b"##b"], [b"a"]]]
    assert wordpiece_split(words, table).to_list() == want
    assert wordpiece_split(tf.constant([], tf.string), table).to_list() == []


def random_cases(seed, letters, trials, piece, suffix, word, words):
    """`trials` random vocabularies (about 12-15 pieces of `piece` (min, max) letters and as many
    suffixes of `suffix` letters) with `words` words of `word` letters each."""
    rng = random.Random(seed)
    text_of = lambda n: "".join(rng.choice(letters) for _ in range(n))  # noqa: E731
    for _ in range(trials):
        starts = {text_of(rng.randint(*piece)) for _ in range(15)}
        yield sorted(starts | {"##" + text_of(rng.randint(*suffix)) for _ in range(15)}), \
            [text_of(rng.randint(*word)) for _ in range(words)]


def tensorflow_text_pieces(words, pieces):
    return text.WordpieceTokenizer(table_of(pieces), token_out_type=tf.string).tokenize(tf.constant(words)).to_list()


def test_the_same_pieces_as_tensorflow_texts_op():
    for pieces, words in random_cases(0, "abcdeé日", 20, piece=(1, 3), suffix=(1, 3), word=(1, 9), words=60):
        words += ["é" * 50, "é" * 51]
        got = wordpiece_split(tf.constant(words), table_of(pieces)).to_list()
        assert got == tensorflow_text_pieces(words, pieces), pieces


def test_looking_up_only_substrings_as_long_as_the_longest_piece_gives_the_same_pieces():
    for pieces, words in random_cases(1, "abcé日", 10, piece=(1, 4), suffix=(1, 2), word=(1, 12), words=40):
        words += ["", "é" * 50]
        got = wordpiece_split(tf.constant(words), table_of(pieces), longest_piece=max(map(len, pieces))).to_list()
        assert got == tensorflow_text_pieces(words, pieces), pieces
    # A band narrower than the vocabulary's longest piece misses it: the band is what limits the lookups.
    assert split(["abcd"], ["abc", "a", "##bc", "##d"], longest_piece=2) == [["a", "##bc", "##d"]]
    assert split(["abcd"], ["abc", "a", "##bc", "##d"], longest_piece=3) == [["abc", "##d"]]


def test_in_a_graph_with_no_step_to_take():
    """In a `tf.function` (as in an export): no words, and words all whole in the vocabulary, take no
    step of the loop; the pieces still come out."""
    table = table_of(["ab", "a", "##b"])
    split_fn = tf.function(lambda w: wordpiece_split(w, table, longest_piece=2),
                           input_signature=[tf.TensorSpec([None], tf.string)])
    assert split_fn(tf.constant([], tf.string)).to_list() == []
    assert split_fn(tf.constant(["ab", "a", "ab"])).to_list() == [[b"ab"], [b"a"], [b"ab"]]
    assert split_fn(tf.constant(["abb", "c"])).to_list() == [[b"ab", b"##b"], [b"[UNK]"]]
