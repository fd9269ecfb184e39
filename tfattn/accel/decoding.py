"""The decoding loop's fast tier: its own loop, where finished sentences leave the batch, row
slices, a loop of its own for one sentence, a cheaper greedy choice, a two-pass top-k.

`decode` is the fast tier's `tfattn.decoding.loop.dynamic_decode`, with the same outputs:
- `decode_one` replaces the loop's batch bookkeeping (finished flags, parents, padding after
  `[END]`) for a batch of one sentence, the shape a server answers most: its loop carries only the
  step, the token and the state, and stops at `[END]`; the sentence has no padding to mask. The
  branch between it and the batch loop costs nothing for the side not taken (`tfattn.accel.branch`).
- `Compaction` replaces stepping every sentence until the slowest one ends: once a quarter of the
  sentences still decoded are done, the others' rows are gathered into a smaller batch, and each
  step's choices are scattered back to the sentences' places. Each sentence's arithmetic is its
  own, so the outputs are those of the plain loop; the time is that of the unfinished sentences.
- `in_slices` replaces one loop over a batch with loops over row slices: a decoding loop is a chain
  of small ops, and TensorFlow runs independent chains at the same time, one per core.
- `FastGreedy` masks padding and `[START]` out of the logits only in the rare step where one of
  them wins the argmax (`output_argmax`); `FastBeamSearch` replaces `tf.math.top_k` over a beam's
  rows of logits with an exact two-pass search (`top_k`): TopK costs about the same per element for
  any k > 1 on a CPU, while a max costs a tenth.

`tfattn.search` calls `decode` (through the door, `tfattn.accel.seq2seq`) when the fast tier is
on; tests check that every output equals the reference loop's.
"""

import numpy as np
import tensorflow as tf

from tfattn.accel import branch
from tfattn.ids import END_ID, PAD_ID, START_ID
from tfattn.decoding.loop import beam_rows, length_limits, parent_rows, source_ids, step_arrays
from tfattn.decoding.strategies import BeamSearch, Greedy, Sampling

MIN_SLICE_ROWS = 16  # a batch is sliced when every slice gets at least this many rows
ROW_SLICES = 2  # loops run at once on a large batch, one per core of a 2-core CPU; outputs do not depend on it
TOP_K_BLOCKED = 1024  # from this many columns, `top_k` works by blocks


def decode(model, source, strategy, config, slices=ROW_SLICES):
    """`tfattn.decoding.loop.dynamic_decode(model, source, strategy, config)` by the fast tier.

    Args:
        model: has `encode(source)` and a `decoder` with `vocab_size` and `step` (a
            `tfattn.accel.seq2seq.Stepping`, whose `decoder.stepper()` reads the weights once).
        slices: int. Row slices of a large batch, decoded at once. Defaults to `ROW_SLICES`.
    """
    source, strategy = source_ids(source), fast_strategy(strategy)
    batch = lambda rows: compacted_decode(model, rows, strategy, config)  # noqa: E731
    time_axes = _BEAM_TIME_AXES if isinstance(strategy, BeamSearch) else _GREEDY_TIME_AXES
    return branch.cond(tf.shape(source)[0] == 1, lambda: _one_sentence(model, source, strategy, config),
                       lambda: in_slices(batch, source, slices, time_axes))


_GREEDY_TIME_AXES = {"ids": 1, "attention": 1, "length": None}  # each output's output-time axis
_BEAM_TIME_AXES = {"ids": 2, "scores": None, "attention": 2, "length": None}


def _one_sentence(model, source, strategy, config):
    """One sentence: a loop of its own for greedy search and sampling, the batch loop for beam search."""
    if isinstance(strategy, BeamSearch):
        return compacted_decode(model, source, strategy, config)
    return decode_one(model, source, strategy.choose, length_limits(source, config), config.max_length,
                      step_function(model))


def encode_unpadded(model, source):
    """`model.encode(source)` for a source without padding: a model that has `encode_unpadded` (the
    fast tier's `Stepping`: its encoder then reads no mask and its memory holds none) encodes so;
    another model encodes as it does."""
    unpadded = getattr(model, "encode_unpadded", None)
    return model.encode(source) if unpadded is None else unpadded(source)


def step_function(model):
    """The decoder's step: `decoder.stepper()` (the fast tier's, weights read once) if it has one."""
    stepper = getattr(model.decoder, "stepper", None)
    return stepper() if stepper is not None else model.decoder.step


class FastGreedy(Greedy):
    """`Greedy` whose choice masks padding and `[START]` only when one of them wins (`output_argmax`)."""

    def choose(self, t, logits):
        return output_argmax(logits)


class FastBeamSearch(BeamSearch):
    """`BeamSearch` with the exact two-pass `top_k` over each row's vocabulary."""

    def top_k(self, x, k):
        return top_k(x, k)


def fast_strategy(strategy):
    """The fast tier's version of a reference strategy, with the same settings (sampling as it is)."""
    if isinstance(strategy, (Sampling, FastGreedy, FastBeamSearch)):
        return strategy
    kind = {Greedy: FastGreedy, BeamSearch: FastBeamSearch}.get(type(strategy))
    if kind is None:
        return strategy
    fast = kind.__new__(kind)
    fast.__dict__.update(strategy.__dict__)
    return fast


def compacted_decode(model, source, strategy, config):
    """The reference loop's decoding of a batch, where sentences whose hypotheses have all finished
    leave the batch (`Compaction`): the same outputs, the dict of `strategy.finalize`."""
    batch, t_in = tf.shape(source)[0], tf.shape(source)[1]
    strategy = strategy.with_vocab(model.decoder.vocab_size)
    memory, state = beam_rows(strategy, model.encode(source))
    sentences = {"place": tf.range(batch), "limit": length_limits(source, config), "mask": source != 0}
    compaction = Compaction(batch, strategy.beam, t_in)
    final, steps = _compacted_loop(step_function(model), strategy, (memory, state), sentences,
                                   config.max_length, compaction)
    return strategy.finalize(final, steps, t_in)


def _compacted_loop(step, strategy, encoded, sentences, max_length, compaction):
    """`tfattn.decoding.loop.decode_loop` with `Compaction`: the same search states and choices."""
    memory, state = encoded
    tokens = tf.fill([tf.shape(sentences["limit"])[0] * strategy.beam], START_ID)  # (batch * beam,)
    search = strategy.initialize(tf.shape(sentences["limit"])[0], tf.shape(sentences["mask"])[1])

    def body(t, tokens, state, memory, search, sentences, final, steps):
        logits, weights, state = step(tokens, state, memory)  # (n * beam, vocab), (n * beam, t_in)
        search, chosen = strategy.select(t, logits, weights, search, sentences["limit"], sentences["mask"])
        tokens, parents, _ = chosen  # (n, beam) each
        placed, final = compaction.record(sentences["place"], chosen, search, final)  # at their places
        steps = tuple(array.write(t, value) for array, value in zip(steps, placed))
        if isinstance(strategy.beam, tf.Tensor):  # each hypothesis continues from its parent's state
            state = tf.nest.map_structure(lambda x: tf.gather(x, parent_rows(parents, strategy.beam)), state)
        tokens = tf.reshape(tokens, [-1])  # (n * beam,)
        (search, sentences), (tokens, state, memory) = compaction.drop(
            tf.reduce_all(search["finished"], axis=1), (search, sentences), (tokens, state, memory))
        return t + 1, tokens, state, memory, search, sentences, final, steps

    def not_finished(t, tokens, state, memory, search, *_):
        return tf.logical_not(tf.reduce_all(search["finished"]))

    loop_vars = (tf.constant(0), tokens, state, memory, search, sentences, search, step_arrays())
    *_, final, steps = tf.while_loop(not_finished, body, loop_vars, shape_invariants=any_size(loop_vars),
                                     maximum_iterations=max_length)
    return final, steps


def any_size(loop_vars):
    """Shape invariants that let every axis vary: the rows change when sentences leave the batch.
    (A TensorArray is not constrained.)"""
    def relaxed(value):
        if isinstance(value, tf.TensorArray):
            return tf.TensorShape(None)
        return tf.TensorShape([None] * value.shape.rank)

    return tf.nest.map_structure(relaxed, loop_vars)


def output_argmax(logits):
    """The most likely output token of each row of float `logits (rows, vocab)`, padding and
    `[START]` excluded: `(rows,)` int32. The plain argmax unless one of them wins it (masking them
    cannot change an argmax that is neither), else the argmax with them masked."""
    token = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (rows,)

    def masked():
        reserved = (tf.range(tf.shape(logits)[-1]) == PAD_ID) | (tf.range(tf.shape(logits)[-1]) == START_ID)
        return tf.argmax(tf.where(reserved, float("-inf"), logits), axis=-1, output_type=tf.int32)

    chosen = tf.cond(tf.reduce_any((token == PAD_ID) | (token == START_ID)), masked, lambda: token)
    chosen.set_shape(token.shape)  # as static as the argmax's: a loop's token keeps its shape
    return chosen


def decode_one(model, source, choose, limit, max_length, step):
    """`tfattn.decoding.loop.dynamic_decode` of one sentence `(1, t_in)` by greedy search or
    sampling, with the same outputs (`ids`, `attention`, `length`).

    The sentence's padding, if it has any, is cut before it is encoded, so the encoder and every
    step's attention have none to mask (`encode_unpadded`); its attention is padded back to `t_in`
    positions with zeros, the weights padding gets.

    Args:
        model: has `encode(source) -> (memory, state)`. choose: the strategy's `choose(t, logits)`.
        limit: `(1,)` int32, the sentence's output length limit. max_length: int, the loop's bound.
        step: the decoder's step function, `(token, state, memory) -> (logits, weights, state)`.
    """
    t_in = tf.shape(source)[1]
    t_src = tf.math.count_nonzero(source[0], dtype=tf.int32)  # its tokens, before the padding
    memory, state = encode_unpadded(model, source[:, :t_src])  # (1, t_src)
    limit = limit[0]  # a scalar
    ids = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[1])
    attention = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[1, None])

    def body(t, token, state, ids, attention):
        logits, weights, state = step(token, state, memory)  # (1, vocab), (1, t_in)
        token = tf.reshape(choose(t, tf.cast(logits, tf.float32)), [1])  # (1,), however the rows are known
        token = tf.where(t + 1 >= limit, END_ID, token)  # the last allowed token is [END]
        return t + 1, token, state, ids.write(t, token), attention.write(t, tf.cast(weights, tf.float32))

    loop_vars = (tf.constant(0), tf.fill([1], START_ID), state, ids, attention)
    *_, ids, attention = tf.while_loop(lambda t, token, *_: token[0] != END_ID, body, loop_vars,
                                       maximum_iterations=max_length)
    ids = tf.transpose(ids.stack())  # (1, t_out)
    attention = tf.transpose(attention.stack(), [1, 0, 2])  # (1, t_out, t_src)
    return {"ids": ids, "attention": tf.pad(attention, [[0, 0], [0, 0], [0, t_in - t_src]]),  # (1, t_out, t_in)
            "length": tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)}  # (1,)


class Compaction:
    """Finished sentences leave the batch of `tfattn.decoding.loop.dynamic_decode`.

    Args:
        batch: the number of sentences. beam: hypotheses per sentence. t_in: source positions.
    """

    def __init__(self, batch, beam, t_in):
        self.batch, self.beam, self.t_in = batch, beam, t_in
        self.in_place = tf.tile(tf.range(beam)[None, :], [batch, 1])  # (batch, beam): a finished sentence's parents

    def record(self, places, chosen, search, final):
        """The choices `(n, beam, ...)` of the sentences still searched, at their `places (n,)` in the
        batch (padding, parents in place and zero attention for the others), and every sentence's
        final search state with theirs updated."""
        tokens, parents, attention = chosen
        places = places[:, None]  # (n, 1)
        chosen = (tf.scatter_nd(places, tokens, [self.batch, self.beam]),
                  tf.tensor_scatter_nd_update(self.in_place, places, parents),
                  tf.scatter_nd(places, attention, [self.batch, self.beam, self.t_in]))
        return chosen, {k: _scatter_update(final[k], places, search[k]) for k in final}

    def drop(self, done, by_sentence, by_row):
        """What belongs to the sentences not `done (n,)`, gathered when `worth_dropping`: nested
        tensors `(n, ...)` and nested tensors of rows `(n * beam, ...)`, sentence `b` in rows
        `b * beam` to `b * beam + beam - 1`."""
        def keep():
            kept = tf.cast(tf.where(~done)[:, 0], tf.int32)  # (m,)
            rows = tf.reshape(kept[:, None] * self.beam + tf.range(self.beam)[None, :], [-1])  # (m * beam,)
            return (tf.nest.map_structure(lambda x: tf.gather(x, kept), by_sentence),
                    tf.nest.map_structure(lambda x: tf.gather(x, rows), by_row))

        return tf.cond(worth_dropping(done), keep, lambda: (by_sentence, by_row))


def worth_dropping(done):
    """Whether to gather what is not `done (n,)`: once a quarter is done, and not all (the loop stops
    then). A gather costs about as much as a step, so it waits until it saves several."""
    n_done = tf.reduce_sum(tf.cast(done, tf.int32))
    return (4 * n_done >= tf.size(done)) & (n_done < tf.size(done))


def in_slices(decode, source, slices, time_axes):
    """`decode(source)`, run on `slices` row slices of the batch at once.

    A batch of `slices * MIN_SLICE_ROWS` sentences or more is cut into `slices` slices of rows
    `batch * i // slices` to `batch * (i + 1) // slices`; a smaller one is decoded whole, by the
    first slice's loop. Each sentence's output does not depend on the other rows, so the slices'
    outputs, padded along their output-time axes to the longest and put back together, are those of
    one loop over the batch.

    Args:
        decode: `source rows -> dict of tensors`, batch first.
        time_axes: `{name: output-time axis or None}` for the dict `decode` returns.
    """
    source = source_ids(source)
    if slices <= 1:
        return decode(source)
    batch = tf.shape(source)[0]
    sliced = batch >= slices * MIN_SLICE_ROWS
    bounds = [batch * i // slices for i in range(slices + 1)]
    first = decode(source[:tf.where(sliced, bounds[1], batch)])

    def the_others():
        outs = [first] + [decode(source[bounds[i]:bounds[i + 1]]) for i in range(1, slices)]
        return {k: _concat_padded([out[k] for out in outs], axis) for k, axis in time_axes.items()}

    return tf.cond(sliced, the_others, lambda: first)


def _concat_padded(tensors, axis):
    """Concatenates along axis 0 after zero-padding `axis` (if any) to the largest size."""
    if axis is not None:
        size = tf.reduce_max([tf.shape(x)[axis] for x in tensors])
        after = lambda x: [[0, 0]] * (x.shape.rank - axis - 1)  # noqa: E731
        tensors = [tf.pad(x, [[0, 0]] * axis + [[0, size - tf.shape(x)[axis]]] + after(x)) for x in tensors]
    return tf.concat(tensors, axis=0)


def top_k(x, k):
    """`tf.math.top_k(x, k)` for float `x (rows, n)` and `k <= n`: the same values and indices, ties to
    the lower index, in two passes when `n >= TOP_K_BLOCKED` is known while tracing.

    The columns are cut into blocks of about `sqrt(2n)`, the `k` blocks with the highest maxima are
    kept (ties to the lower block), and TopK runs over them alone, in column order. It is exact: a
    block left out has `k` kept blocks whose maxima come before every element in it (higher, or
    equal in a lower block, so at a lower index).
    """
    n = x.shape[-1]
    if n is None or n < TOP_K_BLOCKED:
        return tf.math.top_k(x, k)
    size = _block_size(n)
    rows, n_blocks = tf.shape(x)[0], -(-n // size)
    if n_blocks * size > n:  # pad the last block; padding loses every tie, being at higher indices
        x = tf.pad(x, [[0, 0], [0, n_blocks * size - n]], constant_values=float("-inf"))
    blocks = tf.reshape(x, [rows, n_blocks, size])  # (rows, n_blocks, size)
    kept = tf.minimum(k, n_blocks)
    _, best = tf.math.top_k(tf.reduce_max(blocks, axis=-1), kept)  # (rows, kept)
    best = tf.sort(best, axis=-1)  # column order, so that TopK below breaks ties as over all of x
    candidates = tf.reshape(tf.gather(blocks, best, batch_dims=1), [rows, kept * size])  # (rows, kept * size)
    values, position = tf.math.top_k(candidates, k)  # (rows, k)
    return values, tf.gather(best, position // size, batch_dims=1) * size + position % size


def _block_size(n):
    """The divisor of `n` nearest `sqrt(2n)` if one lies within a factor of two of it, else `sqrt(2n)`
    rounded up, with the last block padded."""
    target = (2 * n) ** 0.5
    divisors = [d for d in range(int(target / 2) + 1, int(2 * target) + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else int(np.ceil(target))


def _scatter_update(tensor, places, updates):
    """`tf.tensor_scatter_nd_update`, with bool tensors scattered as int64: TensorFlow's GPU kernels
    of that op take no bool, and a node without one would run on the host at every step."""
    if tensor.dtype != tf.bool:
        return tf.tensor_scatter_nd_update(tensor, places, updates)
    return tf.tensor_scatter_nd_update(tf.cast(tensor, tf.int64), places, tf.cast(updates, tf.int64)) > 0
