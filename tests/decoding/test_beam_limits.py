"""Beam search at its limits: the beam width clamped to `min(vocab, 64)` with a vocabulary above 64,
and the coverage penalty's floor, `log(1e-10)` for a source position that gets no attention.

Expected scores come from GNMT's formula written in NumPy (Wu et al. 2016, arXiv 1609.08144, eq. 14):

    score(Y) = log P(Y | X) / ((5 + |Y|) / 6) ** alpha + beta * sum_i log(clip(sum_j a_ij, 1e-10, 1))

over the real (non-padding) source positions `i`.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.data.text import END_ID, START_ID
from tfattn.search import DecodeConfig
from tfattn.decoding.strategies import _coverage_penalty


def distinct(out, sentence=0):
    """The set of a sentence's returned hypotheses, each a tuple of tokens up to its length."""
    ids, length = out["ids"].numpy()[sentence], out["length"].numpy()[sentence]
    return {tuple(row[:n]) for row, n in zip(ids, length)}


class MarkovModel:
    """Logits depend on the previous token only (a random `(vocab, vocab)` table); uniform attention."""

    def __init__(self, vocab, seed=0):
        self.table = tf.constant(np.random.default_rng(seed).normal(0.0, 2.0, (vocab, vocab)), tf.float32)
        self.decoder, self.vocab_size = self, vocab

    def encode(self, source):
        return {"mask": tf.not_equal(source, 0)}, {"unused": tf.zeros([tf.shape(source)[0]])}

    def step(self, token, state, memory):
        mask = tf.cast(memory["mask"], tf.float32)
        return tf.gather(self.table, token), mask / tf.reduce_sum(mask, 1, keepdims=True), state


SOURCE = [[START_ID, 5, 6, END_ID], [START_ID, 7, END_ID, 0]]
LIMIT = DecodeConfig(max_length=4)  # 4 output tokens, [END] included: far more than 64 hypotheses


# -- the beam width clamp ----------------------------------------------------------------------------

@pytest.mark.parametrize("accel", [True, False])
@pytest.mark.parametrize("vocab, expected", [(100, 64), (40, 40)])
def test_beam_width_1000_is_clamped_to_min_vocab_64(vocab, expected, accel):
    model = MarkovModel(vocab)
    out = tfattn.beam_search(model, SOURCE, beam_width=1000, length_penalty=0.6, config=LIMIT, accel=accel)
    assert out["ids"].shape[:2] == (2, expected) and out["scores"].shape == (2, expected)
    assert out["length"].shape == (2, expected) and out["attention"].shape[:2] == (2, expected)
    for sentence in (0, 1):
        assert len(distinct(out, sentence)) == expected  # every hypothesis a different one, none missing
    assert np.isfinite(out["scores"].numpy()).all()
    # The clamped search is the search of that width.
    same = tfattn.beam_search(model, SOURCE, beam_width=expected, length_penalty=0.6, config=LIMIT, accel=accel)
    for key in ("ids", "scores", "length"):
        np.testing.assert_array_equal(out[key], same[key], err_msg=key)


def test_n_best_above_the_clamped_beam_is_clamped_too():
    out = tfattn.beam_search(MarkovModel(100), SOURCE, beam_width=1000, n_best=500, config=LIMIT)
    assert out["scores"].shape == (2, 64)
    out = tfattn.beam_search(MarkovModel(100), SOURCE, beam_width=1000, n_best=10, config=LIMIT)
    assert out["scores"].shape == (2, 10)


def char_tokenizer(n_tokens, max_length):
    """A character tokenizer of `n_tokens` ids: the 4 reserved ones and `n_tokens - 4` characters."""
    from tfattn.data.text import Tokenizer

    characters = [chr(c) for c in range(0x4E00, 0x4E00 + n_tokens - 4)]  # one-character tokens, none reserved
    tokenizer = Tokenizer(characters, level="char", max_length=max_length)
    assert tokenizer.vocab_size == n_tokens
    return tokenizer


@pytest.mark.parametrize("vocab, expected", [(100, 64), (40, 40)])
def test_translate_beam_clamps_the_width(vocab, expected):
    """The `translate_beam` function that `export` saves as the signature of that name (not exported
    here: that adds a SavedModel's tracing and writing; tests/serving checks an export's outputs)."""
    from tfattn.data.text import Tokenizer
    from tfattn.serving.translator import Translator

    source = Tokenizer(list("abc"), level="char", max_length=8)
    model = tfattn.make_model(tfattn.ModelConfig(units=8, embedding_dim=4), source.vocab_size, vocab)
    translator = Translator(model, source, char_tokenizer(vocab, 4), DecodeConfig(max_length=4))
    out = translator.beam(["abc", "ca"], beam_width=1000)
    assert out["nbest_text"].shape == (2, expected) and out["nbest_score"].shape == (2, expected)
    assert len(set(out["nbest_text"][0].tolist())) == expected  # different texts
    assert np.isfinite(out["nbest_score"]).all()


# -- the coverage penalty's floor --------------------------------------------------------------------

A = 4
# Next-token probabilities by previous token; every other token gets 1e-12. Beam 2 keeps [END]
# (0.3) and [A, END] (0.7 * 1.0).
NEXT = {START_ID: {A: 0.7, END_ID: 0.3}, A: {END_ID: 1.0}}
VOCAB = 8
# Every step attends to source positions 0 and 1 alone: positions 2 and 3 get exactly zero.
WEIGHTS = [0.5, 0.5, 0.0, 0.0]


class ZeroAttentionModel:
    def __init__(self):
        probs = np.full((VOCAB, VOCAB), 1e-12)
        for previous, row in NEXT.items():
            probs[previous, list(row)] = list(row.values())
        self.logits = tf.constant(np.log(probs), tf.float32)  # (vocab, vocab)
        self.decoder, self.vocab_size = self, VOCAB

    def encode(self, source):
        return {"positions": tf.zeros(tf.shape(source))}, {"unused": tf.zeros([tf.shape(source)[0]])}

    def step(self, token, state, memory):
        t_in = tf.shape(memory["positions"])[1]
        weights = tf.tile(tf.constant([WEIGHTS]), [tf.shape(token)[0], 1])[:, :t_in]  # (rows, t_in)
        return tf.gather(self.logits, token), weights, state


def gnmt_score(log_p, length, steps, real_positions, alpha, beta):
    """NumPy, from the definition: `steps` attention rows of WEIGHTS summed into the coverage."""
    coverage = steps * np.array(WEIGHTS)[:real_positions]  # (real t_in,)
    return log_p / ((5 + length) / 6) ** alpha + beta * np.sum(np.log(np.clip(coverage, 1e-10, 1.0)))


@pytest.mark.parametrize("accel", [True, False])
def test_a_source_position_never_attended_costs_beta_log_1e_10(accel):
    # Sentence 0: 4 real positions, 2 never attended. Sentence 1: 3 real positions (position 2,
    # [END], never attended) and one of padding, which the penalty leaves out.
    source = [[START_ID, 9, 10, END_ID], [START_ID, 9, END_ID, 0]]
    alpha, beta = 0.6, 0.2
    out = tfattn.beam_search(ZeroAttentionModel(), source, beam_width=2, length_penalty=alpha,
                             coverage_penalty=beta, accel=accel)
    for sentence, real in enumerate([4, 3]):
        ids, length = out["ids"].numpy()[sentence], out["length"].numpy()[sentence]
        assert [row[:n].tolist() for row, n in zip(ids, length)] == [[A, END_ID], [END_ID]]
        # [A, END]: coverage (1, 1, 0, 0); [END]: coverage (0.5, 0.5, 0, 0).
        expected = [gnmt_score(np.log(0.7), 2, 2, real, alpha, beta), gnmt_score(np.log(0.3), 1, 1, real, alpha, beta)]
        np.testing.assert_allclose(out["scores"].numpy()[sentence], expected, rtol=1e-5)
    # By hand for sentence 0's best: ln 0.7 / (7/6)^0.6 + 0.2 * (0 + 0 + 2 ln 1e-10) = -0.3252 - 9.2103.
    np.testing.assert_allclose(out["scores"].numpy()[0, 0], -9.5355, atol=1e-3)


def test_the_coverage_penalty_floors_zero_coverage_and_skips_padding():
    coverage = tf.constant([[[0.0, 0.25, 2.0, 0.0], [1e-12, 1.0, 0.5, 0.0]]])  # (batch 1, beam 2, t_in 4)
    mask = tf.constant([[True, True, True, False]])  # position 3 is padding
    got = _coverage_penalty(coverage, mask, tf.constant(0.5)).numpy()
    floor = np.log(1e-10)
    expected = 0.5 * np.array([[floor + np.log(0.25) + 0.0, floor + 0.0 + np.log(0.5)]])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
