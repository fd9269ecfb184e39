"""Beam search: the hypothesis greedy misses, GNMT scores checked by hand, back-tracked attention,
clamped arguments, shapes, padding invariance and one trace for every shape and beam width."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel.decoding import TOP_K_BLOCKED, _block_size, top_k
from tfattn.search import DecodeConfig, beam_search, greedy
from tfattn.data.text import END_ID, PAD_ID, START_ID, UNK_ID

VOCAB = 8
A, B, C, D = 4, 5, 6, 7
# Next-token probabilities keyed on the previous token. Greedy takes A (0.6), then C (0.4), then
# [END] (0.6): 0.144. The beam finds B (0.4) then a near-certain [END] (0.9): 0.36.
NEXT = {
    START_ID: {A: 0.6, B: 0.4},
    A: {C: 0.4, D: 0.3, END_ID: 0.3},
    B: {END_ID: 0.9, C: 0.1},
    C: {END_ID: 0.6, D: 0.4},
    D: {END_ID: 1.0},
}
# Attention over 4 source positions, keyed on the token *before* the previous one, which the fake
# decoder keeps in its state: the weights come out right only if the state follows the parent beams.
ATTENTION = {
    START_ID: [0.1, 0.2, 0.3, 0.4],
    A: [0.7, 0.1, 0.1, 0.1],
    B: [0.05, 0.05, 0.1, 0.8],
    C: [0.25, 0.25, 0.25, 0.25],
    D: [0.4, 0.4, 0.1, 0.1],
}
SOURCE = [[START_ID, 9, 10, END_ID]]  # 4 real positions: the tables apply unchanged

def make_beam_fn(model, config=None):
    """`beam_search` as a `tf.function` of `source`, `beam_width` and `length_penalty` that never
    retraces for new shapes or widths."""
    signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32)]
    return tf.function(lambda source, width, alpha: beam_search(model, source, width, alpha, config=config),
                       input_signature=signature)



def table(rows, width, default):
    out = np.full((VOCAB, width), default, np.float64)
    for key, row in rows.items():
        out[key] = 0.0 if isinstance(row, dict) else row
        if isinstance(row, dict):
            out[key, list(row)] = list(row.values())
    return out


class FakeDecoder:
    """Logits `log(NEXT[token])` (1e-12 where a token is not listed); weights `ATTENTION[state]`."""

    def __init__(self):
        probs = table(NEXT, VOCAB, 0.0)
        probs[[PAD_ID, UNK_ID, END_ID], END_ID] = 1.0  # rows never used by a live hypothesis
        self.logits = tf.constant(np.log(np.maximum(probs, 1e-12)), tf.float32)  # (vocab, vocab)
        self.weights = tf.constant(table(ATTENTION, 4, 0.25), tf.float32)  # (vocab, 4)

    def step(self, token, state, memory):
        mask = tf.cast(memory["mask"], tf.float32)  # (rows, t_in)
        weights = tf.gather(self.weights, state["before"])[:, : tf.shape(mask)[1]] * mask  # (rows, t_in)
        weights = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
        return tf.gather(self.logits, token), weights, {"before": token}


class FakeModel:
    def __init__(self):
        self.decoder = FakeDecoder()
        self.decoder.vocab_size = VOCAB

    def encode(self, source):
        batch = tf.shape(source)[0]
        return {"mask": tf.not_equal(source, 0)}, {"before": tf.fill([batch], START_ID)}


def hypotheses(out, sentence=0):
    """The returned hypotheses of one sentence as lists of tokens, [END] included."""
    ids, length = out["ids"].numpy()[sentence], out["length"].numpy()[sentence]
    return [row[:n].tolist() for row, n in zip(ids, length)]


def expected_attention(tokens, mask=(1, 1, 1, 1)):
    """Row j is ATTENTION[y_{j-2}] (y_{-1} = y_0 = [START]), renormalized over the real positions."""
    before = [START_ID, START_ID] + tokens[:-2]
    rows = np.array([ATTENTION[b] for b in before]) * np.array(mask)
    return rows / rows.sum(axis=1, keepdims=True)


def hand_score(tokens, alpha, beta=0.0):
    """GNMT: log P / ((5 + |Y|) / 6) ** alpha + beta * sum_i log(min(sum_j a_ij, 1))."""
    log_p = sum(np.log(NEXT[prev][tok]) for prev, tok in zip([START_ID] + tokens[:-1], tokens))
    coverage = expected_attention(tokens).sum(axis=0)  # (t_in,)
    return log_p / ((5 + len(tokens)) / 6) ** alpha + beta * np.log(np.minimum(coverage, 1.0)).sum()


def test_beam_finds_the_sequence_greedy_misses():
    model = FakeModel()
    assert greedy(model, SOURCE)["ids"].numpy().tolist() == [[A, C, END_ID]]
    out = beam_search(model, SOURCE, beam_width=2, length_penalty=0.0)
    assert hypotheses(out) == [[B, END_ID], [A, C, END_ID]]
    np.testing.assert_allclose(out["scores"].numpy(), [[np.log(0.4 * 0.9), np.log(0.6 * 0.4 * 0.6)]], rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_scores_are_log_probabilities_over_the_length_penalty(alpha):
    out = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=alpha)
    found = hypotheses(out)
    assert found[0] == [B, END_ID]
    np.testing.assert_allclose(out["scores"][0, 0], np.log(0.36) / (7 / 6) ** alpha, rtol=1e-5)
    np.testing.assert_allclose(out["scores"][0], [hand_score(y, alpha) for y in found], rtol=1e-5)


def test_coverage_penalty_adds_beta_times_log_coverage():
    plain = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=0.0)
    out = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=0.0, coverage_penalty=0.2)
    found = hypotheses(out)
    np.testing.assert_allclose(out["scores"][0], [hand_score(y, 0.0, beta=0.2) for y in found], rtol=1e-5)
    assert found[0] == [B, END_ID]  # coverage [0.2, 0.4, 0.6, 0.8]: 0.2 * log(0.0384) = -0.652
    assert out["scores"][0, 0] < plain["scores"][0, 0] - 0.6


def test_n_best_is_sorted_and_clamped():
    out = beam_search(FakeModel(), SOURCE, beam_width=4, length_penalty=0.0)
    scores = out["scores"].numpy()[0]
    assert scores.shape == (4,) and (np.diff(scores) <= 0).all()
    two = beam_search(FakeModel(), SOURCE, beam_width=4, length_penalty=0.0, n_best=2)
    assert hypotheses(two) == hypotheses(out)[:2]
    np.testing.assert_allclose(two["scores"][0], scores[:2])
    for n_best, expected in [(10, 4), (0, 1), (tf.constant(3), 3)]:
        assert beam_search(FakeModel(), SOURCE, beam_width=4, n_best=n_best)["scores"].shape == (1, expected)


def test_attention_follows_each_hypothesis_own_parents():
    source = [[START_ID, 9, 10, END_ID], [START_ID, 9, END_ID, PAD_ID]]
    out = beam_search(FakeModel(), source, beam_width=4, length_penalty=0.6)
    attention = out["attention"].numpy()  # (batch, n_best, t_out, t_in)
    for sentence, mask in enumerate([(1, 1, 1, 1), (1, 1, 1, 0)]):
        for k, tokens in enumerate(hypotheses(out, sentence)):
            n = len(tokens)
            assert tokens[-1] == END_ID and (out["ids"].numpy()[sentence, k, n:] == PAD_ID).all()
            np.testing.assert_allclose(attention[sentence, k, :n], expected_attention(tokens, mask), atol=1e-6)
            np.testing.assert_allclose(attention[sentence, k, :n].sum(-1), 1.0, atol=1e-6)
            assert (attention[sentence, k, n:] == 0).all()


@pytest.mark.parametrize("beam_width", [0, -3, tf.constant(-1)])
def test_beam_width_below_one_is_greedy(beam_width):
    out = beam_search(FakeModel(), SOURCE, beam_width=beam_width)
    assert out["ids"].shape[1] == 1 and hypotheses(out) == [[A, C, END_ID]]


def test_beam_wider_than_the_vocabulary_is_clamped():
    out = beam_search(FakeModel(), SOURCE, beam_width=100, length_penalty=0.0)
    assert out["scores"].shape == (1, VOCAB) and hypotheses(out)[0] == [B, END_ID]
    found = [tuple(y) for y in hypotheses(out)]
    assert len(set(found)) == VOCAB and np.isfinite(out["scores"].numpy()).all()  # distinct, all real


def test_missing_hypotheses_are_empty():
    """With a limit of one token only [END] can be said: the other beams hold nothing."""
    out = beam_search(FakeModel(), SOURCE, beam_width=3, config=DecodeConfig(max_length=1))
    assert hypotheses(out) == [[END_ID], [], []]
    np.testing.assert_allclose(out["scores"][0], [np.log(1e-12), -np.inf, -np.inf], rtol=1e-5)
    assert (out["ids"][0, 1:].numpy() == 0).all() and (out["attention"][0, 1:].numpy() == 0).all()


@pytest.mark.parametrize("alpha, same_as", [(float("nan"), 0.0), (tf.constant(float("nan")), 0.0),
                                            (9.0, 5.0), (-1.0, 0.0)])
def test_length_penalty_nan_is_zero_and_is_clamped(alpha, same_as):
    got = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=alpha)
    expected = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=same_as)
    np.testing.assert_array_equal(got["scores"], expected["scores"])
    assert not np.isnan(got["scores"].numpy()).any()


def test_in_a_tf_function_with_static_shapes():
    fn = tf.function(lambda source: beam_search(FakeModel(), source, beam_width=3, length_penalty=1.0))
    got, expected = fn(tf.constant(SOURCE)), beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=1.0)
    for key in ("ids", "scores", "attention", "length"):
        np.testing.assert_allclose(got[key], expected[key], atol=1e-6)


def test_length_limit_forces_end():
    config = DecodeConfig(max_length=2)  # A C [END] cannot fit: A ends after one token, at P([END] | A)
    out = beam_search(FakeModel(), SOURCE, beam_width=3, length_penalty=0.0, config=config)
    # The third beam holds the first of the tokens at 1e-12 (the lowest id wins ties): [UNK].
    assert hypotheses(out) == [[B, END_ID], [A, END_ID], [UNK_ID, END_ID]]
    np.testing.assert_allclose(out["scores"][0], np.log([0.4 * 0.9, 0.6 * 0.3, 1e-12]), rtol=1e-5)


# -- on the trained dates model -------------------------------------------------------------------


def source_ids(translator, texts):
    return translator.source_tokenizer(tf.constant(texts))


def test_beam_width_one_equals_greedy(dates_translator, dates_data):
    ids = source_ids(dates_translator, [s for s, _ in dates_data[1][:20]])
    config = DecodeConfig(max_length=14)
    expected = greedy(dates_translator.model, ids, config)
    got = beam_search(dates_translator.model, ids, beam_width=1, config=config)
    length = expected["length"].numpy()
    np.testing.assert_array_equal(got["length"][:, 0], length)
    for row, n in enumerate(length):
        assert got["ids"][row, 0, :n].numpy().tolist() == expected["ids"][row, :n].numpy().tolist()
        np.testing.assert_allclose(got["attention"][row, 0, :n], expected["attention"][row, :n], atol=1e-5)


def test_padding_does_not_change_the_best_hypothesis(dates_translator, dates_data):
    fn = make_beam_fn(dates_translator.model, DecodeConfig(max_length=14))
    short = [s for s, _ in dates_data[1] if len(s) <= 10][:8]
    assert short  # else the loop below checks nothing
    long = "wednesday, september 27, 2045"
    width, alpha = tf.constant(4), tf.constant(0.6)
    for text in short:
        alone = fn(source_ids(dates_translator, [text]), width, alpha)
        batched = fn(source_ids(dates_translator, [long, text, long]), width, alpha)
        n = int(alone["length"][0, 0])
        assert int(batched["length"][1, 0]) == n
        assert batched["ids"][1, 0, :n].numpy().tolist() == alone["ids"][0, 0, :n].numpy().tolist()
        np.testing.assert_allclose(batched["scores"][1, 0], alone["scores"][0, 0], atol=1e-4)


def test_beam_fn_traces_once_for_every_shape_and_width(dates_translator):
    fn = make_beam_fn(dates_translator.model, DecodeConfig(max_length=14))
    for texts, width in [(["5 march 2019"], 1), (["1.2.03", "tuesday, march 5, 2019"], 3), (["2019 march 05"], 6)]:
        out = fn(source_ids(dates_translator, texts), tf.constant(width), tf.constant(0.6))
        assert out["ids"].shape[:2] == (len(texts), width) and out["scores"].shape == (len(texts), width)
    assert fn.experimental_get_tracing_count() == 1


def test_empty_batch(dates_translator):
    out = beam_search(dates_translator.model, tf.zeros([0, 2], tf.int32), beam_width=3)
    assert out["ids"].shape == (0, 3, 0) and out["scores"].shape == (0, 3)
    assert out["attention"].shape == (0, 3, 0, 2) and out["length"].shape == (0, 3)


def test_batch_of_512(dates_translator, dates_data):
    texts = [s for s, _ in dates_data[1]] * 3  # 600 sentences
    ids = source_ids(dates_translator, texts[:512])
    out = beam_search(dates_translator.model, ids, beam_width=4, config=DecodeConfig(max_length=14))
    assert out["ids"].shape[:2] == (512, 4) and out["attention"].shape[:2] == (512, 4)
    ids, length = out["ids"].numpy(), out["length"].numpy()
    assert (length >= 1).all() and (length <= 14).all()
    assert (np.take_along_axis(ids, length[:, :, None] - 1, axis=2) == END_ID).all()
    assert (np.diff(out["scores"].numpy(), axis=1) <= 0).all()


class MarkovModel:
    """Logits depend on the previous token only (a random table, padding and [START] included, so
    that they must be ruled out); uniform attention over the real source positions."""

    def __init__(self, vocab, seed):
        self.table = np.random.default_rng(seed).normal(0.0, 2.0, (vocab, vocab)).astype(np.float32)
        self.decoder, self.vocab_size = self, vocab

    def encode(self, source):
        return {"mask": tf.not_equal(source, 0)}, {"unused": tf.zeros([tf.shape(source)[0]])}

    def step(self, token, state, memory):
        mask = tf.cast(memory["mask"], tf.float32)
        return tf.gather(self.table, token), mask / tf.reduce_sum(mask, 1, keepdims=True), state


def exhaustive_beam(table, limit, beam, alpha):
    """The documented search, written plainly: every beam extended by every allowed token, all sorted."""
    log_p = table - np.log(np.exp(table.astype(np.float64)).sum(1, keepdims=True))  # (vocab, vocab)
    beams = [([], 0.0, 0.0, False)] + [([], -np.inf, -np.inf, False)] * (beam - 1)  # tokens, log P, score, done
    for t in range(limit):
        candidates = []
        for tokens, lp, score, done in beams:
            if done:
                candidates.append((score, tokens, lp, True))
                continue
            allowed = [END_ID] if t + 1 >= limit else [v for v in range(len(table)) if v not in (PAD_ID, START_ID)]
            prev = tokens[-1] if tokens else START_ID
            for v in allowed:
                new = lp + log_p[prev, v]
                candidates.append((new / ((5 + t + 1) / 6) ** alpha, tokens + [v], new, v == END_ID))
        candidates.sort(key=lambda c: -c[0])  # stable: earlier beams, then lower ids, win ties
        beams = [(tokens, lp, score, done) for score, tokens, lp, done in candidates[:beam]]
        if all(done for *_, done in beams):
            break
    return [(tokens, score) for tokens, _, score, _ in beams]


@pytest.mark.parametrize("vocab,beam_width", [(9, 1), (9, 2), (9, 3), (9, 5), (5, 4), (5, 5)])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_equals_an_exhaustive_search_over_every_candidate(vocab, beam_width, alpha):
    """Scoring each beam's best extensions only (what beam_search does) loses no candidate, also
    when the vocabulary is barely wider than the beam."""
    model = MarkovModel(vocab=vocab, seed=beam_width)
    source = [[START_ID, 5, END_ID, 0, 0], [START_ID, 5, 6, 7, END_ID]]  # length limits 3 and 5
    out = beam_search(model, source, beam_width, alpha, config=DecodeConfig(max_length=5, ratio=1.0, extra=0))
    for sentence, limit in enumerate([3, 5]):
        expected = exhaustive_beam(model.table, limit, beam_width, alpha)
        # The same hypotheses with the same scores, best first. (Sorted, because a Markov model gives
        # equal scores to sequences made of the same transitions, and rounding orders those.)
        assert sorted(hypotheses(out, sentence)) == sorted(tokens for tokens, _ in expected)
        np.testing.assert_allclose(out["scores"].numpy()[sentence], [s for _, s in expected], rtol=1e-5)


class CountingMarkovModel(MarkovModel):
    """A MarkovModel that never wants [END] (so every sentence ends at its length limit) and records
    the rows of every decoder step."""

    def __init__(self, vocab, seed):
        super().__init__(vocab, seed)
        self.table[:, END_ID] = -30.0
        self.rows_seen = []

    def step(self, token, state, memory):
        self.rows_seen.append(int(tf.shape(token)[0]))
        return super().step(token, state, memory)


def test_finished_sentences_leave_the_batch_and_results_stay_in_place():
    limits = [2, 2, 3, 4, 6, 6, 6, 7]  # real source tokens = length limits (ratio 1, extra 0)
    source = [[START_ID] + [5] * (n - 2) + [END_ID] + [0] * (7 - n) for n in limits]
    model = CountingMarkovModel(vocab=9, seed=3)
    out = beam_search(model, source, beam_width=2, length_penalty=0.6,
                      config=DecodeConfig(max_length=8, ratio=1.0, extra=0))
    # Two rows a sentence. Done after step t: the sentences whose limit is t + 1. After step 1, 2 of 8
    # are done: 6 go on. After step 3, 2 of 6 (limits 3 and 4): 4. After step 5, 3 of 4: 1. At step 2
    # only 1 of 6 was done: no gather.
    assert model.rows_seen == [16, 16, 12, 12, 8, 8, 2]
    for sentence, limit in enumerate(limits):
        expected = exhaustive_beam(model.table, limit, 2, 0.6)
        assert hypotheses(out, sentence) == [tokens for tokens, _ in expected]
        np.testing.assert_allclose(out["scores"].numpy()[sentence], [s for _, s in expected], rtol=1e-5)
        assert (out["ids"].numpy()[sentence, :, limit:] == 0).all()
        np.testing.assert_allclose(out["attention"].numpy()[sentence, :, :limit, :limit], 1.0 / limit, rtol=1e-6)
        assert (out["attention"].numpy()[sentence, :, limit:] == 0).all()


@pytest.mark.parametrize("n", [TOP_K_BLOCKED, 5000, 1031])  # 1031 is prime: the last block is padded
def test_blocked_top_k_equals_top_k_with_ties_and_infinities(n):
    rng = np.random.default_rng(n)
    # Few distinct values, so most of the k best are tied and their order rests on the indices.
    x = rng.integers(0, 4, size=(40, n)).astype(np.float32)
    x[0] = -np.inf  # all tied: the first k columns
    x[1, -3:] = 9.0  # the best at the very end (in the padded block when n is prime)
    x[2, :] = 0.0
    x[2, [7, n - 1]] = np.inf
    for k in [1, 2, 6, 66]:
        expected = tf.math.top_k(x, k)
        values, indices = top_k(tf.constant(x), tf.constant(k))
        np.testing.assert_array_equal(indices, expected.indices)
        np.testing.assert_array_equal(values, expected.values)
    np.testing.assert_array_equal(top_k(tf.constant(x), 3)[1][:3], [[0, 1, 2], [n - 3, n - 2, n - 1], [7, n - 1, 0]])


def test_top_k_block_sizes():
    assert _block_size(5000) == 100  # sqrt(10,000)
    assert _block_size(8000) == 125  # the divisor nearest 126.5
    assert _block_size(1031) == 46  # prime: ceil(sqrt(2,062)) = 46, 23 blocks, the last padded by 27


def test_beam_search_over_a_large_vocabulary_is_the_same_with_blocked_top_k(monkeypatch):
    from tfattn.accel import decoding
    import keras
    from tfattn.model import ModelConfig, ensure_built, make_model

    keras.utils.set_random_seed(3)
    model = ensure_built(make_model(ModelConfig(units=8, embedding_dim=4), 20, TOP_K_BLOCKED + 7))
    # Random weights spread the logits, so beams differ; larger logits make ties between them unlikely.
    model.decoder.logits_dense.kernel.assign(model.decoder.logits_dense.kernel * 30.0)
    source = tf.constant([[START_ID, 5, 6, 7, END_ID], [START_ID, 9, END_ID, 0, 0]])
    config = DecodeConfig(max_length=6)
    sizes = []  # block sizes chosen while tracing: the graph's loop must know the vocabulary's size
    monkeypatch.setattr(decoding, "_block_size", lambda n: sizes.append(n) or 31)
    blocked = make_beam_fn(model, config)(source, tf.constant(5), tf.constant(0.6))
    assert sizes and set(sizes) == {TOP_K_BLOCKED + 7}  # once per loop the graph holds (see tfattn.accel.decoding.ROW_SLICES)
    monkeypatch.setattr(decoding, "TOP_K_BLOCKED", 10**9)  # plain tf.math.top_k
    plain = make_beam_fn(model, config)(source, tf.constant(5), tf.constant(0.6))
    for key in plain:
        np.testing.assert_array_equal(blocked[key], plain[key], err_msg=key)
    assert len({tuple(row) for row in plain["ids"].numpy()[0]}) == 5  # five distinct hypotheses
