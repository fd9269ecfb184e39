"""Attention layers: Bahdanau (additive) and Luong (multiplicative and friends).

Every layer here shares one masked softmax and one weighted sum (`ScoredAttention`); a subclass only
says how to turn a query and the keys into scores:

    scores  = score(query, keys)                        # (batch, t_q, t_in)
    weights = softmax(scores), masked positions = 0     # (batch, t_q, t_in)
    context = weights @ value                           # (batch, t_q, dv)

Keys are projected once per source sentence by `prepare_keys` and then reused for every decoder step:
a decoder calls `prepare_keys(value)` before its loop and passes the result as `prepared_keys=`.
"""

import keras
from keras import ops

SCORES = ("dot", "general", "concat", "location")


def large_negative(dtype):
    """A large negative number that fits `dtype` (float16 max is 65504, so -1e9 would overflow)."""
    return -3e4 if keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16") else -1e9


@keras.saving.register_keras_serializable(package="tfattn")
class ScoredAttention(keras.layers.Layer):
    """Base class: masked softmax over scores and the weighted sum of values.

    Subclasses implement `_scores(query, keys)` -> `(batch, t_q, t_in)` and may override
    `prepare_keys(key)` to project the keys once per source sentence.

    Call arguments:
        query: float tensor `(batch, t_q, dq)`; one decoder step is `t_q = 1`.
        value: float tensor `(batch, t_in, dv)`.
        key: optional float tensor `(batch, t_in, dk)`; defaults to `value`.
        mask: optional bool tensor `(batch, t_in)`; `False` marks padding.
        prepared_keys: optional output of `prepare_keys(key)`; skips the key projection.

    Returns:
        `(context, weights)`: context `(batch, t_q, dv)`, weights `(batch, t_q, t_in)`. Masked
        positions get exactly 0 weight and each row with at least one unmasked position sums to 1.
        A row whose positions are all masked gets all-zero weights and a zero context.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # `mask` is consumed here; outputs carry no mask

    def compute_mask(self, *args, **kwargs):
        return None

    def prepare_keys(self, key):
        """Projects `key (batch, t_in, dk)` once per sentence; the identity unless overridden."""
        return key

    def _scores(self, query, keys):
        raise NotImplementedError

    def call(self, query, value, key=None, mask=None, prepared_keys=None):
        # 1. Keys: projected once per sentence, unless the caller already did it.
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(value if key is None else key)
        # 2. Scores, one per (query step, source position).
        scores = self._scores(query, prepared_keys)  # (batch, t_q, t_in)
        # 3. Masked softmax: padding gets a large negative score, then exactly zero weight.
        if mask is not None:
            mask = ops.expand_dims(ops.cast(mask, "bool"), 1)  # (batch, 1, t_in)
            scores = ops.where(mask, scores, ops.cast(large_negative(scores.dtype), scores.dtype))
        weights = ops.softmax(scores, axis=-1)  # (batch, t_q, t_in)
        if mask is not None:
            weights = ops.where(mask, weights, ops.zeros_like(weights))
        # 4. Context: the weighted sum of the values.
        context = ops.matmul(weights, ops.cast(value, weights.dtype))  # (batch, t_q, dv)
        return context, weights

    def compute_output_shape(self, query_shape, value_shape, key_shape=None, mask_shape=None):
        return (
            (query_shape[0], query_shape[1], value_shape[2]),
            (query_shape[0], query_shape[1], value_shape[1]),
        )


@keras.saving.register_keras_serializable(package="tfattn")
class BahdanauAttention(ScoredAttention):
    """Additive attention of Bahdanau et al. (2014): `score = v^T tanh(W1 q + W2 k)`.

    With `normalize=True` this is the weight-normalized ("normed") variant: `v` is replaced by
    `g * v / ||v||` with a learned scalar `g` (initialized to `sqrt(1 / units)`), and a learned bias
    `b` is added inside the tanh: `score = (g v / ||v||)^T tanh(W1 q + W2 k + b)`.

    Args:
        units: int. Size of the hidden layer that scores each (query, key) pair.
        normalize: bool. Use the weight-normalized variant. Defaults to `False`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
        defaults to `value`. mask: optional bool `(batch, t_in)`. prepared_keys: optional result of
        `prepare_keys(key)`.

    Returns:
        context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`; masked weights are exactly 0.

    Example:

    >>> attention = BahdanauAttention(units=8)
    >>> query, value = np.ones((2, 1, 4)), np.ones((2, 5, 6))
    >>> context, weights = attention(query, value)
    >>> context.shape, weights.shape
    (TensorShape([2, 1, 6]), TensorShape([2, 1, 5]))

    Reference: Bahdanau, Cho, Bengio, arXiv 1409.0473, eq. 6 and Appendix A.1.2; the normalized form
    is weight normalization (Salimans and Kingma, arXiv 1602.07868) applied to `v`.
    """

    def __init__(self, units, normalize=False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(units, int) or units <= 0:
            raise ValueError(f"units must be a positive int. Received: units={units!r}")
        self.units = units
        self.normalize = normalize
        dense = dict(units=units, use_bias=False, dtype=self.dtype_policy)
        self.query_dense = keras.layers.Dense(**dense, name="query_dense")  # W1
        self.key_dense = keras.layers.Dense(**dense, name="key_dense")  # W2

    def build(self, query_shape, value_shape, key_shape=None):
        if self.built:
            return
        self.query_dense.build(query_shape)
        self.key_dense.build(value_shape if key_shape is None else key_shape)
        self.v = self.add_weight(name="v", shape=(self.units,), initializer="glorot_uniform")
        if self.normalize:
            g0 = (1.0 / self.units) ** 0.5
            self.g = self.add_weight(name="g", shape=(), initializer=keras.initializers.Constant(g0))
            self.b = self.add_weight(name="b", shape=(self.units,), initializer="zeros")

    def prepare_keys(self, key):
        keys = self.key_dense(key)  # (batch, t_in, units): W2 k
        return keys + ops.cast(self.b, keys.dtype) if self.normalize else keys

    def scoring_vector(self):
        """`v`, or `g v / ||v||` when weight-normalized: the vector that reads out each score."""
        if not self.normalize:
            return self.v
        return self.g * self.v / ops.sqrt(ops.sum(ops.square(self.v)))  # (units,)

    def _scores(self, query, keys):
        q = self.query_dense(query)  # (batch, t_q, units): W1 q
        hidden = ops.tanh(ops.expand_dims(q, 2) + ops.expand_dims(keys, 1))  # (batch, t_q, t_in, units)
        v = ops.cast(self.scoring_vector(), hidden.dtype)
        return ops.einsum("bqku,u->bqk", hidden, v)  # (batch, t_q, t_in)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "normalize": self.normalize}


@keras.saving.register_keras_serializable(package="tfattn")
class LuongAttention(ScoredAttention):
    """Attention of Luong et al. (2015), section 3.1, with its four score functions.

    - `"dot"`: `score = q . k` (needs `dq == dk`).
    - `"general"`: `score = q W k`; `W k` is computed once per sentence.
    - `"concat"`: `score = v^T tanh(W [q; k])`, the paper's own form with its own `W` and `v`;
      `W [q; k]` is split into `W_q q + W_k k` so that `W_k k` is computed once per sentence.
    - `"location"`: `scores = W q`, one score per source position, independent of the keys;
      positions at or beyond `max_length` get zero weight.

    Args:
        score: str. One of `"dot"`, `"general"`, `"concat"`, `"location"`. Defaults to `"general"`.
        scale: bool. Multiply scores by a learned scalar (initialized to 1). Defaults to `False`.
        units: int or None. Hidden size of the `"concat"` score; defaults to the query size.
        max_length: int. Number of source positions the `"location"` score covers. Defaults to 64.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
        defaults to `value`. mask: optional bool `(batch, t_in)`. prepared_keys: optional result of
        `prepare_keys(key)`.

    Returns:
        context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`; masked weights are exactly 0.

    Example:

    >>> attention = LuongAttention(score="general")
    >>> query, value = np.ones((2, 3, 4)), np.ones((2, 5, 6))
    >>> context, weights = attention(query, value)
    >>> context.shape, weights.shape
    (TensorShape([2, 3, 6]), TensorShape([2, 3, 5]))

    Reference: Luong, Pham, Manning, arXiv 1508.04025, eq. 8 (scores) and eq. 9 (location).
    """

    def __init__(self, score="general", scale=False, units=None, max_length=64, **kwargs):
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}. Received: score={score!r}")
        if score == "location" and (not isinstance(max_length, int) or max_length <= 0):
            raise ValueError(f"max_length must be a positive int. Received: max_length={max_length!r}")
        self.score = score
        self.scale = scale
        self.units = units
        self.max_length = max_length

    def build(self, query_shape, value_shape, key_shape=None):
        if self.built:
            return
        dq = query_shape[-1]
        dk = (value_shape if key_shape is None else key_shape)[-1]
        if self.score == "dot" and dq != dk:
            raise ValueError(
                f"The 'dot' score needs query and key of the same size. Received: query size {dq}, "
                f"key size {dk}"
            )
        if self.score == "general":
            self.w = self.add_weight(name="w", shape=(dk, dq), initializer="glorot_uniform")
        elif self.score == "concat":
            units = self.units or dq
            self.w_query = self.add_weight(name="w_query", shape=(dq, units), initializer="glorot_uniform")
            self.w_key = self.add_weight(name="w_key", shape=(dk, units), initializer="glorot_uniform")
            self.v = self.add_weight(name="v", shape=(units,), initializer="glorot_uniform")
        elif self.score == "location":
            shape = (dq, self.max_length)
            self.w = self.add_weight(name="w", shape=shape, initializer="glorot_uniform")
        if self.scale:
            self.gain = self.add_weight(name="gain", shape=(), initializer="ones")

    def prepare_keys(self, key):
        if self.score == "general":
            return ops.einsum("bkd,de->bke", key, ops.cast(self.w, key.dtype))  # (batch, t_in, dq): W k
        if self.score == "concat":
            return ops.einsum("bkd,du->bku", key, ops.cast(self.w_key, key.dtype))  # (batch, t_in, units)
        return key

    def _scores(self, query, keys):
        if self.score in ("dot", "general"):
            scores = ops.einsum("bqd,bkd->bqk", query, keys)  # (batch, t_q, t_in)
        elif self.score == "concat":
            q = ops.einsum("bqd,du->bqu", query, ops.cast(self.w_query, query.dtype))  # (batch, t_q, units)
            hidden = ops.tanh(ops.expand_dims(q, 2) + ops.expand_dims(keys, 1))  # (batch, t_q, t_in, units)
            scores = ops.einsum("bqku,u->bqk", hidden, ops.cast(self.v, hidden.dtype))  # (batch, t_q, t_in)
        else:
            scores = ops.einsum("bqd,dl->bql", query, ops.cast(self.w, query.dtype))  # (batch, t_q, max_length)
        if self.scale:
            scores = scores * ops.cast(self.gain, scores.dtype)
        if self.score == "location":
            scores = self._fit_positions(scores, ops.shape(keys)[1])  # (batch, t_q, t_in)
        return scores

    def _fit_positions(self, scores, t_in):
        """Crops or extends `(batch, t_q, max_length)` location scores to `t_in` positions."""
        # Positions past max_length get a large negative score, hence zero weight after the softmax.
        pad = ops.maximum(t_in - self.max_length, 0)
        scores = ops.pad(scores, [[0, 0], [0, 0], [0, pad]], constant_values=large_negative(scores.dtype))
        return scores[:, :, :t_in]  # (batch, t_q, t_in)

    def get_config(self):
        return {
            **super().get_config(),
            "score": self.score,
            "scale": self.scale,
            "units": self.units,
            "max_length": self.max_length,
        }
