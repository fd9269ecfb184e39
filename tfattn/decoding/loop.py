"""The one decoding loop, shared by greedy search, sampling and beam search.

    memory, state = model.encode(source)
    give every sentence `beam` rows (1 for greedy search and sampling); tokens = [START]
    until every hypothesis has finished:
        logits, weights, state = decoder.step(tokens, state, memory)
        tokens, parents = strategy.select(logits, ...)   # and the attention each choice was made with
        state = the parents' state
    outputs = strategy.finalize(...)                     # beam search back-tracks through the parents

Each sentence's length limit grows with its source: `min(max_length, ratio * t_src + extra)`, where
`t_src` counts its source tokens; at the limit the only token allowed is `[END]`, so a model that
never emits `[END]` still stops. The strategies are in `tfattn.decoding.strategies`.

With `compaction` (the fast tier, `tfattn.accel.decoding.Compaction`), sentences whose hypotheses
have all finished leave the batch, and their choices are put back in their places; the outputs are
the same.
"""

import dataclasses

import tensorflow as tf

from tfattn.data.text import START_ID


@dataclasses.dataclass
class DecodeConfig:
    """Output length limits: `min(max_length, ratio * source_length + extra)` tokens, `[END]` included.

    Attributes:
        max_length: hard upper bound on output tokens.
        ratio: output tokens allowed per source token.
        extra: output tokens allowed on top.
        slices: the fast tier decodes a batch of at least `slices * 16` sentences as this many row
            slices, independent loops that TensorFlow runs at the same time
            (`tfattn.accel.decoding.in_slices`); the outputs are the same. `1` turns it off.
            Defaults to `2`, one per core of a 2-core CPU.
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


def dynamic_decode(model, source, strategy, config=None, compaction=None):
    """Decodes a batch of source ids with a search strategy.

    Args:
        model: anything with `encode(source) -> (memory, state)` and a `decoder` with `vocab_size`
            and `step(token (rows,), state, memory) -> (logits (rows, vocab), weights (rows, t_in),
            state)`, like a `Seq2Seq` model; `memory` and `state` are nested tensors, rows first. A
            decoder with a `stepper()` method (the fast tier's) is stepped through what it returns.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        strategy: a `Greedy`, `Sampling` or `BeamSearch` of `tfattn.decoding.strategies`.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.
        compaction: optional `tfattn.accel.decoding.Compaction` class: finished sentences leave the batch.

    Returns:
        The dict of `strategy.finalize`.
    """
    config = config or DecodeConfig()
    source = tf.convert_to_tensor(source, tf.int32)
    batch, t_in = tf.shape(source)[0], tf.shape(source)[1]
    strategy = strategy.with_vocab(model.decoder.vocab_size)
    # 1. Encode; every sentence gets `beam` rows: (batch, ...) -> (batch * beam, ...), row b * beam + k.
    memory, state = model.encode(source)
    if isinstance(strategy.beam, tf.Tensor):  # (greedy search and sampling: one row per sentence)
        memory, state = tf.nest.map_structure(lambda x: tf.repeat(x, strategy.beam, axis=0), (memory, state))
    # 2. Step and select until every hypothesis has finished; 3. the outputs, from every step's choices.
    sentences = {"place": tf.range(batch), "limit": length_limits(source, config), "mask": source != 0}
    search = strategy.initialize(batch, t_in)
    if compaction is not None:
        compaction = compaction(batch, strategy.beam, t_in)
    final, steps = _loop(stepper_of(model), strategy, memory, state, search, sentences, config.max_length, compaction)
    return strategy.finalize(final, steps, t_in)


def _loop(step, strategy, memory, state, search, sentences, max_length, compaction):
    """`dynamic_decode`'s loop: returns every sentence's final search state and the steps' choices
    (TensorArrays of tokens `(batch, beam)`, parents `(batch, beam)`, attention `(batch, beam, t_in)`)."""
    tokens = tf.fill([tf.shape(sentences["limit"])[0] * strategy.beam], START_ID)  # (batch * beam,)
    steps = (tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
             tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
             tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None, None]))

    def body(t, tokens, state, memory, search, sentences, final, steps):
        # a. One decoder step for every hypothesis still searched.
        logits, weights, state = step(tokens, state, memory)  # (n * beam, vocab), (n * beam, t_in)
        # b. The strategy's choices: tokens and parents (n, beam), attention (n, beam, t_in).
        search, chosen = strategy.select(t, logits, weights, search, sentences["limit"], sentences["mask"])
        tokens, parents, _ = chosen
        if compaction is None:
            final = search
        else:  # the choices go to the sentences' places in the batch
            chosen, final = compaction.record(sentences["place"], chosen, search, final)
        steps = tuple(array.write(t, value) for array, value in zip(steps, chosen))
        # c. Each hypothesis continues from its parent's state.
        if isinstance(strategy.beam, tf.Tensor):
            rows = tf.reshape(parents + tf.range(tf.shape(parents)[0])[:, None] * strategy.beam, [-1])  # (n * beam,)
            state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
        tokens = tf.reshape(tokens, [-1])  # (n * beam,)
        # d. Fast tier: finished sentences leave the batch.
        if compaction is not None:
            (search, sentences), (tokens, state, memory) = compaction.drop(
                tf.reduce_all(search["finished"], axis=1), (search, sentences), (tokens, state, memory))
        return t + 1, tokens, state, memory, search, sentences, final, steps

    def not_finished(t, tokens, state, memory, search, *_):
        return tf.logical_not(tf.reduce_all(search["finished"]))

    loop_vars = (tf.constant(0), tokens, state, memory, search, sentences, search, steps)
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


def stepper_of(model):
    """The decoder's step function: `decoder.stepper()` (weights read once) if it has one, else `decoder.step`."""
    stepper = getattr(model.decoder, "stepper", None)
    return stepper() if stepper is not None else model.decoder.step
