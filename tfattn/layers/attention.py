"""Attention layers: Bahdanau (additive) and Luong (multiplicative and friends).

Every layer here shares one masked softmax and one weighted sum (`ScoredAttention`); a subclass only
says how to turn a query and the keys into scores, in `compute_scores`:

    scores  = compute_scores(query, keys)               # (batch, t_q, t_in)
    weights = softmax(scores), masked positions = 0     # (batch, t_q, t_in)
    context = weights @ value                           # (batch, t_q, dv)

Keys are projected once per source sentence by `prepare_keys` and then reused for every decoder step:
a decoder calls `prepare_keys(value)` before its loop and passes the result as `prepared_keys=`.

Masks follow Keras: `value_mask (batch, t_in)` marks real source positions and `query_mask (batch,
t_q)` real query steps; each is taken from its input's Keras mask (`Embedding(mask_zero=True)`
upstream) when not given, as in `keras.layers.Attention`.
"""

import warnings

import keras
from keras import ops

from tfattn.layers.checks import ShapeChecker, positive_int, rate

SCORES = ("dot", "general", "concat", "location")


def large_negative(dtype):
    """A large negative number that fits `dtype` (float16 max is 65504, so -1e9 would overflow)."""
    return -3e4 if keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16") else -1e9


@keras.saving.register_keras_serializable(package="tfattn")
class ScoredAttention(keras.layers.Layer):
    """Base class: masked softmax over scores and the weighted sum of values.

    A subclass implements `compute_scores(query, keys)` -> `(batch, t_q, t_in)`, the one override
    point, and may override `prepare_keys(key)` to project the keys once per source sentence.

    Args:
        dropout: float. Dropout on the attention weights, active only in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: float tensor `(batch, t_q, dq)`; one decoder step is `t_q = 1`. Or Keras' list form
            `[query, value]` / `[query, value, key]`, with `mask=[query_mask, value_mask]`.
        value: float tensor `(batch, t_in, dv)`.
        key: optional float tensor `(batch, t_in, dk)`; defaults to `value`.
        query_mask: optional bool `(batch, t_q)`; `False` steps get zero weights and context.
        value_mask: optional bool `(batch, t_in)`; `False` marks padding.
        key_mask: optional bool `(batch, t_in)`, combined with `value_mask`.
        prepared_keys: optional output of `prepare_keys(key)`; skips the key projection.
        training: bool. Whether the dropout is active.
        mask: deprecated: the `value_mask` (a `DeprecationWarning` says so).

    Returns:
        `(context, weights)`: context `(batch, t_q, dv)`, weights `(batch, t_q, t_in)`. Masked
        positions get exactly 0 weight and each row with at least one unmasked position sums to 1
        (before dropout; in training the weights returned are those the context was made with).
        A row whose positions are all masked gets all-zero weights and a zero context. The context
        carries the query's Keras mask.
    """

    def __init__(self, dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.dropout = rate("dropout", dropout)
        self.seed = seed
        self.supports_masking = True
        self.dropout_layer = keras.layers.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy)

    def prepare_keys(self, key):
        """Projects `key (batch, t_in, dk)` once per sentence; the identity unless overridden."""
        return key

    def compute_scores(self, query, keys):
        """The override point: `query (batch, t_q, dq)` and prepared `keys (batch, t_in, ...)` ->
        scores `(batch, t_q, t_in)`, before masking and softmax."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_scores(query, keys)")

    def call(self, query, value=None, key=None, query_mask=None, value_mask=None, key_mask=None,
             prepared_keys=None, training=None, mask=None):
        # 1. Inputs and masks, checked; the keys projected once per sentence unless already done.
        query, value, key, query_mask, value_mask = self._inputs(
            query, value, key, query_mask, value_mask, key_mask, mask)
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(value if key is None else key)
        # 2. Scores, one per (query step, source position).
        scores = self.compute_scores(query, prepared_keys)  # (batch, t_q, t_in)
        # 3. Masked softmax: padding gets a large negative score, then exactly zero weight.
        weights = masked_softmax(scores, value_mask)  # (batch, t_q, t_in)
        weights = self.dropout_layer(weights, training=training)
        if query_mask is not None:
            weights = ops.where(ops.expand_dims(query_mask, -1), weights, ops.zeros_like(weights))
        # 4. Context: the weighted sum of the values.
        context = ops.matmul(weights, ops.cast(value, weights.dtype))  # (batch, t_q, dv)
        return context, weights

    def _inputs(self, query, value, key, query_mask, value_mask, key_mask, mask):
        """Unpacks Keras' list form and the deprecated `mask`, checks shapes, and merges the key and
        value masks: returns `query, value, key, query_mask (batch, t_q), value_mask (batch, t_in)`."""
        if isinstance(query, (list, tuple)):
            if isinstance(query_mask, (list, tuple)):  # Keras fills it with the list's masks
                query_mask, mask = None, mask if mask is not None else query_mask
            query, value, key, masks = _unpack_list(query, value, mask)
            query_mask, value_mask, key_mask = (_or(a, b) for a, b in zip((query_mask, value_mask, key_mask), masks))
        elif mask is not None:
            warnings.warn("`mask=` of the tfattn attention layers is deprecated: pass `value_mask=` "
                          "(False on padding), or let Keras take it from the value's mask.",
                          DeprecationWarning, stacklevel=3)
            value_mask = _or(value_mask, mask)
        if value is None:
            raise ValueError("value is required: call the layer as layer(query, value) or layer([query, value]). "
                             "Received: value=None")
        check = ShapeChecker()
        check("query", query, ("batch", "t_q", "dq"))
        check("value", value, ("batch", "t_in", "dv"))
        check("key", key, ("batch", "t_in", "dk"))
        check("query_mask", query_mask, ("batch", "t_q"))
        check("value_mask", value_mask, ("batch", "t_in"))
        check("key_mask", key_mask, ("batch", "t_in"))
        value_mask = _both(value_mask, key_mask)
        return query, value, key, _bool(query_mask), value_mask

    def compute_mask(self, inputs, mask=None):
        """The context carries the query's mask; the weights carry none."""
        # Keras passes the list form's masks, or else the query's own Keras mask (or a deprecated
        # `mask=`, a value mask, which must not reach the context).
        query = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        query_mask = mask[0] if isinstance(mask, (list, tuple)) else mask
        if query_mask is None or tuple(query_mask.shape) != tuple(query.shape[:2]):
            return None
        return query_mask, None

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout, "seed": self.seed}


def masked_softmax(scores, mask=None):
    """Softmax of `scores (batch, t_q, t_in)` over `t_in`, exactly 0 where bool `mask (batch, t_in)`
    is False; a row with every position masked gets all zeros."""
    if mask is None:
        return ops.softmax(scores, axis=-1)
    mask = ops.expand_dims(mask, 1)  # (batch, 1, t_in)
    scores = ops.where(mask, scores, ops.cast(large_negative(scores.dtype), scores.dtype))
    weights = ops.softmax(scores, axis=-1)  # (batch, t_q, t_in)
    return ops.where(mask, weights, ops.zeros_like(weights))


def _unpack_list(inputs, value, mask):
    if value is not None or len(inputs) not in (2, 3):
        raise ValueError("The list form takes [query, value] or [query, value, key] and nothing else. "
                         f"Received: {len(inputs)} inputs{' and value' if value is not None else ''}")
    masks = list(mask) if isinstance(mask, (list, tuple)) else [None, mask]
    masks += [None] * (3 - len(masks))
    return inputs[0], inputs[1], inputs[2] if len(inputs) == 3 else None, masks[:3]


def _or(given, fallback):
    return fallback if given is None else given


def _bool(mask):
    return None if mask is None else ops.cast(mask, "bool")


def _both(a, b):
    if a is None or b is None:
        return _bool(b if a is None else a)
    return ops.logical_and(_bool(a), _bool(b))


@keras.saving.register_keras_serializable(package="tfattn")
class BahdanauAttention(ScoredAttention):
    """Additive attention of Bahdanau et al. (2014): `score = v^T tanh(W1 q + W2 k)`.

    With `normalize=True` this is the weight-normalized ("normed") variant: `v` is replaced by
    `g * v / ||v||` with a learned scalar `g` (initialized to `sqrt(1 / units)`), and a learned bias
    `b` is added inside the tanh: `score = (g v / ||v||)^T tanh(W1 q + W2 k + b)`.

    Args:
        units: int. Size of the hidden layer that scores each (query, key) pair.
        normalize: bool. Use the weight-normalized variant. Defaults to `False`.
        dropout: float. Dropout on the attention weights in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        query_kernel: `W1 (dq, units)`. key_kernel: `W2 (dk, units)`. v: `(units,)`.
        g, b: the normalized variant's scalar and bias `(units,)`.

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
        defaults to `value`. query_mask, value_mask, key_mask, prepared_keys, training: as
        `ScoredAttention` takes them.

    Returns:
        context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`; masked weights are exactly 0.

    Example:

    >>> attention = BahdanauAttention(units=8)
    >>> query, value = np.ones((2, 1, 4)), np.ones((2, 5, 6))
    >>> context, weights = attention(query, value, value_mask=np.array([[1, 1, 1, 0, 0]] * 2) > 0)
    >>> context.shape, weights.shape
    (TensorShape([2, 1, 6]), TensorShape([2, 1, 5]))

    Reference: Bahdanau, Cho, Bengio, arXiv 1409.0473, Appendix A.1.2 (`a(s_{i-1}, h_j) = v_a^T
    tanh(W_a s_{i-1} + U_a h_j)`) and eq. 5-6; the normalized form is weight normalization (Salimans
    and Kingma, arXiv 1602.07868) applied to `v`.
    """

    def __init__(self, units, normalize=False, **kwargs):
        super().__init__(**kwargs)
        self.units = positive_int("units", units)
        self.normalize = normalize
        dense = dict(units=self.units, use_bias=False, dtype=self.dtype_policy)
        self.query_dense = keras.layers.Dense(**dense, name="query_dense")  # W1
        self.key_dense = keras.layers.Dense(**dense, name="key_dense")  # W2

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape, value_shape, key_shape = _shapes(query_shape, value_shape, key_shape)
        self.query_dense.build(query_shape)
        self.key_dense.build(value_shape if key_shape is None else key_shape)
        self.v = self.add_weight(name="v", shape=(self.units,), initializer="glorot_uniform")
        if self.normalize:
            g0 = (1.0 / self.units) ** 0.5
            self.g = self.add_weight(name="g", shape=(), initializer=keras.initializers.Constant(g0))
            self.b = self.add_weight(name="b", shape=(self.units,), initializer="zeros")

    @property
    def query_kernel(self):
        """`W1 (dq, units)`, which projects the query."""
        return self.query_dense.kernel

    @property
    def key_kernel(self):
        """`W2 (dk, units)`, which projects the keys."""
        return self.key_dense.kernel

    def prepare_keys(self, key):
        keys = self.key_dense(key)  # (batch, t_in, units): W2 k
        return keys + ops.cast(self.b, keys.dtype) if self.normalize else keys

    def scoring_vector(self):
        """`v`, or `g v / ||v||` when weight-normalized: the vector that reads out each score."""
        if not self.normalize:
            return self.v
        return self.g * self.v / ops.sqrt(ops.sum(ops.square(self.v)))  # (units,)

    def compute_scores(self, query, keys):
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
    - `"general"`: `score = q^T W k` with `W` stored as `w (dk, dq)`, so that `W k` is `k @ w`,
      computed once per sentence.
    - `"concat"`: `score = v^T tanh(W [q; k])`, the paper's own form with its own `W` and `v`;
      `W [q; k]` is split into `W_q q + W_k k` so that `W_k k` is computed once per sentence.
    - `"location"`: `scores = W q`, one score per source position, independent of the keys;
      positions at or beyond `max_length` get zero weight. It is a global score (every position
      is scored), not the paper's local attention.

    Args:
        score: str. One of `"dot"`, `"general"`, `"concat"`, `"location"`. Defaults to `"general"`.
        scale: bool. Multiply scores by a learned scalar `gain` (initialized to 1). Defaults to `False`.
        units: int or None. Hidden size of the `"concat"` score; defaults to the query size.
        max_length: int. Number of source positions the `"location"` score covers. Defaults to 64.
        dropout: float. Dropout on the attention weights in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        w: `"general"`: `(dk, dq)`; `"location"`: `(dq, max_length)`. w_query `(dq, units)`, w_key
        `(dk, units)`, v `(units,)`: `"concat"`. gain: the scale, a scalar.

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
        defaults to `value`. query_mask, value_mask, key_mask, prepared_keys, training: as
        `ScoredAttention` takes them.

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
        self.score = score
        self.scale = scale
        self.units = None if units is None else positive_int("units", units)
        self.max_length = positive_int("max_length", max_length)

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape, value_shape, key_shape = _shapes(query_shape, value_shape, key_shape)
        dq = query_shape[-1]
        dk = (value_shape if key_shape is None else key_shape)[-1]
        if self.score == "dot" and None not in (dq, dk) and dq != dk:
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

    def compute_scores(self, query, keys):
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
            scores = self.fit_positions(scores, ops.shape(keys)[1])  # (batch, t_q, t_in)
        return scores

    def fit_positions(self, scores, t_in):
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


def _shapes(query_shape, value_shape, key_shape):
    """Build shapes, from Keras' list form too: `[query, value(, key)]` arrives as one list of shapes."""
    if value_shape is None and query_shape and isinstance(query_shape[0], (list, tuple)):
        shapes = list(query_shape) + [None]
        return shapes[0], shapes[1], shapes[2]
    if value_shape is None:
        raise ValueError(f"value is required to build the layer. Received: value_shape=None")
    return query_shape, value_shape, key_shape
