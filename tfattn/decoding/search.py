"""Decoding inside `tf.function`: greedy search, sampling and beam search, batched, with the attention
weights of every step.

    memory, state = model.encode(source)
    token = [START]
    repeat until every sentence has emitted [END] or reached its length limit:
        logits, weights, state = decoder.step(token, state, memory)
        token = argmax(logits)             # never padding or [START]; finished sentences emit padding

`sample` draws the token instead (temperature, top-k, a seed), for teaching; `beam_search` keeps the
`beam` best hypotheses of every sentence in `batch * beam` rows and returns the `n_best` of them.

Each sentence's length limit grows with its source: `min(max_length, ratio * t_src + extra)`,
where `t_src` counts the source tokens without padding. A model that never emits `[END]` still stops.

Finished sentences leave the batch: once a quarter of the sentences still decoded are done, the
loop gathers the others' state and memory into a smaller batch and scatters each step's outputs
back to the sentences' places. Outputs are those of stepping every sentence to the end; the time is
that of the unfinished ones (on spa-eng at batch 64: greedy +20%, beam 4 +50%).

A batch of 32 sentences or more is decoded as two row slices, two loops that run at the same time
on a 2-core CPU (`DecodeConfig.slices`), with the same outputs.

A batch of one sentence, the shape a server answers most, has a leaner loop of its own
(`_decode_one`: no rows to drop or put back; 113 graph nodes a step against 157 and a 48-node cond),
chosen with `branch.cond` so that the batch loops it skips cost nothing.
"""

import dataclasses
import typing

import numpy as np
import tensorflow as tf

from tfattn.accel import branch
from tfattn.accel import seq2seq as fast
from tfattn.model import Seq2Seq
from tfattn.data.text import END_ID, PAD_ID, START_ID


@dataclasses.dataclass
class DecodeConfig:
    """Output length limits: `min(max_length, ratio * source_length + extra)` tokens, `[END]` included.

    Attributes:
        max_length: hard upper bound on output tokens.
        ratio: output tokens allowed per source token.
        extra: output tokens allowed on top.
        slices: `greedy` and `beam_search` decode a batch of at least `slices * MIN_SLICE_ROWS`
            (16) sentences as this many row slices, independent loops that TensorFlow runs at the
            same time; the outputs are the same (each sentence's arithmetic is its own). `1` turns
            it off. Defaults to `2`, one per core of a 2-core CPU (see `_in_slices` for figures).
    """

    max_length: int = 64
    ratio: float = 2.0
    extra: int = 10
    slices: int = 2

    def __post_init__(self):
        for name in ("max_length", "slices"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1. Received: {name}={value!r}")


def length_limits(source, config):
    """Per-sentence output length limits `(batch,)` int32 from source ids `(batch, t_in)`."""
    t_src = tf.math.count_nonzero(source, axis=1, dtype=tf.int32)  # (batch,)
    limit = tf.cast(config.ratio * tf.cast(t_src, tf.float32), tf.int32) + config.extra
    return tf.minimum(limit, config.max_length)


def greedy(model, source, config=None, accel=True):
    """Greedy decoding of a batch of source ids.

    Args:
        model: a `Seq2Seq` model.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.
        accel: bool. Encode and step by the fast tier (`tfattn.accel`); the outputs are the same
            within float32 rounding. Defaults to `True`.

    Returns:
        A dict: `ids` int32 `(batch, t_out)` without `[START]`, `[END]` included, 0 after it;
        `attention` float32 `(batch, t_out, t_in)`, zero rows after `[END]`; `length` int32
        `(batch,)`, the number of output tokens, `[END]` included.
    """
    return _one_or_many(_tier(model, accel), source, config or DecodeConfig(), _argmax)


_GREEDY_OUTPUTS = {"ids": 1, "attention": 1, "length": None}  # name: output-time axis
_BEAM_OUTPUTS = {"ids": 2, "scores": None, "attention": 2, "length": None}


def _argmax(t, logits):
    token = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (batch,)
    # Padding and [START] are never outputs. They so rarely win that masking them only when one does
    # saves a pass over the logits at nearly every step, with the same result.
    return tf.cond(tf.reduce_all(_can_output(token)), lambda: token,
                   lambda: tf.argmax(_only_outputs(logits), axis=-1, output_type=tf.int32))


def _one_or_many(model, source, config, choose):
    """`greedy` and `sample`: one sentence by `_decode_one`, a batch by `_decode` (in slices); the
    outputs are the same (a test checks it), one sentence is about 5% faster (`tfattn.accel.branch`)."""
    source = tf.convert_to_tensor(source, tf.int32)
    return branch.cond(tf.shape(source)[0] == 1, lambda: _decode_one(model, source, config, choose),
                       lambda: _in_slices(lambda rows: _decode(model, rows, config, choose), source, config,
                                          _GREEDY_OUTPUTS))


def _decode_one(model, source, config, choose):
    """`_decode` for a batch of one sentence, with the same outputs.

    Nothing leaves the batch or goes back to its place, so the loop carries only the step number,
    the token, the state and the outputs, and it stops at `[END]`.
    """
    memory, state = model.encode(source)
    step = _stepper(model)
    ids_ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
    attn_ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None])
    limit = length_limits(source, config)  # (1,)

    def body(t, token, state, ids_ta, attn_ta):
        logits, weights, state = step(token, state, memory)  # (1, vocab), (1, t_in)
        token = choose(t, tf.cast(logits, tf.float32))  # (1,)
        token = tf.where(t + 1 >= limit, END_ID, token)  # the last allowed token is [END]
        return t + 1, token, state, ids_ta.write(t, token), attn_ta.write(t, tf.cast(weights, tf.float32))

    loop_vars = (tf.constant(0), tf.fill([1], START_ID), state, ids_ta, attn_ta)
    *_, ids_ta, attn_ta = tf.while_loop(
        lambda t, token, *_: tf.not_equal(token[0], END_ID), body, loop_vars,
        shape_invariants=_any_size(loop_vars), maximum_iterations=config.max_length,
    )
    return _stack(ids_ta, attn_ta, 1, tf.shape(source)[1])


def _decode(model, source, config, choose):
    """The one-hypothesis-per-sentence loop of `greedy` and `sample` for a batch.

    `choose(t, logits (rows, vocab))` picks the next token `(rows,)` int32 at step `t`, never
    padding or `[START]`.

    Finished sentences leave the batch: once a quarter of the rows still stepped have emitted
    `[END]`, the others are gathered into a smaller batch (state, memory and all), so the steps
    after that cost what the unfinished sentences cost. Every row's arithmetic is its own, so the
    output is the same as when stepping every row to the end; each step's tokens and attention are
    scattered back to the sentences' places in the batch.
    """
    source = tf.convert_to_tensor(source, tf.int32)
    batch, t_in = tf.shape(source)[0], tf.shape(source)[1]
    memory, state = model.encode(source)
    step = _stepper(model)
    ids_ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
    attn_ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None])
    # The rows still stepped: each one's place in the batch, its length limit and whether it is done.
    rows = {"place": tf.range(batch), "limit": length_limits(source, config), "token": tf.fill([batch], START_ID),
            "done": tf.zeros([batch], tf.bool)}

    def body(t, rows, state, memory, ids_ta, attn_ta):
        logits, weights, state = step(rows["token"], state, memory)  # (rows, vocab), (rows, t_in)
        token = choose(t, tf.cast(logits, tf.float32))  # (rows,), never padding or [START]
        token = tf.where(t + 1 >= rows["limit"], END_ID, token)  # the last allowed token is [END]
        token = tf.where(rows["done"], PAD_ID, token)
        weights = tf.where(rows["done"][:, None], 0.0, tf.cast(weights, tf.float32))
        places = rows["place"][:, None]  # (rows, 1); sentences that left the batch get padding and zeros
        ids_ta = ids_ta.write(t, tf.scatter_nd(places, token, [batch]))
        attn_ta = attn_ta.write(t, tf.scatter_nd(places, weights, [batch, t_in]))
        rows = {**rows, "token": token, "done": rows["done"] | tf.equal(token, END_ID)}
        rows, (state, memory) = _drop_finished(rows["done"], rows, (state, memory))
        return t + 1, rows, state, memory, ids_ta, attn_ta

    loop_vars = (tf.constant(0), rows, state, memory, ids_ta, attn_ta)
    *_, ids_ta, attn_ta = tf.while_loop(
        lambda t, rows, *_: tf.logical_not(tf.reduce_all(rows["done"])), body, loop_vars,
        shape_invariants=_any_size(loop_vars), maximum_iterations=config.max_length,
    )
    return _stack(ids_ta, attn_ta, batch, t_in)


MIN_SLICE_ROWS = 16  # a batch is sliced when every slice gets at least this many rows


def _in_slices(decode, source, config, outputs):
    """`decode(source)`, run on `config.slices` row slices of the batch at once.

    A decoding loop is a chain of small ops, each waiting for the one before; loops over two halves
    of a batch are two chains, which TensorFlow's executor runs at the same time, one per core of a
    2-core CPU. On spa-eng at batch 64, two slices against one: greedy through the export 1.04x as
    fast with TensorFlow's default threads and 1.3x with one thread per op
    (`intra_op_parallelism_threads=1`, inter-op 2; see the README's serving section); beam 4, in
    memory, 1.15x and 1.5x.

    A batch of `slices * MIN_SLICE_ROWS` sentences or more is cut into `slices` slices of rows
    `batch * i // slices` to `batch * (i + 1) // slices`; a smaller one is decoded whole, by the
    first slice's loop (so one sentence pays for no other loop). Each sentence's output does not
    depend on the other rows (a test checks it), so the slices' outputs, padded along their
    output-time axes to the longest and put back together, are those of one loop over the batch.

    Args:
        decode: `source rows -> dict of tensors`, batch first.
        outputs: `{name: output-time axis or None}`, the dict `decode` returns.
    """
    source = tf.convert_to_tensor(source, tf.int32)
    slices = config.slices
    if slices <= 1:
        return decode(source)
    batch = tf.shape(source)[0]
    sliced = batch >= slices * MIN_SLICE_ROWS
    bounds = [batch * i // slices for i in range(slices + 1)]
    first = decode(source[:tf.where(sliced, bounds[1], batch)])

    def the_others():
        outs = [first] + [decode(source[bounds[i]:bounds[i + 1]]) for i in range(1, slices)]
        return {k: _concat_padded([out[k] for out in outs], axis) for k, axis in outputs.items()}

    return tf.cond(sliced, the_others, lambda: first)


def _concat_padded(tensors, axis):
    """Concatenates along axis 0 after zero-padding `axis` (if any) to the largest size."""
    if axis is not None:
        size = tf.reduce_max([tf.shape(x)[axis] for x in tensors])
        after = lambda x: [[0, 0]] * (x.shape.rank - axis - 1)  # noqa: E731
        tensors = [tf.pad(x, [[0, 0]] * axis + [[0, size - tf.shape(x)[axis]]] + after(x)) for x in tensors]
    return tf.concat(tensors, axis=0)


def _drop_finished(done, by_sentence, by_row, beam=1):
    """What belongs to the sentences not `done (n,)`, gathered when `_worth_dropping`.

    `by_sentence` holds nested tensors `(n, ...)`, `by_row` nested tensors `(n * beam, ...)` with
    sentence `b` in rows `b * beam` to `b * beam + beam - 1` (greedy: `beam = 1`).
    """
    def keep():
        kept = tf.cast(tf.where(~done)[:, 0], tf.int32)  # (m,)
        rows = tf.reshape(kept[:, None] * beam + tf.range(beam)[None, :], [-1])  # (m * beam,)
        return (tf.nest.map_structure(lambda x: tf.gather(x, kept), by_sentence),
                tf.nest.map_structure(lambda x: tf.gather(x, rows), by_row))

    return tf.cond(_worth_dropping(done), keep, lambda: (by_sentence, by_row))


def _worth_dropping(done):
    """Whether to gather what is not `done (n,)`: once a quarter is done, and not all (the loop stops
    then). A gather costs about as much as a step, so it waits until it saves several."""
    n_done = tf.reduce_sum(tf.cast(done, tf.int32))
    return (4 * n_done >= tf.size(done)) & (n_done < tf.size(done))


def _stepper(model):
    """The decoder's step function for a loop: `decoder.stepper()` (weights read once) if it has one,
    else `decoder.step`."""
    stepper = getattr(model.decoder, "stepper", None)
    return stepper() if stepper is not None else model.decoder.step


def _tier(model, accel):
    """`model`, or with `accel` a `Seq2Seq` model's fast tier (`tfattn.accel.seq2seq.Stepping`)."""
    return fast.Stepping(model) if accel and isinstance(model, Seq2Seq) else model


def _stack(ids_ta, attn_ta, batch, t_in):
    """TensorArrays of steps -> batch-major tensors; an empty loop gives `(batch, 0)` shapes."""
    ids = _stack_steps(ids_ta, [1, 0], [batch, 0])  # (batch, t_out)
    attention = _stack_steps(attn_ta, [1, 0, 2], [batch, 0, t_in])  # (batch, t_out, t_in)
    length = tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)  # (batch,), [END] included
    return {"ids": ids, "attention": attention, "length": length}


def _stack_steps(array, perm, empty_shape):
    """A TensorArray of per-step tensors, stacked and transposed by `perm`; zeros of `empty_shape`
    when no step ran (an empty TensorArray cannot be stacked when its element shape is unknown)."""
    return tf.cond(array.size() > 0, lambda: tf.transpose(array.stack(), perm),
                   lambda: tf.zeros(empty_shape, array.dtype))


def make_greedy_fn(model, config=None):
    """A `tf.function` over `source (batch, t_in)` int32 that never retraces for new shapes."""
    config = config or DecodeConfig()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])
    def greedy_fn(source):
        return greedy(model, source, config)

    return greedy_fn


# -- sampling -------------------------------------------------------------------------------------


def sample(model, source, temperature=1.0, top_k=0, seed=0, config=None, accel=True):
    """Random decoding, for teaching: every token is drawn from the model's distribution.

    The logits are divided by `temperature` and, when `top_k > 0`, cut to the `top_k` most likely
    tokens before the draw; padding and `[START]` are never drawn. Draws are stateless: step `t` uses the
    seed pair `(seed, t)`, so the same model, source and seed give the same output, eagerly or in a
    `tf.function`. (A row's draw also depends on the other rows of the batch.) Sampling is never a
    default: `greedy` and `beam_search` are the ways to translate.

    Args:
        model: anything with `encode` and `decoder.step` (or `decoder.stepper()`), like a `Seq2Seq` model.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        temperature: float or float32 scalar tensor, > 0. Below 1 sharpens the distribution (it
            approaches greedy as it goes to 0), above 1 flattens it. Defaults to `1.0`.
        top_k: int or int32 scalar tensor, >= 0. Draw among the `top_k` most likely tokens only;
            `0` keeps them all, `1` is greedy. Defaults to `0`.
        seed: int or integer scalar tensor. Defaults to `0`.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.

    Returns:
        The dict of `greedy`: `ids` int32 `(batch, t_out)`, `attention` float32
        `(batch, t_out, t_in)`, `length` int32 `(batch,)`.

    Raises:
        ValueError: if `temperature` is not > 0 or `top_k` is negative, when their values are known
            while tracing (a tensor fed at run time is checked by the graph instead).
    """
    temperature = _checked_temperature(temperature)
    top_k = _checked_top_k(top_k)
    seed = tf.cast(seed, tf.int64)

    def choose(t, logits):
        logits = _only_outputs(logits)
        logits = logits - tf.reduce_max(logits, axis=-1, keepdims=True)  # max 0: no overflow below
        logits = _keep_top_k(logits / temperature, top_k)  # (batch, vocab)
        seed_pair = tf.stack([seed, tf.cast(t, tf.int64)])  # (2,)
        return tf.random.stateless_categorical(logits, 1, seed_pair, dtype=tf.int32)[:, 0]  # (batch,)

    # Not sliced: a row's draw depends on the other rows of its batch.
    return _one_or_many(_tier(model, accel), source, dataclasses.replace(config or DecodeConfig(), slices=1), choose)


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


def _can_output(vocab_ids):
    """Padding and `[START]` are never output tokens. `vocab_ids` int32 -> bool, same shape."""
    return (vocab_ids != PAD_ID) & (vocab_ids != START_ID)


def _only_outputs(logits):
    """Logits `(rows, vocab)` with -inf for the ids `_can_output` rules out."""
    allowed = _can_output(tf.range(tf.shape(logits)[-1]))  # (vocab,)
    return tf.where(allowed, logits, tf.constant(-np.inf, logits.dtype))


def _keep_top_k(logits, top_k):
    """Logits `(rows, vocab)` below each row's `top_k`-th largest become -inf; `top_k = 0` keeps all."""
    vocab = tf.shape(logits)[-1]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)
    kth = tf.math.top_k(logits, k=k).values[:, -1:]  # (rows, 1)
    return tf.where(logits < kth, tf.constant(-np.inf, logits.dtype), logits)


# -- beam search ----------------------------------------------------------------------------------

MAX_BEAM_WIDTH = 64
COVERAGE_FLOOR = 1e-10  # a source position never attended adds beta * log(1e-10), not -inf
TOP_K_BLOCKED = 1024  # from this many columns, `top_k` works by blocks
_NEG_INF = float("-inf")


class _BeamParams(typing.NamedTuple):
    """The search's settings as scalar tensors, clamped to their valid ranges."""

    beam: tf.Tensor  # int32, in [1, min(vocab, MAX_BEAM_WIDTH)]
    vocab: tf.Tensor  # int32
    alpha: tf.Tensor  # float32, length penalty, in [0, 5]
    beta: tf.Tensor  # float32, coverage penalty, in [0, 5]
    n_best: tf.Tensor  # int32, in [1, beam]


def beam_search(model, source, beam_width=4, length_penalty=0.6, coverage_penalty=0.0, n_best=None,
                config=None, accel=True):
    """Beam search of a batch of source ids, with the length and coverage penalties of GNMT.

    Sentence `b` keeps `beam` hypotheses in rows `b * beam` to `b * beam + beam - 1` of a
    `(batch * beam, ...)` decoder state. At every step each hypothesis is extended by every token
    (never padding or `[START]`), and the `beam` best of the `beam * vocab` candidates survive
    (found among each hypothesis' `beam` best extensions, which is exact), ranked by

        score(Y) = log P(Y | X) / lp(Y) + cp(X; Y)       lp(Y) = ((5 + |Y|) / 6) ** alpha
        cp(X; Y) = beta * sum_i log(min(sum_j a_ij, 1))

    where `|Y|` counts output tokens including `[END]`, `a_ij` is the attention of output step `j`
    on source position `i`, `i` runs over the source positions that are not padding, and the log is
    floored at `log(1e-10)`. Log-probabilities are `logits - logsumexp(logits)` in float32. At
    step 0 the beams are all the same, so only beam 0 is expanded (the others start at -inf). A
    hypothesis that emits `[END]` is finished: its score is frozen and it stays in the beam until
    `beam` better hypotheses push it out. At a sentence's length limit `[END]` is the only allowed
    token, as in `greedy`; the search stops when every beam of every sentence has finished. Tokens
    and attention are back-tracked through the parent beams, so every returned alignment is the
    one its own tokens were produced with.

    Args:
        model: anything with `encode(source) -> (memory, state)` and
            `decoder.step(token (rows,), state, memory) -> (logits (rows, vocab), weights
            (rows, t_in), state)`, like a `Seq2Seq` model; `memory` and `state` are nested tensors
            with batch first, and `memory["mask"]` is bool `(batch, t_in)`. A decoder with a
            `stepper()` method (returning such a step function) is stepped through it.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        beam_width: int or int32 scalar tensor. Clamped to `[1, min(vocab, 64)]`: 0 or negative
            gives 1, which is greedy search. Defaults to `4`.
        length_penalty: float or float32 scalar tensor, `alpha`. Clamped to `[0, 5]`; NaN counts
            as 0 (no length normalization). Defaults to `0.6`.
        coverage_penalty: float or float32 scalar tensor, `beta`. Clamped to `[0, 5]`; NaN counts
            as 0. Defaults to `0.0` (off).
        n_best: int or int32 scalar tensor, the hypotheses returned per sentence, clamped to
            `[1, beam]`. Defaults to `None`: the clamped beam width.
        config: `DecodeConfig` with the length limits; defaults to `DecodeConfig()`.

    Returns:
        A dict, hypotheses best first: `ids` int32 `(batch, n_best, t_out)` without `[START]`,
        `[END]` included, 0 after it; `scores` float32 `(batch, n_best)`; `attention` float32
        `(batch, n_best, t_out, t_in)`, zero rows after `[END]`; `length` int32
        `(batch, n_best)`, output tokens including `[END]`. Where fewer than `n_best` hypotheses
        can exist (with a length limit of one token, only `[END]`), the missing ones have score
        -inf, length 0, and zero ids and attention.

    Reference: Wu et al. 2016, "Google's Neural Machine Translation System", arXiv 1609.08144,
    section 7, eq. 14.
    """
    config, model = config or DecodeConfig(), _tier(model, accel)
    search = lambda rows: _beam_search(  # noqa: E731
        model, rows, beam_width, length_penalty, coverage_penalty, n_best, config)
    return _in_slices(search, source, config, _BEAM_OUTPUTS)


def _beam_search(model, source, beam_width, length_penalty, coverage_penalty, n_best, config):
    batch, t_in = tf.shape(source)[0], tf.shape(source)[1]
    limits = length_limits(source, config)  # (batch,)
    # 1. Encode, and take the first step once per sentence: every beam would read the same [START].
    memory, state = model.encode(source)
    step = _stepper(model)
    first = step(tf.fill([batch], START_ID), state, memory)  # (logits, weights, state)
    p = _beam_params(beam_width, length_penalty, coverage_penalty, n_best, vocab=tf.shape(first[0])[1])
    # 2. Give every sentence `beam` rows: (batch, ...) -> (batch * beam, ...).
    memory, first = _repeat_rows((memory, first), p.beam)
    # 3. Search; 4. back-track the n best hypotheses of every sentence.
    final, steps = _beam_loop(step, memory, first, limits, p, config.max_length)
    return _best_hypotheses(final, steps, p.n_best, t_in)


def _beam_params(beam_width, length_penalty, coverage_penalty, n_best, vocab):
    """The arguments of `beam_search` as clamped scalar tensors (see its docstring for the ranges)."""
    beam = tf.clip_by_value(tf.cast(beam_width, tf.int32), 1, tf.minimum(vocab, MAX_BEAM_WIDTH))
    n_best = beam if n_best is None else tf.clip_by_value(tf.cast(n_best, tf.int32), 1, beam)
    return _BeamParams(beam, vocab, _penalty(length_penalty), _penalty(coverage_penalty), n_best)


def _penalty(value):
    """A penalty weight as a float32 scalar: NaN -> 0, then clamped to [0, 5]."""
    value = tf.cast(value, tf.float32)
    return tf.clip_by_value(tf.where(tf.math.is_nan(value), 0.0, value), 0.0, 5.0)


def _repeat_rows(structure, beam):
    """Every tensor's rows repeated `beam` times: `(batch, ...)` -> `(batch * beam, ...)`, row `b * beam + k`."""
    return tf.nest.map_structure(lambda x: tf.repeat(x, beam, axis=0), structure)


def _rows(parents, beam):
    """Parent beams `(batch, beam)` -> their rows `(batch * beam,)` in the repeated state: `b * beam + parent`."""
    batch = tf.shape(parents)[0]
    return tf.reshape(parents + tf.range(batch)[:, None] * beam, [-1])  # (batch * beam,)


def _beam_loop(step, memory, first, limits, p, max_length):
    """Selects and steps until every beam has finished.

    Sentences whose beams have all finished leave the batch as in `greedy`: once a quarter of the
    sentences still searched are done, the others' rows are gathered into a smaller batch. What a
    finished sentence would go on writing (padding, its beams in place, zero attention) is what the
    step outputs hold for the sentences that left.

    Returns:
        The final beams' `score` and `length`, `(batch, beam)` each, and three TensorArrays over
        steps: the tokens `(batch, beam)`, parent beams `(batch, beam)` and attention
        `(batch, beam, t_in)` chosen.
    """
    logits, weights, state = first  # (batch * beam, vocab), (batch * beam, t_in), state
    batch, t_in = tf.shape(limits)[0], tf.shape(weights)[1]
    beams = _initial_beams(batch, p.beam, t_in)
    final = {"score": beams["score"], "length": beams["length"]}  # every sentence's, kept up to date
    sentences = {"place": tf.range(batch), "limit": limits}  # the sentences still searched
    steps = (tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
             tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
             tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None, None]))
    in_place = tf.tile(tf.range(p.beam)[None, :], [batch, 1])  # (batch, beam): the parents of a finished sentence

    def body(t, logits, weights, state, memory, beams, sentences, final, steps):
        mask = tf.cast(memory["mask"], tf.bool)  # (rows, t_in)
        beams, chosen = _beam_select(t, logits, weights, beams, sentences["limit"], mask, p)
        tokens, parents, attention = chosen  # (n, beam), (n, beam), (n, beam, t_in)
        places = sentences["place"][:, None]  # (n, 1)
        steps = (steps[0].write(t, tf.scatter_nd(places, tokens, [batch, p.beam])),
                 steps[1].write(t, tf.tensor_scatter_nd_update(in_place, places, parents)),
                 steps[2].write(t, tf.scatter_nd(places, attention, [batch, p.beam, t_in])))
        final = {k: tf.tensor_scatter_nd_update(final[k], places, beams[k]) for k in final}
        rows = _rows(parents, p.beam)  # (n * beam,)
        state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)  # (n * beam, ...)
        tokens = tf.reshape(tokens, [-1])  # (n * beam,)
        beams, coverage = {k: v for k, v in beams.items() if k != "coverage"}, beams["coverage"]  # by sentence, by row
        (beams, sentences), (tokens, state, memory, coverage) = _drop_finished(
            tf.reduce_all(beams["finished"], axis=1), (beams, sentences), (tokens, state, memory, coverage), p.beam)
        beams["coverage"] = coverage
        # The step after the last selection goes unused: the price of a first step of `batch` rows.
        logits, weights, state = step(tokens, state, memory)
        return t + 1, logits, weights, state, memory, beams, sentences, final, steps

    def not_finished(t, logits, weights, state, memory, beams, *_):
        return tf.logical_not(tf.reduce_all(beams["finished"]))

    loop_vars = (tf.constant(0), logits, weights, state, memory, beams, sentences, final, steps)
    invariants = _any_size(loop_vars)  # but the vocabulary's size, if known, lets `top_k` use blocks
    invariants = (invariants[0], tf.TensorShape([None, logits.shape[1]]), *invariants[2:])
    *_, final, steps = tf.while_loop(not_finished, body, loop_vars, shape_invariants=invariants,
                                     maximum_iterations=max_length)
    return final, steps


def _any_size(loop_vars):
    """Shape invariants that let every axis vary: a static batch or beam size may enter the loop,
    while the gathers inside it give unknown sizes. (A TensorArray is not constrained.)"""
    def relaxed(value):
        if isinstance(value, tf.TensorArray):
            return tf.TensorShape(None)
        return tf.TensorShape([None] * value.shape.rank)

    return tf.nest.map_structure(relaxed, loop_vars)


def _initial_beams(batch, beam, t_in):
    """Beam 0 of every sentence holds the empty hypothesis; the others start at -inf, never expanded."""
    log_prob = tf.where(tf.range(beam) == 0, 0.0, _NEG_INF)  # (beam,)
    log_prob = tf.tile(log_prob[None, :], [batch, 1])  # (batch, beam)
    return {
        "log_prob": log_prob,  # log P(Y | X), summed over the tokens so far
        "score": log_prob,  # the ranking score, frozen once finished
        "length": tf.zeros([batch, beam], tf.int32),  # output tokens, [END] included
        "finished": tf.zeros([batch, beam], tf.bool),
        "coverage": tf.zeros([batch * beam, t_in], tf.float32),  # attention summed over the steps so far
    }


def _beam_select(t, logits, weights, beams, limits, mask, p):
    """Keeps the `beam` best candidates of every sentence at step `t`.

    Returns:
        The new beams, and what was chosen: tokens `(batch, beam)`, parent beams `(batch, beam)`
        and attention `(batch, beam, t_in)` (zero for a beam that had already finished).
    """
    weights = tf.cast(weights, tf.float32)  # (batch * beam, t_in)
    tokens, log_prob, score = _candidates(t, logits, weights, beams, limits, mask, p)  # (batch, beam * beam)
    score, index = tf.math.top_k(score, k=p.beam)  # (batch, beam), best first
    parents, tokens = index // p.beam, tf.gather(tokens, index, batch_dims=1)  # (batch, beam)
    was_finished = tf.gather(beams["finished"], parents, batch_dims=1)  # (batch, beam)
    impossible = tf.equal(score, _NEG_INF)  # fewer than `beam` candidates could exist
    tokens = tf.where(was_finished | impossible, PAD_ID, tokens)
    rows = _rows(parents, p.beam)  # (batch * beam,)
    attention = tf.where(tf.reshape(was_finished, [-1, 1]), 0.0, tf.gather(weights, rows))  # (batch * beam, t_in)
    new_beams = {
        "log_prob": tf.gather(log_prob, index, batch_dims=1),  # (batch, beam)
        "score": score,
        "length": tf.where(was_finished, tf.gather(beams["length"], parents, batch_dims=1), t + 1),
        "finished": was_finished | impossible | tf.equal(tokens, END_ID),
        "coverage": tf.gather(beams["coverage"], rows) + attention,  # (batch * beam, t_in)
    }
    batch, t_in = tf.shape(parents)[0], tf.shape(weights)[1]
    attention = tf.reshape(attention, [batch, p.beam, t_in])  # (batch, beam, t_in)
    return new_beams, (tokens, parents, attention)


def _candidates(t, logits, weights, beams, limits, mask, p):
    """The `beam` best extensions of every beam: tokens, log-probabilities and scores, each
    `(batch, beam * beam)`, candidate `k` of beam `j` at `j * beam + k`.

    Within a beam the score grows with the new token's log-probability, so a sentence's `beam` best
    candidates are among its beams' `beam` best extensions: a top-k over each row's vocabulary
    replaces scoring and sorting all `beam * vocab` candidates, with the same result, ties included.
    Padding and `[START]` are never new tokens, and at the length limit only `[END]` is. A finished
    beam has a single candidate, itself followed by padding, with its frozen log-probability and score.
    """
    batch = tf.shape(limits)[0]
    logits = tf.cast(logits, tf.float32)  # (batch * beam, vocab)
    # 1. The beam + 2 best tokens of a row hold `beam` that may be output: drop padding and [START].
    values, tokens = top_k(logits, k=tf.minimum(p.beam + 2, p.vocab))  # (batch * beam, beam + 2)
    # log Z = logsumexp(logits) = best logit - log p(best token), p from one fused softmax (a single
    # pass over the logits on a CPU, where logsumexp takes four); p(best) >= 1 / vocab, so no underflow.
    p_best = tf.gather(tf.nn.softmax(logits), tokens[:, :1], batch_dims=1)  # (batch * beam, 1)
    log_z = values[:, :1] - tf.math.log(p_best)  # (batch * beam, 1)
    values, order = tf.math.top_k(tf.where(_can_output(tokens), values, _NEG_INF), k=p.beam)
    tokens = tf.gather(tokens, order, batch_dims=1)  # (batch * beam, beam)
    step = values - log_z  # log-probabilities of the new tokens
    # 2. At a sentence's length limit [END] is the only candidate.
    first = tf.range(p.beam) == 0  # (beam,): where a single candidate goes
    at_limit = tf.repeat(t + 1 >= limits, p.beam)[:, None]  # (batch * beam, 1)
    end_step = tf.gather(logits, [END_ID], axis=1) - log_z  # (batch * beam, 1)
    tokens = tf.where(at_limit, tf.where(first, END_ID, PAD_ID), tokens)
    step = tf.where(at_limit, tf.where(first, end_step, _NEG_INF), step)
    # 3. Scores.
    old_log_prob = tf.reshape(beams["log_prob"], [-1, 1])  # (batch * beam, 1)
    log_prob = old_log_prob + step  # (batch * beam, beam)
    coverage = _coverage_penalty(beams["coverage"] + weights, mask, p.beta)[:, None]  # (batch * beam, 1)
    score = log_prob / _length_penalty(t + 1, p.alpha) + coverage
    # 4. A finished beam carries itself over.
    finished = tf.reshape(beams["finished"], [-1, 1])  # (batch * beam, 1)
    tokens = tf.where(finished, PAD_ID, tokens)
    log_prob = tf.where(finished, tf.where(first, old_log_prob, _NEG_INF), log_prob)
    score = tf.where(finished, tf.where(first, tf.reshape(beams["score"], [-1, 1]), _NEG_INF), score)
    flat = [batch, p.beam * p.beam]
    return tf.reshape(tokens, flat), tf.reshape(log_prob, flat), tf.reshape(score, flat)


def top_k(x, k):
    """`tf.math.top_k(x, k)` for float `x (rows, n)` and `k <= n`: the same values and indices, ties to
    the lower index, in two passes when `n >= TOP_K_BLOCKED` is known while tracing.

    TopK on a CPU costs about 1.3 ns per element for any `k > 1` (1.7 ms for beam 4's 256 rows of
    5,000 logits); a max costs a tenth. So the columns are cut into blocks of about `sqrt(2n)`, the
    `k` blocks with the highest maxima are kept (ties to the lower block), and TopK runs over them
    alone, in column order (0.6 ms). It is exact: a block left out has `k` kept blocks whose maxima
    come before every element in it (higher, or equal in a lower block, so at a lower index).
    """
    n = x.shape[-1]
    if n is None or n < TOP_K_BLOCKED:
        return tf.math.top_k(x, k)
    size = _block_size(n)
    rows, n_blocks = tf.shape(x)[0], -(-n // size)
    if n_blocks * size > n:  # pad the last block; padding loses every tie, being at higher indices
        x = tf.pad(x, [[0, 0], [0, n_blocks * size - n]], constant_values=_NEG_INF)
    blocks = tf.reshape(x, [rows, n_blocks, size])  # (rows, n_blocks, size)
    kept = tf.minimum(k, n_blocks)
    _, best = tf.math.top_k(tf.reduce_max(blocks, axis=-1), kept)  # (rows, kept)
    best = tf.sort(best, axis=-1)  # column order, so that TopK below breaks ties as over all of x
    candidates = tf.reshape(tf.gather(blocks, best, batch_dims=1), [rows, kept * size])
    values, position = tf.math.top_k(candidates, k)  # (rows, k)
    return values, tf.gather(best, position // size, batch_dims=1) * size + position % size


def _block_size(n):
    """The divisor of `n` nearest `sqrt(2n)` (measured best at 5,000) if one lies within a factor
    of two of it, else `sqrt(2n)` rounded up, with the last block padded."""
    target = (2 * n) ** 0.5
    divisors = [d for d in range(int(target / 2) + 1, int(2 * target) + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else int(np.ceil(target))


def _length_penalty(length, alpha):
    """GNMT's `lp(Y) = ((5 + |Y|) / 6) ** alpha`."""
    return ((5.0 + tf.cast(length, tf.float32)) / 6.0) ** alpha


def _coverage_penalty(coverage, mask, beta):
    """GNMT's `beta * sum_i log(min(coverage_i, 1))` over real source positions: `(rows, t_in)` -> `(rows,)`."""
    logs = tf.math.log(tf.clip_by_value(coverage, COVERAGE_FLOOR, 1.0))  # (rows, t_in)
    return beta * tf.reduce_sum(tf.where(mask, logs, 0.0), axis=1)  # (rows,)


def _best_hypotheses(beams, steps, n_best, t_in):
    """The `n_best` final beams of every sentence, best first, back-tracked to their tokens and attention."""
    scores, order = tf.math.top_k(beams["score"], k=n_best)  # (batch, n_best)
    ids, attention = _backtrack(steps, order, t_in)  # (batch, n_best, t_out), (batch, n_best, t_out, t_in)
    real = scores > _NEG_INF  # (batch, n_best): False for hypotheses that could not exist
    return {
        "ids": tf.where(real[:, :, None], ids, PAD_ID),
        "scores": scores,
        "attention": tf.where(real[:, :, None, None], attention, 0.0),
        "length": tf.where(real, tf.gather(beams["length"], order, batch_dims=1), 0),
    }


def _backtrack(steps, order, t_in):
    """Follows every hypothesis from its final beam back to step 0 through the parent beams.

    Args:
        steps: TensorArrays of tokens `(batch, beam)`, parents `(batch, beam)`, attention
            `(batch, beam, t_in)`, one element per step.
        order: int32 `(batch, n_best)`, the final beams of the hypotheses.

    Returns:
        ids int32 `(batch, n_best, t_out)` and attention float32 `(batch, n_best, t_out, t_in)`.
    """
    tokens_ta, parents_ta, attention_ta = steps
    size = tokens_ta.size()
    ids_out = tf.TensorArray(tf.int32, size=size, element_shape=[None, None])
    attention_out = tf.TensorArray(tf.float32, size=size, element_shape=[None, None, None])

    def body(t, beam, ids_out, attention_out):  # beam: (batch, n_best), each hypothesis' beam at step t
        ids_out = ids_out.write(t, tf.gather(tokens_ta.read(t), beam, batch_dims=1))  # (batch, n_best)
        attention_t = tf.gather(attention_ta.read(t), beam, batch_dims=1)  # (batch, n_best, t_in)
        parent = tf.gather(parents_ta.read(t), beam, batch_dims=1)  # (batch, n_best)
        return t - 1, parent, ids_out, attention_out.write(t, attention_t)

    loop_vars = (size - 1, order, ids_out, attention_out)
    _, _, ids_out, attention_out = tf.while_loop(lambda t, *_: t >= 0, body, loop_vars)
    batch, n_best = tf.shape(order)[0], tf.shape(order)[1]
    ids = _stack_steps(ids_out, [1, 2, 0], [batch, n_best, 0])  # (batch, n_best, t_out)
    attention = _stack_steps(attention_out, [1, 2, 0, 3], [batch, n_best, 0, t_in])  # (batch, n_best, t_out, t_in)
    return ids, attention


def make_beam_fn(model, config=None):
    """A `tf.function` of `beam_search` that never retraces for new shapes or beam widths.

    Its arguments are `source` int32 `(batch, t_in)`, `beam_width` int32 `()` and `length_penalty`
    float32 `()`; it returns the dict of `beam_search` (with `n_best` = the beam width, no
    coverage penalty).
    """
    config = config or DecodeConfig()

    @tf.function(input_signature=[
        tf.TensorSpec([None, None], tf.int32, name="source"),
        tf.TensorSpec([], tf.int32, name="beam_width"),
        tf.TensorSpec([], tf.float32, name="length_penalty"),
    ])
    def beam_fn(source, beam_width, length_penalty):
        return beam_search(model, source, beam_width, length_penalty, config=config)

    return beam_fn
