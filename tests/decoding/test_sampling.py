"""Sampling: reproducible from a seed, greedy at top-k 1 or a temperature near 0, checked arguments."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.search import DecodeConfig, greedy, sample
from tfattn.data.text import END_ID, PAD_ID, START_ID

VOCAB = 8
CONFIG = DecodeConfig(max_length=12, ratio=0.0, extra=12)  # 12 tokens for every sentence


class FlatModel:
    """Every step draws from the same distribution, `probs`, whatever the previous token; the
    attention is uniform over the real source positions. Anything with `encode` and `decoder.step`
    can be decoded."""

    def __init__(self, probs):
        self.decoder, self.vocab_size = self, len(probs)
        self.logits = tf.math.log(tf.constant(probs, tf.float32))  # (vocab,)

    def encode(self, source):
        return {"mask": tf.not_equal(source, 0)}, {"h": tf.zeros([tf.shape(source)[0], 1])}

    def step(self, token, state, memory):
        mask = tf.cast(memory["mask"], tf.float32)  # (rows, t_in)
        logits = tf.tile(self.logits[None, :], [tf.shape(token)[0], 1])  # (rows, vocab)
        return logits, mask / tf.reduce_sum(mask, axis=1, keepdims=True), state


# Four words equally likely, [END] rarely: sentences of a few random words.
FLAT = FlatModel([1e-6, 1e-6, 1e-6, 0.04, 0.24, 0.24, 0.24, 0.24])
SOURCE = tf.constant([[START_ID, 9, END_ID, 0]] * 6)


def test_same_seed_same_output_and_a_well_formed_result():
    first = sample(FLAT, SOURCE, seed=7, config=CONFIG)
    again = tf.function(lambda s: sample(FLAT, s, seed=tf.constant(7), config=CONFIG))(SOURCE)
    for key in ("ids", "attention", "length"):
        np.testing.assert_array_equal(first[key], again[key])
    ids, attention, length = first["ids"].numpy(), first["attention"].numpy(), first["length"].numpy()
    for row, att, n in zip(ids, attention, length):
        assert row[n - 1] == END_ID and (row[:n] != PAD_ID).all() and (row[n:] == PAD_ID).all()
        np.testing.assert_allclose(att[:n], [[1 / 3, 1 / 3, 1 / 3, 0]] * n, atol=1e-6)
        assert (att[n:] == 0).all()


def test_different_seeds_differ():
    outputs = {seed: sample(FLAT, SOURCE, seed=seed, config=CONFIG)["ids"].numpy().tolist() for seed in (0, 1, 2)}
    assert outputs[0] != outputs[1] and outputs[1] != outputs[2] and outputs[0] != outputs[2]


def test_padding_is_never_drawn():
    likes_padding = FlatModel([0.9, 0.01, 0.01, 0.05, 0.01, 0.01, 0.005, 0.005])
    out = sample(likes_padding, SOURCE, seed=3, config=CONFIG)
    ids, length = out["ids"].numpy(), out["length"].numpy()
    assert all((row[:n] != PAD_ID).all() for row, n in zip(ids, length))


def test_top_k_keeps_the_most_likely_tokens():
    model = FlatModel([1e-6, 1e-6, 1e-6, 0.01, 0.5, 0.3, 0.15, 0.04])
    out = sample(model, SOURCE, top_k=2, seed=5, config=DecodeConfig(max_length=20, ratio=0.0, extra=20))
    ids = out["ids"].numpy()[:, :19]  # the 20th token is the forced [END]
    assert set(ids.ravel().tolist()) == {4, 5}  # both drawn, nothing else: [END] was third


def test_high_temperature_flattens():
    model = FlatModel([1e-6, 1e-6, 1e-6, 1e-6, 0.97, 0.01, 0.01, 0.01])
    config = DecodeConfig(max_length=30, ratio=0.0, extra=30)
    cold = sample(model, SOURCE, temperature=0.1, seed=1, config=config)["ids"].numpy()[:, :29]
    hot = sample(model, SOURCE, temperature=100.0, seed=1, config=config)["ids"].numpy()
    assert (cold == 4).all()
    assert (hot[hot != PAD_ID] != 4).mean() > 0.5  # near uniform over the 7 drawable tokens


def source_ids(translator, texts):
    return translator.source_tokenizer(tf.constant(texts))


@pytest.mark.parametrize("kwargs", [{"top_k": 1}, {"top_k": 1, "temperature": 3.0}, {"temperature": 1e-4},
                                    {"temperature": tf.constant(1e-4), "seed": tf.constant(9)}])
def test_greedy_in_the_limit(kwargs, dates_translator, dates_data):
    ids = source_ids(dates_translator, [s for s, _ in dates_data[1][:20]])
    config = DecodeConfig(max_length=14)
    expected = greedy(dates_translator.model, ids, config)
    got = sample(dates_translator.model, ids, config=config, **kwargs)
    np.testing.assert_array_equal(got["ids"], expected["ids"])
    np.testing.assert_array_equal(got["length"], expected["length"])


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), tf.constant(0.0)])
def test_invalid_temperature_raises(temperature):
    with pytest.raises(ValueError, match="temperature"):
        sample(FLAT, SOURCE, temperature=temperature)


def test_negative_top_k_raises():
    with pytest.raises(ValueError, match="top_k"):
        sample(FLAT, SOURCE, top_k=-1)


def test_temperature_fed_at_run_time_is_checked():
    fn = tf.function(lambda t: sample(FLAT, SOURCE, temperature=t, config=CONFIG),
                     input_signature=[tf.TensorSpec([], tf.float32)])
    assert fn(tf.constant(0.5))["ids"].shape[0] == 6
    with pytest.raises(tf.errors.InvalidArgumentError, match="temperature"):
        fn(tf.constant(-1.0))


def test_empty_batch():
    out = sample(FLAT, tf.zeros([0, 3], tf.int32))
    assert out["ids"].shape == (0, 0) and out["attention"].shape == (0, 0, 3) and out["length"].shape == (0,)
