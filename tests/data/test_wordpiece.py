"""Tests for the wordpiece level of tfattn.data.text.Tokenizer: learned pieces, splitting, round trips, export.

Expected tokens are written in NFKD, the default normalization: "é" is "e\u0301" in tokens.
"""

import json
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from conftest import SHARED_DATA, detokenized, ids, tokens
from tfattn.data.text import END_ID, PAD_ID, RESERVED, START_ID, UNK_ID, Tokenizer, learn_wordpieces

SPA = SHARED_DATA / "spa-eng" / "spa.txt"
SIGNATURE = [tf.TensorSpec([None], tf.string)]
ACUTE = "\u0301"  # COMBINING ACUTE ACCENT: "é" is "e" + ACUTE after NFKD

# A vocabulary to check by hand: ids 4 un, 5 able, 6 ##able, 7 ##s, 8 cat, 9 !, 10 ",", 11 ¿, 12 ?
HAND = ["un", "able", "##able", "##s", "cat", "!", ",", "¿", "?"]

# 8 verbs x 2 endings x 2 places for 3 people, then 8 x "-ing" for 2 names: 112 sentences.
VERBS = ["walk", "talk", "jump", "play", "cook", "paint", "clean", "climb"]
CORPUS = [f"{who} {verb}{end} {where}." for who in ("i", "we", "they") for verb in VERBS
          for end in ("", "ed") for where in ("today", "at home")]
CORPUS += [f"¿are you {verb}ing, {name}?" for verb in VERBS for name in ("tom", "maría")]

SPANISH = [
    "¿Dónde están los gatos?",
    "Los gatos están en la casa.",
    "¡Todavía está en casa!",
    "El niño come manzanas, naranjas y plátanos.",
    "Ella canta; él baila.",
    "No sé dónde están mis llaves.",
    "¿Qué hora es? Son las 3.",
    "Mañana vamos a caminar, a cantar y a bailar.",
]


@pytest.fixture(scope="module")
def hand():
    return Tokenizer(HAND, level="wordpiece")


@pytest.fixture(scope="module")
def learned():
    """Pieces learned from CORPUS, 60 at most: too few for every word, so some words split."""
    return Tokenizer.adapt(CORPUS, level="wordpiece", max_tokens=60)


@pytest.fixture(scope="module")
def spanish():
    """Pieces learned from SPANISH with a budget of 70: characters, suffixes and a few words."""
    return Tokenizer.adapt(SPANISH, level="wordpiece", max_tokens=70)


# --- learning the vocabulary -------------------------------------------------------------------


def test_learned_vocabulary_has_reserved_ids_first_whole_words_and_suffix_pieces(learned):
    vocab = learned.vocabulary
    assert vocab[:4] == list(RESERVED)
    assert learned.vocab_size <= 60
    assert {"today", "we", "they", "at"} <= set(vocab)  # frequent words stay whole
    assert "##ed" in vocab  # the ending shared by the 8 verbs
    assert "walked" not in vocab and tokens(learned, "walked") == ["w", "##a", "##l", "##k", "##ed"]
    assert set("".join(CORPUS).replace(" ", "").replace("í", "i" + ACUTE)) <= set(vocab)  # every character


def test_learned_vocabulary_without_limit_keeps_every_word():
    tok = Tokenizer.adapt(CORPUS, level="wordpiece")
    assert {"walking", "cooked", "mari" + ACUTE + "a", "¿"} <= set(tok.vocabulary)
    assert "##?" not in tok.vocabulary  # punctuation never continues a word
    assert tokens(tok, "We walked.") == ["we", "walked", "."]


@pytest.mark.parametrize("max_tokens", [4, 20, 30, 45, 60, 100])
def test_max_tokens_is_respected(max_tokens):
    tok = Tokenizer.adapt(CORPUS, level="wordpiece", max_tokens=max_tokens)
    assert tok.vocab_size <= max_tokens
    assert tok.vocabulary[:4] == list(RESERVED)


def test_characters_are_kept_before_longer_pieces():
    # 9 characters: alone and as "##" suffixes they fill 18 of the 22 free ids; then the pieces.
    counts = {"walk": 9, "talk": 9, "walking": 4, "talking": 4, "walks": 2}
    alphabet = list("agiklnstw")
    pieces = learn_wordpieces(counts, max_tokens=26)
    assert pieces == alphabet + ["##" + c for c in alphabet] + ["talk", "walk", "##ing"]
    assert learn_wordpieces(counts, max_tokens=10) == alphabet[:6]  # too small even for the characters


@pytest.mark.parametrize("kwargs", [{}, {"max_tokens": 50}, {"min_count": 3}])
def test_learning_is_deterministic(kwargs):
    first = Tokenizer.adapt(CORPUS, level="wordpiece", **kwargs).vocabulary
    assert Tokenizer.adapt(list(reversed(CORPUS)), level="wordpiece", **kwargs).vocabulary == first


def test_adapt_accepts_a_dataset(learned):
    dataset = tf.data.Dataset.from_tensor_slices(CORPUS)
    from_dataset = Tokenizer.adapt(dataset, level="wordpiece", max_tokens=60)
    assert from_dataset.vocabulary == learned.vocabulary


def test_adapt_on_no_text_gives_the_reserved_tokens_only():
    empty = Tokenizer.adapt([], level="wordpiece")
    assert empty.vocabulary == list(RESERVED)
    assert ids(empty, ["a b!"]) == [[START_ID, UNK_ID, UNK_ID, UNK_ID, END_ID]]
    assert Tokenizer.adapt(["", " ! "], level="wordpiece").vocabulary == list(RESERVED) + ["!"]


# --- splitting with a vocabulary checked by hand -----------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("able", ["able"]),
        ("unable", ["un", "##able"]),  # "unable" is not in the vocabulary: longest prefix first
        ("Unables", ["un", "##able", "##s"]),  # an unseen word from known pieces
        ("ables cats", ["able", "##s", "cat", "##s"]),
        ("¿cats, unable?", ["¿", "cat", "##s", ",", "un", "##able", "?"]),
        ("dog", ["[UNK]"]),  # "d" is unknown: the whole word is one [UNK]
        ("unabled", ["[UNK]"]),  # a known start does not help if the rest cannot be split
        ("catés", ["[UNK]"]),  # an unknown accent ("e" + U+0301)
        ("cat😀!", ["cat", "[UNK]", "!"]),  # an emoji is a word of its own, unknown
        ("scat", ["[UNK]"]),  # "##s" continues a word; it does not start one
    ],
)
def test_split_into_known_pieces(hand, text, expected):
    assert tokens(hand, text) == expected


def test_ids_by_hand(hand):
    assert ids(hand, ["Unables!", "cat dog"]) == [
        [START_ID, 4, 6, 7, 9, END_ID],
        [START_ID, 8, UNK_ID, END_ID, PAD_ID, PAD_ID],
    ]
    assert hand(["cat"]).dtype == tf.int32


def test_tokenize_adds_markers_and_looks_up_like_the_pipeline(hand):
    ragged = hand.tokenize(["cats!"])
    assert ragged.to_list() == [[b"[START]", b"cat", b"##s", b"!", b"[END]"]]
    assert hand.lookup(ragged).to_list() == [[START_ID, 8, 7, 9, END_ID]]


def test_works_in_a_tf_data_map(learned):
    def encode(texts):
        return learned.lookup(learned.tokenize(texts, max_length=learned.max_length + 1))

    batches = tf.data.Dataset.from_tensor_slices(CORPUS).batch(16).map(encode)
    got = [row for batch in batches for row in batch.to_list()]
    assert got == learned.lookup(learned.tokenize(CORPUS, max_length=learned.max_length + 1)).to_list()


# --- detokenization ----------------------------------------------------------------------------


def test_detokenize_joins_pieces_back_into_words(hand):
    assert hand.detokenize([[2, 4, 6, 7, 10, 8, 7, 9, 3]]).numpy().tolist() == [b"unables, cats!"]
    assert hand.detokenize([[2, 7, 8, 1, 3, 0]]).numpy().tolist() == [b"s cat [UNK]"]  # stray "##s" first


def test_round_trip_with_a_combining_accent_as_its_own_piece():
    pieces = ["¿", "?", "d", "##o" + ACUTE + "nde", "esta", "##" + ACUTE, "##n", "los", "ga", "##tos"]
    tok = Tokenizer(pieces, level="wordpiece")
    text = "¿Dónde están los gatos?"
    assert tokens(tok, text) == ["¿", "d", "##o" + ACUTE + "nde", "esta", "##" + ACUTE, "##n", "los", "ga",
                                 "##tos", "?"]
    assert detokenized(tok, [text]) == ["¿dónde están los gatos?"]  # "ó" and "á" recomposed (NFC)


@pytest.mark.parametrize("text", SPANISH)
def test_learned_round_trip_gives_the_normalized_sentence(spanish, text):
    word = Tokenizer.adapt([text], level="word")  # every word known: gives the normalized sentence
    assert UNK_ID not in ids(spanish, [text])[0]
    assert detokenized(spanish, [text]) == detokenized(word, [text])


def test_learned_round_trip_splits_words_and_recomposes_accents(spanish):
    assert any(t.startswith("##") and len(t) > 3 for t in spanish.vocabulary)
    pieces = [t for text in SPANISH for t in tokens(spanish, text)]
    assert sum(t.startswith("##") for t in pieces) > 20  # many words are really split
    assert detokenized(spanish, ["¿Dónde están los gatos?"]) == ["¿dónde están los gatos?"]
    assert detokenized(spanish, ["¿Qué hora es? Son las 3."]) == ["¿qué hora es? son las 3."]


@pytest.mark.parametrize("text", CORPUS[::7])
def test_learned_round_trip_on_the_corpus(learned, text):
    assert detokenized(learned, [text]) == [text]


# --- awkward input -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\t\n", "\u00a0\u2003", "\x00\x07"])
def test_empty_and_whitespace_only_give_start_end(hand, text):
    assert ids(hand, [text]) == [[START_ID, END_ID]]
    assert detokenized(hand, [text]) == [""]


def test_empty_batch(hand):
    out = hand(tf.constant([], tf.string))
    assert out.shape[0] == 0 and out.dtype == tf.int32
    assert hand.detokenize(out).shape == (0,)
    assert hand.split(tf.constant([], tf.string)).to_list() == []


@pytest.mark.parametrize("max_length", [3, 10, 64])
@pytest.mark.parametrize("unit", ["unables ", "cats, ", "é ", "¿cat? "])
def test_very_long_input_is_truncated_to_max_length(unit, max_length):
    text = (unit * 10_000)[:10_000]
    out = Tokenizer(HAND, level="wordpiece", max_length=max_length)([text]).numpy()
    assert out.shape == (1, max_length)  # markers included
    assert out[0, 0] == START_ID and out[0, -1] == END_ID
    assert PAD_ID not in out


def test_a_word_over_100_bytes_is_one_unknown(hand):
    assert ids(hand, ["cat" + "s" * 5]) == [[START_ID, 8] + [7] * 5 + [END_ID]]
    assert UNK_ID not in ids(hand, ["cat" + "s" * 97])[0]  # 100 bytes: split (and truncated)
    assert ids(hand, ["cat" + "s" * 98]) == [[START_ID, UNK_ID, END_ID]]  # 101 bytes
    assert ids(hand, ["cat" + "s" * 9_997]) == [[START_ID, UNK_ID, END_ID]]


# --- tf.function, SavedModel, config, vocabulary file ------------------------------------------

AWKWARD = [b"\xff\xfeabc", b"", "¿Unables, CATS?".encode(), "😀 cat".encode(), ("cats " * 5000).encode(),
           "¡Dónde!".encode()]


def test_tf_function_matches_eager_without_retracing(hand):
    encode = tf.function(hand.__call__, input_signature=SIGNATURE)
    round_trip = tf.function(lambda t: hand.detokenize(hand(t)), input_signature=SIGNATURE)
    batch = tf.constant(AWKWARD)
    assert encode(batch).numpy().tolist() == hand(batch).numpy().tolist()
    assert round_trip(batch).numpy().tolist() == hand.detokenize(hand(batch)).numpy().tolist()
    for size in (0, 1, 3):  # other batch sizes and lengths reuse the one trace
        small = tf.constant(AWKWARD[:size], tf.string)
        assert encode(small).numpy().tolist() == hand(small).numpy().tolist()
    assert encode.experimental_get_tracing_count() == 1


class Wrapper(tf.Module):
    """What an export does with a tokenizer: encode and decode with fixed signatures."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=SIGNATURE)
    def encode(self, texts):
        return self.tokenizer(texts)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(self, ids):
        return self.tokenizer.detokenize(ids)


def test_saved_model_carries_the_vocabulary(spanish, tmp_path):
    tf.saved_model.save(Wrapper(spanish), str(tmp_path / "tok"))
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    batch = tf.constant(SPANISH + ["xyz qwerty", ""])
    assert loaded.encode(batch).numpy().tolist() == spanish(batch).numpy().tolist()
    expected = spanish.detokenize(spanish(batch)).numpy().tolist()
    assert loaded.decode(loaded.encode(batch)).numpy().tolist() == expected
    assert loaded.decode(loaded.encode(["¿Dónde están los gatos?"])).numpy().tolist() == [
        "¿dónde están los gatos?".encode()
    ]


def test_config_round_trip_gives_identical_ids(learned):
    config = learned.get_config()
    assert config["level"] == "wordpiece"
    restored = Tokenizer.from_config(json.loads(json.dumps(config)))
    assert restored.get_config() == config
    assert restored.vocabulary == learned.vocabulary
    assert ids(restored, AWKWARD + CORPUS[:5]) == ids(learned, AWKWARD + CORPUS[:5])


def test_write_vocabulary_one_token_per_line_in_id_order(spanish, tmp_path):
    path = spanish.write_vocabulary(tmp_path / "vocab.txt")
    raw = path.read_bytes()
    lines = raw.decode("utf-8").split("\n")
    assert lines == ["[PAD]"] + spanish.vocabulary[1:] + [""]  # line i holds id i, then a final newline
    # UTF-8 text: the accent pieces ACUTE and ##ACUTE are U+0301's two bytes CC 81, not an escape.
    assert b"\n\xcc\x81\n" in raw and b"\n##\xcc\x81\n" in raw
    table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(str(path), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                      tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
        default_value=-1,
    )
    pieces = tf.constant(spanish.vocabulary[1:] + ["never seen"])
    assert table.lookup(pieces).numpy().tolist()[:-1] == spanish.lookup(pieces).numpy().tolist()[:-1]


def test_vocabulary_file_works_with_tensorflow_text_wordpiece(spanish, tmp_path):
    path = spanish.write_vocabulary(tmp_path / "vocab.txt")
    from_file = tf_text.WordpieceTokenizer(str(path), token_out_type=tf.string)
    texts = SPANISH + ["xyz qwerty"]
    words = tf.strings.split(spanish.normalize(texts))
    assert from_file.tokenize(words).merge_dims(1, 2).to_list() == spanish.split(texts).to_list()


@pytest.mark.parametrize("token", ["a\nb", "a\rb"])
def test_write_vocabulary_refuses_line_breaks(token, tmp_path):
    with pytest.raises(ValueError, match="line breaks"):
        Tokenizer([token], level="wordpiece").write_vocabulary(tmp_path / "vocab.txt")


# --- the real corpus in ../shared/data ---------------------------------------------------------


@pytest.mark.data
@pytest.mark.skipif(not SPA.is_file(), reason=f"needs the Anki spa-eng corpus at {SPA}")
def test_spa_eng_english_vocabulary_of_8000_pieces_round_trips():
    with open(SPA, encoding="utf-8") as f:
        english = [line.split("\t")[0] for line in f]
    start = time.perf_counter()
    tok = Tokenizer.adapt(english[:20_000], level="wordpiece", max_tokens=8000)
    print(f"learned {tok.vocab_size} pieces from 20,000 sentences in {time.perf_counter() - start:.1f} s")
    assert tok.vocab_size <= 8000 and tok.vocabulary[:4] == list(RESERVED)
    # 200 of the sentences learned from, and 198 longer ones never seen (the file is ordered by length).
    for sample in (english[:20_000:100], english[20_000::500]):
        word = Tokenizer.adapt(sample, level="word")  # every word known: gives the normalized sentences
        assert not np.any(tok(sample).numpy() == UNK_ID)
        assert detokenized(tok, sample) == detokenized(word, sample)
    unseen = [t for row in tok.split(english[20_000::500]).to_list() for t in row]
    assert sum(t.startswith(b"##") for t in unseen) > 20  # unseen words are split into known pieces
