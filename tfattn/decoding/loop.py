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
never emits `[END]` still stops. The strategies are in `tfattn.decoding.strategies`. The loop knows
a step function, a strategy and the length limits, nothing else; the fast tier's loop, with its
batch machinery, is `tfattn.accel.decoding`.
"""

import dataclasses

import tensorflow as tf

from tfattn.ids import START_ID


@dataclasses.dataclass
class DecodeConfig:
    """Output length limits: `min(max_length, ratio * source_length + extra)` tokens, `[END]` included.

    Attributes:
        max_length: hard upper bound on output tokens.
        ratio: output tokens allowed per source token.
        extra: output tokens allowed on top.
    """

    max_length: int = 64
    ratio: float = 2.0
    extra: int = 10

    def __post_init__(self):
        if not isinstance(self.max_length, int) or isinstance(self.max_length, bool) or self.max_length < 1:
            raise ValueError(f"max_length must be an int >= 1. Received: max_length={self.max_length!r}")


def source_ids(source):
    """`source` as int32 ids `(batch, t_in)`: any integer array or tensor is cast, anything else refused."""
    source = tf.convert_to_tensor(source)
    if not source.dtype.is_integer:
        raise ValueError(f"source must hold integer token ids. Received: source with dtype {source.dtype.name}")
    if source.shape.rank not in (None, 2):
        raise ValueError(f"source must have shape (batch, t_in). Received: source.shape={tuple(source.shape)}")
    return tf.cast(source, tf.int32)


def length_limits(source, config):
    """Per-sentence output length limits `(batch,)` int32 from source ids `(batch, t_in)`."""
    t_src = tf.math.count_nonzero(source, axis=1, dtype=tf.int32)  # (batch,)
    limit = tf.cast(config.ratio * tf.cast(t_src, tf.float32), tf.int32) + config.extra
    return tf.minimum(limit, config.max_length)


def dynamic_decode(model, source, strategy, config=None):
    """Decodes a batch of source ids with a search strategy.

    Args:
        model: anything with `encode(source) -> (memory, state)` and a `decoder` with `vocab_size`
            and `step(token (rows,), state, memory) -> (logits (rows, vocab), weights (rows, t_in),
            state)`, like a `Seq2Seq` model; `memory` and `state` are nested tensors, rows first.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        strategy: a `Greedy`, `Sampling` or `BeamSearch` of `tfattn.decoding.strategies`.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.

    Returns:
        The dict of `strategy.finalize`.
    """
    config = config or DecodeConfig()
    check_steps(model.decoder, config)
    source = source_ids(source)
    t_in = tf.shape(source)[1]
    strategy = strategy.with_vocab(model.decoder.vocab_size)
    # 1. Encode; every sentence gets `beam` rows: (batch, ...) -> (batch * beam, ...), row b * beam + k.
    memory, state = beam_rows(strategy, model.encode(source))
    # 2. Step and select until every hypothesis has finished; 3. the outputs, from every step's choices.
    final, steps = decode_loop(model.decoder.step, strategy, (memory, state), length_limits(source, config),
                               source != 0, config.max_length)
    return strategy.finalize(final, steps, t_in)


def check_steps(decoder, config):
    """Refuses a `config.max_length` beyond the steps a decoder can take (a Transformer decoder's
    key/value cache has `max_length` positions); RNN decoders have no such bound."""
    steps = getattr(decoder, "max_length", None)
    if steps is not None and config.max_length > steps:
        raise ValueError(
            f"DecodeConfig.max_length must be at most the decoder's max_length ({steps}: its key/value cache "
            f"and positions cover that many steps). Received: max_length={config.max_length}")


def beam_rows(strategy, nested):
    """Nested tensors `(batch, ...)` -> `(batch * beam, ...)`, sentence `b` in rows `b * beam + k`."""
    if not isinstance(strategy.beam, tf.Tensor):  # greedy search and sampling: one row per sentence
        return nested
    return tf.nest.map_structure(lambda x: tf.repeat(x, strategy.beam, axis=0), nested)


def decode_loop(step, strategy, encoded, limits, mask, max_length):
    """The loop: returns the final search state and the steps' choices (TensorArrays of tokens
    `(batch, beam)`, parents `(batch, beam)`, attention `(batch, beam, t_in)`).

    Args:
        step: `(token (rows,), state, memory) -> (logits, weights, state)`, e.g. `Decoder.step`.
        strategy: the strategy, clamped to the vocabulary (`with_vocab`).
        encoded: `(memory, state)`, nested tensors of `batch * beam` rows.
        limits: int32 `(batch,)`, each sentence's output length limit. mask: bool `(batch, t_in)`.
        max_length: int, the loop's bound.
    """
    memory, state = encoded
    tokens = tf.fill([tf.shape(limits)[0] * strategy.beam], START_ID)  # (batch * beam,)
    search = strategy.initialize(tf.shape(limits)[0], tf.shape(mask)[1])
    steps = step_arrays()

    def body(t, tokens, state, search, steps):
        # a. One decoder step for every hypothesis.
        logits, weights, state = step(tokens, state, memory)  # (batch * beam, vocab), (batch * beam, t_in)
        # b. The strategy's choices: tokens and parents (batch, beam), attention (batch, beam, t_in).
        search, chosen = strategy.select(t, logits, weights, search, limits, mask)
        tokens, parents, _ = chosen
        steps = tuple(array.write(t, value) for array, value in zip(steps, chosen))
        # c. Each hypothesis continues from its parent's state.
        state = tf.nest.map_structure(lambda x: tf.gather(x, parent_rows(parents, strategy.beam)), state)
        return t + 1, tf.reshape(tokens, [-1]), state, search, steps

    def not_finished(t, tokens, state, search, steps):
        return tf.logical_not(tf.reduce_all(search["finished"]))

    loop_vars = (tf.constant(0), tokens, state, search, steps)
    *_, search, steps = tf.while_loop(not_finished, body, loop_vars, shape_invariants=shape_invariants(loop_vars),
                                      maximum_iterations=max_length)
    return search, steps


def shape_invariants(loop_vars):
    """What may change from one step to the next: the rows of the model's state, every axis of the
    strategy's tensors (sentences, beams). With a Python `beam_width` and a source of static shape,
    their sizes are known before the loop and unknown after a step's gathers."""
    t, tokens, state, search, steps = loop_vars
    rows = lambda x: tf.TensorShape([None, *x.shape[1:]])  # noqa: E731
    unknown = lambda x: tf.TensorShape([None] * x.shape.rank)  # noqa: E731
    return (t.shape, tf.TensorShape([None]), tf.nest.map_structure(rows, state),
            tf.nest.map_structure(unknown, search), tuple(tf.TensorShape(None) for _ in steps))


def step_arrays():
    """Empty TensorArrays for every step's tokens, parents and attention."""
    return (tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
            tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None]),
            tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None, None]))


def parent_rows(parents, beam):
    """The rows `(n * beam,)` each hypothesis continues from, for its parents `(n, beam)`."""
    return tf.reshape(parents + tf.range(tf.shape(parents)[0])[:, None] * beam, [-1])
