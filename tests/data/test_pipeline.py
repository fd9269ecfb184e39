"""Tests for tfattn.data.pipeline: string pairs -> padded, bucketed id batches, and padding_fraction."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tfattn.data import corpora
from tfattn.data.pipeline import DataConfig, make_dataset, padding_fraction
from tfattn.data.text import END_ID, PAD_ID, START_ID, Tokenizer

from conftest import SHARED_DATA as DATA  # noqa: E402
SPA = DATA / "spa-eng" / "spa.txt"

# Lower case, no punctuation: detokenized targets equal the input exactly.
PAIRS = [
    ("hola", "hi"),  # target ids: 3 tokens with [START] and [END]
    ("hola amigo", "hello friend"),  # 4
    ("buenos dias", "good morning"),  # 4
    ("vamos a la playa", "let us go to the beach"),  # 8
    ("la casa", "the house"),  # 4
    ("tengo un gato negro", "i have a black cat"),  # 7
    ("si", "yes"),  # 3
]


def tokenizers(pairs, **kwargs):
    source = Tokenizer.adapt([s for s, _ in pairs], level="word", **kwargs)
    target = Tokenizer.adapt([t for _, t in pairs], level="word", **kwargs)
    return source, target


def batches(dataset):
    return [(s.numpy(), t.numpy()) for s, t in dataset]


def texts(tokenizer, ids):
    return [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]


def assert_right_padded_with_markers(rows):
    for row in rows.tolist():
        length = row.index(PAD_ID) if PAD_ID in row else len(row)
        assert row[length:] == [PAD_ID] * (len(row) - length)  # padding on the right only
        assert PAD_ID not in row[:length]
        assert row[0] == START_ID and row[length - 1] == END_ID
        assert row.count(END_ID) == 1 and row.count(START_ID) == 1


# --- shapes, markers, padding ------------------------------------------------------------------


@pytest.mark.parametrize("config, shuffle", [
    (DataConfig(batch_size=3), True),  # bucketed
    (DataConfig(batch_size=3, bucket=False), True),
    (DataConfig(batch_size=3), False),
])
def test_element_shapes_dtypes_and_markers(config, shuffle):
    source_tok, target_tok = tokenizers(PAIRS)
    dataset = make_dataset(PAIRS, source_tok, target_tok, config, shuffle=shuffle)
    source_spec, target_spec = dataset.element_spec
    assert (source_spec.dtype, target_spec.dtype) == (tf.int32, tf.int32)
    assert source_spec.shape.as_list() == [None, None] and target_spec.shape.as_list() == [None, None]
    rows = 0
    for source, target in batches(dataset):
        assert source.ndim == target.ndim == 2 and source.shape[0] == target.shape[0] <= 3
        assert source.dtype == target.dtype == np.int32
        assert_right_padded_with_markers(source)
        assert_right_padded_with_markers(target)
        rows += source.shape[0]
    assert rows == len(PAIRS)


def test_shuffle_false_keeps_order_and_batch_sizes():
    source_tok, target_tok = tokenizers(PAIRS)
    dataset = make_dataset(PAIRS, source_tok, target_tok, DataConfig(batch_size=3), shuffle=False)
    got = batches(dataset)
    assert [t.shape[0] for _, t in got] == [3, 3, 1]
    assert [t.shape[1] for _, t in got] == [4, 8, 3]  # padded to the longest target of each batch
    assert sum((texts(source_tok, s) for s, _ in got), []) == [s for s, _ in PAIRS]
    assert sum((texts(target_tok, t) for _, t in got), []) == [t for _, t in PAIRS]


def test_first_batch_ids_by_hand():
    pairs = [("a b", "x"), ("b", "y x")]  # source vocab a 4, b 5 (b is more frequent)
    source_tok, target_tok = tokenizers(pairs)  # target vocab x 4, y 5
    assert source_tok.vocabulary[4:] == ["b", "a"] and target_tok.vocabulary[4:] == ["x", "y"]
    ((source, target),) = batches(make_dataset(pairs, source_tok, target_tok, shuffle=False))
    assert source.tolist() == [[2, 5, 4, 3], [2, 4, 3, 0]]
    assert target.tolist() == [[2, 4, 3, 0], [2, 5, 4, 3]]


def test_repeat_goes_on_past_one_epoch():
    source_tok, target_tok = tokenizers(PAIRS)
    dataset = make_dataset(PAIRS, source_tok, target_tok, DataConfig(batch_size=7), shuffle=False,
                           repeat=True)
    assert sum(t.shape[0] for _, t in dataset.take(3)) == 21


@pytest.mark.parametrize("shuffle", [True, False])
def test_pairs_longer_than_max_length_are_dropped_not_truncated(shuffle):
    # max_length=5: at most 3 words plus [START] and [END].
    pairs = [
        ("uno", "one"),
        ("uno dos tres", "one two three"),  # exactly 5 tokens on both sides: kept
        ("uno dos tres cuatro", "one two"),  # source too long: dropped
        ("uno dos", "one two three four"),  # target too long: dropped
        ("uno dos tres cuatro cinco", "one two three four five"),  # both too long: dropped
        ("dos", "two"),
    ]
    source_tok, target_tok = tokenizers(pairs, max_length=5)
    dataset = make_dataset(pairs, source_tok, target_tok, DataConfig(batch_size=2), shuffle=shuffle)
    got = batches(dataset)
    kept = [(s, t) for sb, tb in got for s, t in zip(texts(source_tok, sb), texts(target_tok, tb))]
    assert sorted(kept) == sorted([pairs[0], pairs[1], pairs[5]])
    assert len(pairs) - len(kept) == 3  # dropped
    assert max(max(s.shape[1], t.shape[1]) for s, t in got) == 5


# --- bucketing and padding_fraction ------------------------------------------------------------


def test_bucketing_lowers_padding_fraction():
    # Targets of 1 word (3 ids) and 5 words (7 ids). Without bucketing, batches of 2 as they come
    # (shuffle_buffer=0 keeps the order): each holds a short and a long target, t_out = 7, and
    # target[:, 1:] has 2 x 6 positions, 4 of them padding. Bucketed, the short ones go together.
    pairs = [("a", "x"), ("b", "x y y y y"), ("b", "y"), ("a", "y x x x x")]
    source_tok, target_tok = tokenizers(pairs)
    unbucketed = make_dataset(pairs, source_tok, target_tok, DataConfig(batch_size=2, bucket=False, shuffle_buffer=0))
    bucketed = make_dataset(pairs, source_tok, target_tok, DataConfig(batch_size=2, bucket=True))
    assert padding_fraction(unbucketed) == 8 / 24
    assert padding_fraction(bucketed) == 0.0
    assert sorted(t.shape for _, t in batches(bucketed)) == [(2, 3), (2, 7)]


def test_bucketing_groups_by_source_length_too():
    # Equal targets (3 ids); sources of 1 word (3 ids) and 5 words (7 ids). Unbucketed, in the
    # given order, each batch of 2 has 2 x 7 = 14 source positions, 4 of them padding; bucketed, none.
    pairs = [("a", "x"), ("b b b b b", "y"), ("b", "y"), ("a a a a a", "x")]
    source_tok, target_tok = tokenizers(pairs)
    unbucketed = make_dataset(pairs, source_tok, target_tok, DataConfig(batch_size=2, bucket=False, shuffle_buffer=0))
    bucketed = make_dataset(pairs, source_tok, target_tok, DataConfig(batch_size=2, bucket=True))
    assert padding_fraction(unbucketed, side="source") == 8 / 28
    assert padding_fraction(bucketed, side="source") == 0.0
    assert sorted(s.shape for s, _ in batches(bucketed)) == [(2, 3), (2, 7)]


def test_bucketing_sorts_pools_by_target_then_source_length():
    # 12 pairs in pools of 2 batches of 3 (shuffle_buffer=0: pools in the given order). Each pool is
    # sorted by target length, then source length, and cut into full batches; the batches are then
    # shuffled, so compare them as a set. Target word counts are i % 3 + 1, source word counts
    # (i * 5) % 4 + 1; a pair's text is its number, so rows can be told apart.
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]
    pairs = [(" ".join([words[i]] * ((i * 5) % 4 + 1)), " ".join([words[i]] * (i % 3 + 1))) for i in range(12)]
    source_tok, target_tok = tokenizers(pairs)
    config = DataConfig(batch_size=3, pool_batches=2, shuffle_buffer=0)
    got = batches(make_dataset(pairs, source_tok, target_tok, config))
    numbers = {w: i for i, w in enumerate(words)}
    got = sorted(tuple(numbers[text.split()[0]] for text in texts(target_tok, t)) for _, t in got)
    # Pool 0-5: (t, s) = 0 (1,1) 1 (2,2) 2 (3,3) 3 (1,4) 4 (2,1) 5 (3,2) -> 0 3 | 4 1 | 5 2, in threes:
    # [0, 3, 4], [1, 5, 2]. Pool 6-11: 6 (1,3) 7 (2,4) 8 (3,1) 9 (1,2) 10 (2,3) 11 (3,4)
    # -> 9 6 | 10 7 | 8 11: [9, 6, 10], [7, 8, 11].
    assert got == sorted([(0, 3, 4), (1, 5, 2), (9, 6, 10), (7, 8, 11)])


def test_bucketing_leaves_only_the_last_batch_short():
    pairs = [(" ".join(["a"] * (i % 5 + 1)), " ".join(["x"] * (i % 7 + 1))) for i in range(50)]
    source_tok, target_tok = tokenizers(pairs)
    for pool_batches in (1, 2, 3):
        config = DataConfig(batch_size=4, pool_batches=pool_batches)
        sizes = [s.shape[0] for s, _ in batches(make_dataset(pairs, source_tok, target_tok, config))]
        assert sum(sizes) == 50 and sorted(sizes) == [2] + [4] * 12  # 50 = 12 x 4 + 2


def test_bucketed_epochs_are_fixed_by_the_seed():
    pairs = [(" ".join(["a"] * (i % 5 + 1)), " ".join([("x", "y")[i % 2]] * (i % 7 + 1))) for i in range(60)]
    source_tok, target_tok = tokenizers(pairs)

    def epoch(seed):
        config = DataConfig(batch_size=4, pool_batches=3, shuffle_buffer=16, seed=seed)
        return [(s.tolist(), t.tolist()) for s, t in batches(make_dataset(pairs, source_tok, target_tok, config))]

    assert epoch(1) == epoch(1)
    assert epoch(1) != epoch(2)


def test_a_corpus_sorted_by_length_is_shuffled_whole_by_default():
    # 1,000 pairs sorted by length as spa-eng's file is: 100 of each target length 1..10 words (mean
    # 5.5). The default buffer holds every row, so the first 100 rows of an epoch are a uniform
    # sample (mean length about 5.5, never near the shortest); a buffer of 50 draws them from the
    # first 150 rows, whose targets have 1 or 2 words.
    pairs = [("a", " ".join(["x"] * (i // 100 + 1))) for i in range(1000)]
    source_tok, target_tok = tokenizers(pairs, max_length=20)

    def first_lengths(config):
        rows = [t for _, t in batches(make_dataset(pairs, source_tok, target_tok, config))]
        return [int(np.count_nonzero(row)) - 2 for batch in rows for row in batch][:100]  # words

    whole = first_lengths(DataConfig(batch_size=10, bucket=False))
    near = first_lengths(DataConfig(batch_size=10, bucket=False, shuffle_buffer=50))
    assert 4.5 < np.mean(whole) < 6.5 and max(whole) >= 9
    assert max(near) <= 2


@pytest.mark.parametrize("shuffle", [False, True])
def test_tf_data_gets_the_pipelines_functions_as_written(monkeypatch, shuffle):
    """Each function the pipeline hands to tf.data (map, filter, flat_map, reduce) is straight-line
    code, traced as written: autograph, which tf.data applies by default, calls `converted_call` for
    each function it converts (here also tf.data's own, which are not the package's to change)."""
    from tensorflow.python.autograph.impl import api

    converted, real = [], api.converted_call

    def spy(f, *args, **kwargs):
        if getattr(f, "__module__", "").startswith("tfattn"):
            converted.append(f.__qualname__)
        return real(f, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", spy)
    source, target = tokenizers(PAIRS)  # shuffle_buffer=None: a counting pass, reduce's function
    config = DataConfig(batch_size=2, pool_batches=2, pad_to_multiple=4, shuffle_buffer=None)
    assert len(batches(make_dataset(PAIRS, source, target, config, shuffle=shuffle))) == 4
    assert converted == []


def test_padding_fraction_side_must_be_source_or_target():
    with pytest.raises(ValueError, match="side must be"):
        padding_fraction([], side="both")


@pytest.mark.parametrize(
    "target_batches, expected",
    [
        ([[[2, 5, 3, 0], [2, 5, 6, 3]]], 1 / 6),  # 1 pad among the 6 positions of target[:, 1:]
        ([[[2, 5, 3], [2, 6, 3]]], 0.0),
        ([[[2, 3, 0, 0]], [[2, 5, 3]]], 2 / 5),  # two batches: 2 pads of 3, then 0 of 2
    ],
)
def test_padding_fraction_by_hand(target_batches, expected):
    def gen():
        for target in target_batches:
            yield tf.constant([[2, 3]] * len(target)), tf.constant(target, tf.int32)

    spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32))
    dataset = tf.data.Dataset.from_generator(gen, output_signature=spec)
    assert padding_fraction(dataset) == pytest.approx(expected)


def test_padding_fraction_max_batches_and_empty():
    source = tf.constant([[2, 3]])
    first = (source, tf.constant([[2, 3, 0, 0]]))  # 2 pads of 3
    second = (source, tf.constant([[2, 5, 3]]))  # 0 pads of 2
    dataset = tf.data.Dataset.from_tensors(first).concatenate(tf.data.Dataset.from_tensors(second))
    assert padding_fraction(dataset, max_batches=1) == pytest.approx(2 / 3)
    assert padding_fraction(dataset) == pytest.approx(2 / 5)
    assert padding_fraction(dataset.take(0)) == 0.0


# --- validation --------------------------------------------------------------------------------


def test_empty_pairs_raise():
    tok = Tokenizer([])
    with pytest.raises(ValueError, match="empty"):
        make_dataset([], tok, tok)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "64", None])
def test_data_config_rejects_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match=re.escape(f"batch_size={batch_size!r}")):
        DataConfig(batch_size=batch_size)


def test_data_config_defaults():
    config = DataConfig()
    assert (config.batch_size, config.bucket, config.pool_batches, config.shuffle_buffer,
            config.seed) == (64, True, 200, None, 0)


@pytest.mark.parametrize("kwargs", [{"pool_batches": 0}, {"pool_batches": -1}, {"pool_batches": True},
                                    {"shuffle_buffer": -1}])
def test_data_config_rejects_bad_pool_batches_and_shuffle_buffer(kwargs):
    (name, value), = kwargs.items()
    with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}")):
        DataConfig(**kwargs)


# --- real data ---------------------------------------------------------------------------------


@pytest.mark.data
@pytest.mark.skipif(not SPA.is_file(), reason=f"needs the Anki spa-eng corpus at {SPA}")
def test_spa_eng_bucketed_padding_fraction_under_15_percent():
    train = corpora.split_pairs(corpora.load_anki(SPA))["train"][::5]  # every 5th, to stay fast
    source_tok, target_tok = tokenizers(train, max_tokens=5000, max_length=32)
    dataset = make_dataset(train, source_tok, target_tok, DataConfig(batch_size=64))
    fraction = padding_fraction(dataset, max_batches=200)
    source_fraction = padding_fraction(dataset, max_batches=200, side="source")
    print(f"spa-eng bucketed padding fraction: target {fraction:.4f}, source {source_fraction:.4f}")
    assert fraction < 0.15 and source_fraction < 0.15
