"""Search strategies: how the decoding loop (`tfattn.decoding.loop`) picks the next tokens.

A strategy keeps `beam` hypotheses per sentence (1 for greedy search and sampling) and answers three
questions for the loop:

    initialize(batch, t_in)                    its state at step 0
    select(t, logits, weights, state, ...)     each hypothesis' next token and parent, and its new state
    finalize(state, steps, t_in)               the outputs, from every step's choices

Every tensor of a strategy's state and choices is sentence first: `(batch, beam, ...)`.
"""

import copy

import numpy as np
import tensorflow as tf

from tfattn.ids import END_ID, PAD_ID, START_ID

MAX_BEAM_WIDTH = 64
COVERAGE_FLOOR = 1e-10  # a source position never attended adds beta * log(1e-10), not -inf
NEG_INF = float("-inf")


class Greedy:
    """One hypothesis per sentence, extended by its most likely output token.

    Padding and `[START]` are never output; at a sentence's length limit the token is `[END]`; a
    finished sentence goes on emitting padding with zero attention until the whole batch is done.
    """

    beam = 1

    def with_vocab(self, vocab):
        """The strategy with its settings clamped to a vocabulary of `vocab` tokens (see `BeamSearch`)."""
        return self

    def choose(self, t, logits):
        """The next token of each row `(rows,)` int32 from float32 `logits (rows, vocab)` at step `t`."""
        return tf.argmax(only_outputs(logits), axis=-1, output_type=tf.int32)

    def initialize(self, batch, t_in):
        return {"finished": tf.zeros([batch, 1], tf.bool)}

    def select(self, t, logits, weights, state, limits, mask):
        """Returns the new state and the choices: tokens `(batch, 1)`, parents `(batch, 1)` (all 0)
        and attention `(batch, 1, t_in)`."""
        finished = state["finished"][:, 0]  # (batch,)
        token = self.choose(t, tf.cast(logits, tf.float32))  # (batch,)
        token = tf.where(t + 1 >= limits, END_ID, token)  # the last allowed token is [END]
        token = tf.where(finished, PAD_ID, token)
        attention = tf.where(finished[:, None], 0.0, tf.cast(weights, tf.float32))  # (batch, t_in)
        state = {"finished": (finished | tf.equal(token, END_ID))[:, None]}
        return state, (token[:, None], tf.zeros_like(token)[:, None], attention[:, None, :])

    def finalize(self, state, steps, t_in):
        """`ids (batch, t_out)`, `attention (batch, t_out, t_in)` and `length (batch,)`, from the steps'
        TensorArrays of tokens, parents and attention."""
        tokens, _, attention = steps
        batch = tf.shape(state["finished"])[0]
        ids = stack_steps(tokens, [1, 2, 0], [batch, 1, 0])[:, 0]  # (batch, t_out)
        attention = stack_steps(attention, [1, 2, 0, 3], [batch, 1, 0, t_in])[:, 0]  # (batch, t_out, t_in)
        length = tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)  # (batch,), [END] included
        return {"ids": ids, "attention": attention, "length": length}


class Sampling(Greedy):
    """Draws each next token from the model's distribution, for teaching (never a default).

    The logits are divided by `temperature` and, when `top_k > 0`, cut to the `top_k` most likely
    tokens; draws are stateless, step `t` using the seed pair `(seed, t)`.
    """

    def __init__(self, temperature=1.0, top_k=0, seed=0):
        self.temperature = _checked_temperature(temperature)
        self.top_k = _checked_top_k(top_k)
        self.seed = tf.cast(seed, tf.int64)

    def choose(self, t, logits):
        logits = only_outputs(logits)
        logits = logits - tf.reduce_max(logits, axis=-1, keepdims=True)  # max 0: no overflow below
        logits = _keep_top_k(logits / self.temperature, self.top_k)  # (rows, vocab)
        seed_pair = tf.stack([self.seed, tf.cast(t, tf.int64)])  # (2,)
        return tf.random.stateless_categorical(logits, 1, seed_pair, dtype=tf.int32)[:, 0]  # (rows,)


class BeamSearch:
    """Beam search with the length and coverage penalties of GNMT.

    Each sentence keeps `beam` hypotheses; every step extends each by every output token and keeps
    the `beam` best of the `beam * vocab` candidates (found among each hypothesis' `beam` best
    extensions, which is exact), ranked by

        score(Y) = log P(Y | X) / lp(Y) + cp(X; Y)       lp(Y) = ((5 + |Y|) / 6) ** alpha
        cp(X; Y) = beta * sum_i log(min(sum_j a_ij, 1))

    where `|Y|` counts output tokens including `[END]`, `a_ij` is the attention of output step `j`
    on source position `i` (padding left out), and the log is floored at `log(1e-10)`. At step 0
    only beam 0 is expanded (the others start at -inf). A hypothesis that emits `[END]` is finished:
    its score is frozen and it stays until `beam` better ones push it out.

    Args:
        beam_width, length_penalty, coverage_penalty, n_best: as `tfattn.decoding.beam_search` takes them.

    Reference: Wu et al. 2016, arXiv 1609.08144, section 7, eq. 14.
    """

    def __init__(self, beam_width=4, length_penalty=0.6, coverage_penalty=0.0, n_best=None):
        self.beam_width, self.n_best = beam_width, n_best
        self.alpha, self.beta = _penalty(length_penalty), _penalty(coverage_penalty)

    def top_k(self, x, k):
        """`tf.math.top_k` over each row of `x (rows, vocab)`: the `k` largest values and their ids."""
        return tf.math.top_k(x, k=k)

    def with_vocab(self, vocab):
        """The strategy with its beam clamped to `[1, min(vocab, 64)]` and `n_best` to `[1, beam]`."""
        clamped = copy.copy(self)
        clamped.vocab = vocab
        clamped.beam = tf.clip_by_value(tf.cast(self.beam_width, tf.int32), 1, tf.minimum(vocab, MAX_BEAM_WIDTH))
        n_best = clamped.beam if self.n_best is None else tf.cast(self.n_best, tf.int32)
        clamped.n_best = tf.clip_by_value(n_best, 1, clamped.beam)
        return clamped

    def initialize(self, batch, t_in):
        """Beam 0 of every sentence holds the empty hypothesis; the others start at -inf, never expanded."""
        log_prob = tf.tile(tf.where(tf.range(self.beam) == 0, 0.0, NEG_INF)[None, :], [batch, 1])  # (batch, beam)
        return {
            "log_prob": log_prob,  # log P(Y | X), summed over the tokens so far
            "score": log_prob,  # the ranking score, frozen once finished
            "length": tf.zeros([batch, self.beam], tf.int32),  # output tokens, [END] included
            "finished": tf.zeros([batch, self.beam], tf.bool),
            "coverage": tf.zeros([batch, self.beam, t_in], tf.float32),  # attention summed over the steps
        }

    def select(self, t, logits, weights, state, limits, mask):
        """Keeps the `beam` best candidates of every sentence at step `t`.

        Returns the new state and the choices: tokens `(batch, beam)`, parent beams `(batch, beam)`
        and attention `(batch, beam, t_in)` (zero for a beam that had already finished).
        """
        weights = _by_sentence(tf.cast(weights, tf.float32), self.beam)  # (batch, beam, t_in)
        tokens, log_prob, score = self._candidates(t, logits, weights, state, limits, mask)  # (batch, beam * beam)
        score, index = tf.math.top_k(score, k=self.beam)  # (batch, beam), best first
        parents, tokens = index // self.beam, tf.gather(tokens, index, batch_dims=1)  # (batch, beam)
        was_finished = tf.gather(state["finished"], parents, batch_dims=1)  # (batch, beam)
        impossible = tf.equal(score, NEG_INF)  # fewer than `beam` candidates could exist
        tokens = tf.where(was_finished | impossible, PAD_ID, tokens)
        attention = tf.where(was_finished[:, :, None], 0.0, tf.gather(weights, parents, batch_dims=1))
        new_state = {
            "log_prob": tf.gather(log_prob, index, batch_dims=1),  # (batch, beam)
            "score": score,
            "length": tf.where(was_finished, tf.gather(state["length"], parents, batch_dims=1), t + 1),
            "finished": was_finished | impossible | tf.equal(tokens, END_ID),
            "coverage": tf.gather(state["coverage"], parents, batch_dims=1) + attention,  # (batch, beam, t_in)
        }
        return new_state, (tokens, parents, attention)

    def _candidates(self, t, logits, weights, state, limits, mask):
        """The `beam` best extensions of every beam: tokens, log-probabilities and scores, each
        `(batch, beam * beam)`, candidate `k` of beam `j` at `j * beam + k`.

        Within a beam the score grows with the new token's log-probability, so a sentence's `beam`
        best candidates are among its beams' `beam` best extensions. Padding and `[START]` are never
        new tokens, and at the length limit only `[END]` is. A finished beam has one candidate,
        itself followed by padding, with its frozen log-probability and score.
        """
        beam = self.beam
        logits = tf.cast(logits, tf.float32)  # (batch * beam, vocab)
        # 1. Log-probabilities of each row's `beam` best output tokens.
        log_probs = only_outputs(tf.nn.log_softmax(logits))  # (batch * beam, vocab)
        values, tokens = self.top_k(log_probs, k=beam)  # (batch * beam, beam)
        # 2. At a sentence's length limit [END] is the only candidate.
        first = tf.range(beam) == 0  # (beam,): where a single candidate goes
        at_limit = tf.repeat(t + 1 >= limits, beam)[:, None]  # (batch * beam, 1)
        tokens = tf.where(at_limit, tf.where(first, END_ID, PAD_ID), tokens)
        step = tf.where(at_limit, tf.where(first, log_probs[:, END_ID:END_ID + 1], NEG_INF), values)
        # 3. Scores.
        old_log_prob = tf.reshape(state["log_prob"], [-1, 1])  # (batch * beam, 1)
        log_prob = old_log_prob + step  # (batch * beam, beam)
        coverage = _coverage_penalty(state["coverage"] + weights, mask, self.beta)  # (batch, beam)
        score = log_prob / _length_penalty(t + 1, self.alpha) + tf.reshape(coverage, [-1, 1])
        # 4. A finished beam carries itself over.
        finished = tf.reshape(state["finished"], [-1, 1])  # (batch * beam, 1)
        tokens = tf.where(finished, PAD_ID, tokens)
        log_prob = tf.where(finished, tf.where(first, old_log_prob, NEG_INF), log_prob)
        score = tf.where(finished, tf.where(first, tf.reshape(state["score"], [-1, 1]), NEG_INF), score)
        flat = [-1, beam * beam]
        return tf.reshape(tokens, flat), tf.reshape(log_prob, flat), tf.reshape(score, flat)

    def finalize(self, state, steps, t_in):
        """The `n_best` final hypotheses of every sentence, best first, back-tracked to their tokens
        and attention: `ids (batch, n_best, t_out)`, `scores (batch, n_best)`, `attention (batch,
        n_best, t_out, t_in)`, `length (batch, n_best)`; impossible ones have score -inf and zeros."""
        scores, order = tf.math.top_k(state["score"], k=self.n_best)  # (batch, n_best)
        ids, attention = backtrack(steps, order, t_in)
        real = scores > NEG_INF  # (batch, n_best)
        return {
            "ids": tf.where(real[:, :, None], ids, PAD_ID),
            "scores": scores,
            "attention": tf.where(real[:, :, None, None], attention, 0.0),
            "length": tf.where(real, tf.gather(state["length"], order, batch_dims=1), 0),
        }


def backtrack(steps, order, t_in):
    """Follows every hypothesis from its final beam back to step 0 through the parent beams.

    Args:
        steps: TensorArrays of tokens `(batch, beam)`, parents `(batch, beam)` and attention
            `(batch, beam, t_in)`, one element per step.
        order: int32 `(batch, n_best)`, the final beams of the hypotheses.

    Returns:
        ids int32 `(batch, n_best, t_out)` and attention float32 `(batch, n_best, t_out, t_in)`.
    """
    tokens_ta, parents_ta, attention_ta = steps
    size = tokens_ta.size()
    ids_out = tf.TensorArray(tf.int32, size=size, element_shape=[None, None])
    attention_out = tf.TensorArray(tf.float32, size=size, element_shape=[None, None, None])

    def body(t, beam, ids_out, attention_out):  # beam (batch, n_best): each hypothesis' beam at step t
        ids_out = ids_out.write(t, tf.gather(tokens_ta.read(t), beam, batch_dims=1))  # (batch, n_best)
        attention_t = tf.gather(attention_ta.read(t), beam, batch_dims=1)  # (batch, n_best, t_in)
        parent = tf.gather(parents_ta.read(t), beam, batch_dims=1)  # (batch, n_best)
        return t - 1, parent, ids_out, attention_out.write(t, attention_t)

    _, _, ids_out, attention_out = tf.while_loop(lambda t, *_: t >= 0, body, (size - 1, order, ids_out, attention_out))
    batch, n_best = tf.shape(order)[0], tf.shape(order)[1]
    ids = stack_steps(ids_out, [1, 2, 0], [batch, n_best, 0])  # (batch, n_best, t_out)
    attention = stack_steps(attention_out, [1, 2, 0, 3], [batch, n_best, 0, t_in])  # (batch, n_best, t_out, t_in)
    return ids, attention


def stack_steps(array, perm, empty_shape):
    """A TensorArray of per-step tensors, stacked and transposed by `perm`; zeros of `empty_shape`
    when no step ran (an empty TensorArray cannot be stacked when its element shape is unknown)."""
    return tf.cond(array.size() > 0, lambda: tf.transpose(array.stack(), perm),
                   lambda: tf.zeros(empty_shape, array.dtype))


def can_output(vocab_ids):
    """Padding and `[START]` are never output tokens. `vocab_ids` int32 -> bool, same shape."""
    return (vocab_ids != PAD_ID) & (vocab_ids != START_ID)


def only_outputs(logits):
    """Logits `(rows, vocab)` with -inf for the ids `can_output` rules out."""
    allowed = can_output(tf.range(tf.shape(logits)[-1]))  # (vocab,)
    return tf.where(allowed, logits, tf.constant(-np.inf, logits.dtype))


def _by_sentence(x, beam):
    """`(batch * beam, ...)` rows -> `(batch, beam, ...)`."""
    return tf.reshape(x, tf.concat([[-1, beam], tf.shape(x)[1:]], axis=0))


def _keep_top_k(logits, top_k):
    """Logits `(rows, vocab)` below each row's `top_k`-th largest become -inf; `top_k = 0` keeps all."""
    vocab = tf.shape(logits)[-1]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)
    kth = tf.math.top_k(logits, k=k).values[:, -1:]  # (rows, 1)
    return tf.where(logits < kth, tf.constant(-np.inf, logits.dtype), logits)


def _checked_temperature(temperature):
    value = tf.get_static_value(temperature)
    if value is not None:
        if not np.all(np.asarray(value) > 0):  # NaN fails too
            raise ValueError(f"temperature must be > 0. Received: temperature={np.asarray(value).tolist()!r}")
        return tf.constant(value, tf.float32)
    temperature = tf.cast(temperature, tf.float32)
    tf.debugging.assert_positive(temperature, message="temperature must be > 0")
    return temperature


def _checked_top_k(top_k):
    value = tf.get_static_value(top_k)
    if value is not None and not np.all(np.asarray(value) >= 0):
        raise ValueError(f"top_k must be >= 0 (0 keeps every token). Received: top_k={np.asarray(value).tolist()!r}")
    return tf.maximum(tf.cast(top_k, tf.int32), 0)


def _penalty(value):
    """A penalty weight as a float32 scalar: NaN -> 0, then clamped to [0, 5]."""
    value = tf.cast(value, tf.float32)
    return tf.clip_by_value(tf.where(tf.math.is_nan(value), 0.0, value), 0.0, 5.0)


def _length_penalty(length, alpha):
    """GNMT's `lp(Y) = ((5 + |Y|) / 6) ** alpha`."""
    return ((5.0 + tf.cast(length, tf.float32)) / 6.0) ** alpha


def _coverage_penalty(coverage, mask, beta):
    """GNMT's `beta * sum_i log(min(coverage_i, 1))` over real source positions:
    `coverage (batch, beam, t_in)`, `mask (batch, t_in)` -> `(batch, beam)`."""
    logs = tf.math.log(tf.clip_by_value(coverage, COVERAGE_FLOOR, 1.0))  # (batch, beam, t_in)
    return beta * tf.reduce_sum(tf.where(mask[:, None, :], logs, 0.0), axis=2)
