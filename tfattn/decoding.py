"""Decoding inside `tf.function`: greedy search, batched, with the attention weights of every step.

    memory, state = model.encode(source)
    token = [START]
    repeat until every sentence has emitted [END] or reached its length limit:
        logits, weights, state = decoder.step(token, state, memory)
        token = argmax(logits)             # finished sentences keep emitting padding

Each sentence's length limit grows with its source: `min(max_length, ratio * t_src + extra)`,
where `t_src` counts the source tokens without padding. A model that never emits `[END]` still stops.
"""

import dataclasses

import tensorflow as tf

from tfattn.text import END_ID, PAD_ID, START_ID


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
        if not isinstance(self.max_length, int) or self.max_length < 1:
            raise ValueError(f"max_length must be an int >= 1. Received: max_length={self.max_length!r}")


def length_limits(source, config):
    """Per-sentence output length limits `(batch,)` int32 from source ids `(batch, t_in)`."""
    t_src = tf.math.count_nonzero(source, axis=1, dtype=tf.int32)  # (batch,)
    limit = tf.cast(config.ratio * tf.cast(t_src, tf.float32), tf.int32) + config.extra
    return tf.minimum(limit, config.max_length)


def greedy(model, source, config=None):
    """Greedy decoding of a batch of source ids.

    Args:
        model: a `Seq2Seq` model.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.

    Returns:
        A dict: `ids` int32 `(batch, t_out)` without `[START]`, `[END]` included, 0 after it;
        `attention` float32 `(batch, t_out, t_in)`, zero rows after `[END]`; `length` int32
        `(batch,)`, the number of output tokens, `[END]` included.
    """
    config = config or DecodeConfig()
    source = tf.convert_to_tensor(source, tf.int32)
    batch = tf.shape(source)[0]
    limits = length_limits(source, config)  # (batch,)
    memory, state = model.encode(source)
    ids_ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
    attn_ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, None])
    token = tf.fill([batch], START_ID)
    done = tf.zeros([batch], tf.bool)

    def body(t, token, done, state, ids_ta, attn_ta):
        logits, weights, state = model.decoder.step(token, state, memory)  # (batch, vocab), (batch, t_in)
        token = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (batch,)
        token = tf.where(t + 1 >= limits, END_ID, token)  # the last allowed token is [END]
        token = tf.where(done, PAD_ID, token)
        weights = tf.where(done[:, None], 0.0, tf.cast(weights, tf.float32))
        done = done | tf.equal(token, END_ID)
        return t + 1, token, done, state, ids_ta.write(t, token), attn_ta.write(t, weights)

    loop_vars = (tf.constant(0), token, done, state, ids_ta, attn_ta)
    _, _, _, _, ids_ta, attn_ta = tf.while_loop(
        lambda t, token, done, *_: tf.logical_not(tf.reduce_all(done)), body, loop_vars,
        maximum_iterations=config.max_length,
    )
    return _stack(ids_ta, attn_ta, batch, tf.shape(source)[1])


def _stack(ids_ta, attn_ta, batch, t_in):
    """TensorArrays of steps -> batch-major tensors; an empty loop gives `(batch, 0)` shapes."""
    steps = ids_ta.size()
    ids = tf.cond(steps > 0, lambda: tf.transpose(ids_ta.stack(), [1, 0]),
                  lambda: tf.zeros([batch, 0], tf.int32))  # (batch, t_out)
    attention = tf.cond(steps > 0, lambda: tf.transpose(attn_ta.stack(), [1, 0, 2]),
                        lambda: tf.zeros([batch, 0, t_in], tf.float32))  # (batch, t_out, t_in)
    length = tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)  # (batch,), [END] included
    return {"ids": ids, "attention": attention, "length": length}


def make_greedy_fn(model, config=None):
    """A `tf.function` over `source (batch, t_in)` int32 that never retraces for new shapes."""
    config = config or DecodeConfig()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])
    def greedy_fn(source):
        return greedy(model, source, config)

    return greedy_fn
