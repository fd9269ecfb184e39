"""Attention layers: Bahdanau (additive) and Luong (multiplicative and friends).

Every layer here shares one masked softmax and one weighted sum (`ScoredAttention`); a subclass only
says how to turn a query and the keys into scores, in `compute_scores`:

    scores  = compute_scores(query, keys)               # (batch, t_q, t_in)
    allowed, position_weights = attention_range(...)    # global: the real positions; local: a window
    weights = softmax(scores), not allowed = 0          # (batch, t_q, t_in)
    weights = weights * position_weights                # local-p only: a Gaussian around p_t
    weights = one_hot(one position)                     # probability="hard" only
    context = weights @ value                           # (batch, t_q, dv)

The literature classifies attention by score (`compute_scores`: dot, general, concat, location,
cosine), by range (`attention_range`: global, or Luong's local window) and by output
(`probability`: soft weights, or hard, one position).

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

SCORES = ("dot", "general", "concat", "location", "cosine")
PROBABILITIES = ("soft", "hard")
LOCALS = (None, "m", "p")
# The cosine score's gain at initialization: see `LuongAttention`.
COSINE_GAIN = 10.0
# Inside the cosine's norms, `sqrt(|x|^2 + eps)`: a zero vector has norm sqrt(eps), not 0.
COSINE_EPSILON = 1e-12


def large_negative(dtype):
    """A large negative number that fits `dtype` (float16 max is 65504, so -1e9 would overflow)."""
    return -3e4 if keras.backend.standardize_dtype(dtype) in ("float16", "bfloat16") else -1e9


@keras.saving.register_keras_serializable(package="tfattn")
class ScoredAttention(keras.layers.Layer):
    """Base class: masked softmax over scores and the weighted sum of values, soft or hard.

    A subclass implements `compute_scores(query, keys)` -> `(batch, t_q, t_in)`, the one override
    point of the score, and may override `prepare_keys(key)` to project the keys once per source
    sentence, and `attention_range(...)` to attend within a window rather than to every position.

    Soft attention (`probability="soft"`) returns the softmax weights. Hard attention
    (`probability="hard"`, Xu et al. 2015, section 4.1) attends to one source position per query:
    in training one position is sampled from the soft weights (the Gumbel-max trick: the argmax of
    `log w + g`, `g` Gumbel noise, is a draw from `w / sum(w)`); at inference (`training` False)
    it is the argmax. The weights returned are exactly one-hot. Padding is never chosen, and a
    row with every position masked stays all zeros.

    Hard attention is trained here with the straight-through estimator: the forward pass uses the
    one-hot weights, the backward pass the gradient of the soft weights (`one_hot + w -
    stop_gradient(w)`, which is exactly `one_hot` in value). Xu et al. train it with REINFORCE
    and a baseline instead, which needs a reward (the sentence's log-likelihood), a running
    baseline and an entropy term in the loss: a different train step. Straight-through keeps the
    one train step and loss of every other model, and its gradient reaches the scores directly
    (not through one scalar reward per sentence), so it varies far less from draw to draw; its price
    is a bias (the weights' gradient is that of the soft weights, not of the draw).

    Args:
        dropout: float. Dropout on the attention weights, active only in training; 0 with
            `probability="hard"` (dropout would break the one-hot weights). Defaults to `0.0`.
        seed: int or None. Seed of that dropout, and of hard attention's draws (a
            `keras.random.SeedGenerator(seed)`). Defaults to `None`.
        probability: str. `"soft"` (a weighted average over positions) or `"hard"` (one position).
            Defaults to `"soft"`.
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
        query_positions: optional int `(batch, t_q)` or `(t_q,)`: the target step of each query, read
            by a layer whose range depends on it (`uses_positions`: Luong's local-m); defaults to
            `0, 1, ..., t_q - 1` (teacher forcing over a whole target). Ignored by other layers.
        training: bool. Whether the dropout is active, and whether hard attention samples.
        mask: deprecated: the `value_mask` (a `DeprecationWarning` says so).

    Returns:
        `(context, weights)`: context `(batch, t_q, dv)`, weights `(batch, t_q, t_in)`. Masked
        positions (and those outside a local window) get exactly 0 weight and each row with at least
        one unmasked position sums to 1 (before dropout; in training the weights returned are those
        the context was made with; Luong's local-p multiplies the weights by a Gaussian after the
        softmax, so its rows sum to less). A row whose positions are all masked gets all-zero
        weights and a zero context. The context carries the query's Keras mask.

    Reference: Xu et al. 2015, "Show, Attend and Tell", arXiv 1502.03044, section 4.1 (hard
    attention); Jang, Gu, Poole 2017, "Categorical Reparameterization with Gumbel-Softmax", arXiv
    1611.01144, section 2 (Gumbel-max) and 2.2 (straight-through).
    """

    def __init__(self, dropout=0.0, seed=None, probability="soft", **kwargs):
        super().__init__(**kwargs)
        self.dropout = rate("dropout", dropout)
        self.seed = seed
        if probability not in PROBABILITIES:
            raise ValueError(f"probability must be one of {PROBABILITIES}. Received: probability={probability!r}")
        if probability == "hard" and self.dropout:
            raise ValueError("probability='hard' takes no dropout on the weights (they are one-hot). "
                             f"Received: dropout={dropout!r}")
        self.probability = probability
        self.supports_masking = True
        self.dropout_layer = keras.layers.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy)
        if probability == "hard":
            self.seed_generator = keras.random.SeedGenerator(seed, name="hard_attention_seed")

    @property
    def uses_positions(self):
        """Whether the range depends on `query_positions` (a decoder then passes its step index)."""
        return False

    def prepare_keys(self, key):
        """Projects `key (batch, t_in, dk)` once per sentence; the identity unless overridden."""
        return key

    def compute_scores(self, query, keys):
        """The override point: `query (batch, t_q, dq)` and prepared `keys (batch, t_in, ...)` ->
        scores `(batch, t_q, t_in)`, before masking and softmax."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_scores(query, keys)")

    def attention_range(self, query, value_mask, query_positions, t_in):
        """The positions each query may attend to, and weights by position applied after the softmax.

        Returns `(allowed, position_weights)`: `allowed` bool `(batch, t_in)` or `(batch, t_q, t_in)`
        (None: every position), `position_weights` float `(batch, t_q, t_in)` or None. Global
        attention (this default) allows every real position: `(value_mask, None)`.
        """
        return value_mask, None

    def call(self, query, value=None, key=None, query_mask=None, value_mask=None, key_mask=None,
             prepared_keys=None, query_positions=None, training=None, mask=None):
        # 1. Inputs and masks, checked; the keys projected once per sentence unless already done.
        query, value, key, query_mask, value_mask = self._inputs(
            query, value, key, query_mask, value_mask, key_mask, mask)
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(value if key is None else key)
        # 2. Scores, one per (query step, source position).
        scores = self.compute_scores(query, prepared_keys)  # (batch, t_q, t_in)
        # 3. The range: the real positions (global), or a window of them (local).
        allowed, position_weights = self.attention_range(query, value_mask, query_positions, ops.shape(value)[1])
        # 4. Masked softmax: what is not allowed gets a large negative score, then exactly zero weight.
        weights = masked_softmax(scores, allowed)  # (batch, t_q, t_in)
        if position_weights is not None:
            weights = weights * ops.cast(position_weights, weights.dtype)  # (batch, t_q, t_in)
        # 5. Hard attention: one position per query, one-hot.
        if self.probability == "hard":
            weights = self.one_position(weights, training)  # (batch, t_q, t_in)
        weights = self.dropout_layer(weights, training=training)
        if query_mask is not None:
            weights = ops.where(ops.expand_dims(query_mask, -1), weights, ops.zeros_like(weights))
        # 6. Context: the weighted sum of the values.
        context = ops.matmul(weights, ops.cast(value, weights.dtype))  # (batch, t_q, dv)
        return context, weights

    def one_position(self, weights, training=None):
        """Hard attention: `weights (batch, t_q, t_in)` -> one-hot `(batch, t_q, t_in)`, a draw from
        `weights` in training, the argmax otherwise; the gradient is that of `weights`."""
        w = ops.cast(weights, "float32")  # (batch, t_q, t_in)
        if training:
            # Gumbel-max: argmax(log w + g) is a draw from w / sum(w); log 0 = -inf is never drawn.
            u = keras.random.uniform(ops.shape(w), minval=1e-20, maxval=1.0, seed=self.seed_generator)
            w = ops.log(w) - ops.log(-ops.log(u))  # (batch, t_q, t_in)
        chosen = ops.argmax(w, axis=-1)  # (batch, t_q)
        one_hot = ops.one_hot(chosen, ops.shape(weights)[-1], dtype=weights.dtype)  # (batch, t_q, t_in)
        # An all-masked row has no position to choose: it stays all zeros.
        one_hot = ops.where(weights > 0, one_hot, ops.zeros_like(one_hot))
        # Straight-through: the value is exactly one_hot (w - w is exactly 0); the gradient is w's.
        return one_hot + (weights - ops.stop_gradient(weights))

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
        return {**super().get_config(), "dropout": self.dropout, "seed": self.seed,
                "probability": self.probability}


def masked_softmax(scores, mask=None):
    """Softmax of `scores (batch, t_q, t_in)` over `t_in`, exactly 0 where bool `mask (batch, t_in)`
    (or `(batch, t_q, t_in)`) is False; a row with every position masked gets all zeros."""
    if mask is None:
        return ops.softmax(scores, axis=-1)
    if len(mask.shape) == 2:
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
        probability: `"soft"` or `"hard"` (one position, as `ScoredAttention` describes). Defaults
            to `"soft"`.
        dropout: float. Dropout on the attention weights in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout and of hard attention's draws. Defaults to `None`.
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
    """Attention of Luong et al. (2015): five score functions, global or local.

    Scores (section 3.1):
    - `"dot"`: `score = q . k` (needs `dq == dk`).
    - `"general"`: `score = q^T W k` with `W` stored as `w (dk, dq)`, so that `W k` is `k @ w`,
      computed once per sentence.
    - `"concat"`: `score = v^T tanh(W [q; k])`, the paper's own form with its own `W` and `v`;
      `W [q; k]` is split into `W_q q + W_k k` so that `W_k k` is computed once per sentence.
    - `"location"`: `scores = W q`, one score per source position, independent of the keys;
      positions at or beyond `max_length` get zero weight. It is a global score (every position
      is scored), not the paper's local attention (`local=` is).
    - `"cosine"`: `score = gain * q . k / (|q| |k|)` (needs `dq == dk`), with a learned scalar
      `gain`, always present. A cosine lies in [-1, 1], so without a gain the weights over a dozen
      positions stay nearly flat (at most `e^2` between the best and the worst position); the gain
      starts at `COSINE_GAIN = 10`, so that a key aligned with the query (cosine 1) can outweigh an
      orthogonal one (cosine 0) by `e^10` from the first step, and is then learned. The norms are
      `sqrt(|x|^2 + 1e-12)`, computed in float32: a zero query scores 0 everywhere (uniform
      weights), a zero key scores 0, and float16 neither overflows nor divides by zero.

    Range (section 3.2): `local=None` is global attention (every real source position). Local
    attention attends within a window `[p_t - D, p_t + D]` around an aligned position `p_t`, with
    `D = window` and `S` the source length without padding (the real positions of `value_mask`,
    which are taken to come first):
    - `local="m"` (monotonic): `p_t = t`, the query's target step (`query_positions`), clipped to
      `[0, S - 1]`.
    - `local="p"` (predictive): `p_t = S * sigmoid(v_p^T tanh(W_p h_t))` (eq. 9), and the softmax
      weights are multiplied by `exp(-(s - p_t)^2 / (2 sigma^2))`, `sigma = D / 2` (eq. 10); the
      product is not renormalized, as in the paper, so a row sums to less than 1.
    `p_t` is real for local-p; the window is centred on `p_t` rounded half up, `floor(p_t + 0.5)`,
    so that it always spans the paper's `2D + 1` positions (fewer at the sentence's ends); the
    Gaussian uses the real `p_t`, which is how `W_p` and `v_p` get a gradient. Positions outside the
    window and padding get exactly zero weight (masked before the softmax).
    `predict_positions` returns `p_t`, e.g. to mark it in a plot.

    Args:
        score: str. One of `"dot"`, `"general"`, `"concat"`, `"location"`, `"cosine"`. Defaults to
            `"general"`.
        scale: bool. Multiply scores by a learned scalar `gain`. For `"dot"` and `"general"` it
            starts at `1 / sqrt(dq)`, Vaswani et al.'s scaling (section 3.2.1), so that a score starts
            with the spread of one query feature rather than of a sum of `dq` products; without it, the
            general score can saturate the softmax early in training and settle on one position for
            every step (`docs/models.md`, "Scaling the dot and general scores"). For `"concat"` and
            `"location"` it starts at 1; the cosine score always has its gain. Defaults to `False`
            (the paper's unscaled scores).
        units: int or None. Hidden size of the `"concat"` score and of local-p's `W_p`; defaults to
            the query size.
        max_length: int. Number of source positions the `"location"` score covers. Defaults to 64.
        local: None, `"m"` or `"p"`. Global attention, or local-m / local-p. Defaults to `None`.
        window: int. The half-width `D` of the local window (`2D + 1` positions). Defaults to 10.
        probability: `"soft"` or `"hard"`, as `ScoredAttention` takes it. Defaults to `"soft"`.
        dropout: float. Dropout on the attention weights in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout and of hard attention's draws. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        w: `"general"`: `(dk, dq)`; `"location"`: `(dq, max_length)`. w_query `(dq, units)`, w_key
        `(dk, units)`, v `(units,)`: `"concat"`. gain: the scale, a scalar (`scale` or `"cosine"`).
        w_p `(dq, units)`, v_p `(units,)`: local-p.

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
        defaults to `value`. query_mask, value_mask, key_mask, prepared_keys, training: as
        `ScoredAttention` takes them. query_positions: int `(batch, t_q)` or `(t_q,)`, the target
        step `t` of each query (local-m's `p_t`); defaults to `0, ..., t_q - 1`.

    Returns:
        context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`; masked weights are exactly 0.

    Example:

    >>> attention = LuongAttention(score="general", local="p", window=2)
    >>> query, value = np.ones((2, 3, 4)), np.ones((2, 5, 6))
    >>> context, weights = attention(query, value)
    >>> context.shape, weights.shape
    (TensorShape([2, 3, 6]), TensorShape([2, 3, 5]))

    Reference: Luong, Pham, Manning, arXiv 1508.04025, eq. 8 (scores), section 3.1 and eq. 9
    (location), section 3.2 and eq. 9-10 (local-m, local-p). The cosine score is the "content-based"
    cosine of Graves, Wayne, Danihelka 2014 (Neural Turing Machines, arXiv 1410.5401, eq. 5-6),
    where the gain is the key strength `beta`.
    """

    def __init__(self, score="general", scale=False, units=None, max_length=64, local=None, window=10, **kwargs):
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}. Received: score={score!r}")
        if local not in LOCALS:
            raise ValueError(f"local must be None (global attention), 'm' or 'p'. Received: local={local!r}")
        self.score = score
        self.scale = scale
        self.units = None if units is None else positive_int("units", units)
        self.max_length = positive_int("max_length", max_length)
        self.local = local
        self.window = positive_int("window", window)

    @property
    def uses_positions(self):
        """local-m centres its window on the query's target step; local-p predicts it from the query."""
        return self.local == "m"

    @property
    def has_gain(self):
        """Whether the scores are multiplied by the learned scalar `gain`."""
        return self.scale or self.score == "cosine"

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape, value_shape, key_shape = _shapes(query_shape, value_shape, key_shape)
        dq = query_shape[-1]
        dk = (value_shape if key_shape is None else key_shape)[-1]
        if self.score in ("dot", "cosine") and None not in (dq, dk) and dq != dk:
            raise ValueError(
                f"The {self.score!r} score needs query and key of the same size. Received: query size {dq}, "
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
        if self.has_gain:
            gain = COSINE_GAIN if self.score == "cosine" else dq**-0.5 if self.score in ("dot", "general") else 1.0
            self.gain = self.add_weight(name="gain", shape=(), initializer=keras.initializers.Constant(gain))
        if self.local == "p":
            units = self.units or dq
            self.w_p = self.add_weight(name="w_p", shape=(dq, units), initializer="glorot_uniform")
            self.v_p = self.add_weight(name="v_p", shape=(units,), initializer="glorot_uniform")

    def prepare_keys(self, key):
        if self.score == "general":
            return ops.einsum("bkd,de->bke", key, ops.cast(self.w, key.dtype))  # (batch, t_in, dq): W k
        if self.score == "concat":
            return ops.einsum("bkd,du->bku", key, ops.cast(self.w_key, key.dtype))  # (batch, t_in, units)
        if self.score == "cosine":
            return unit_vectors(key)  # (batch, t_in, dk): k / |k|
        return key

    def compute_scores(self, query, keys):
        if self.score in ("dot", "general"):
            scores = ops.einsum("bqd,bkd->bqk", query, keys)  # (batch, t_q, t_in)
        elif self.score == "cosine":  # the keys are unit vectors already (prepare_keys)
            scores = ops.einsum("bqd,bkd->bqk", unit_vectors(query), ops.cast(keys, query.dtype))  # (batch, t_q, t_in)
        elif self.score == "concat":
            q = ops.einsum("bqd,du->bqu", query, ops.cast(self.w_query, query.dtype))  # (batch, t_q, units)
            hidden = ops.tanh(ops.expand_dims(q, 2) + ops.expand_dims(keys, 1))  # (batch, t_q, t_in, units)
            scores = ops.einsum("bqku,u->bqk", hidden, ops.cast(self.v, hidden.dtype))  # (batch, t_q, t_in)
        else:
            scores = ops.einsum("bqd,dl->bql", query, ops.cast(self.w, query.dtype))  # (batch, t_q, max_length)
        if self.has_gain:
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

    # -- local attention ---------------------------------------------------------------------------

    def predict_positions(self, query, value_mask=None, query_positions=None, source_length=None):
        """The aligned positions `p_t` of local attention, float32 `(batch, t_q)`.

        Args:
            query: `(batch, t_q, dq)`, the decoder's `h_t`.
            value_mask: bool `(batch, t_in)`; `S` is its number of real positions.
            query_positions: int `(batch, t_q)` or `(t_q,)` (local-m); defaults to `0, ..., t_q - 1`.
            source_length: int or int `(batch,)`: `S` when there is no `value_mask`.

        Returns:
            local-m: `t` clipped to `[0, S - 1]`; local-p: `S * sigmoid(v_p^T tanh(W_p h_t))`.
        """
        if self.local is None:
            raise ValueError("predict_positions needs local attention (local='m' or 'p'). Received: local=None")
        check = ShapeChecker()
        check("query", query, ("batch", "t_q", "dq"))
        check("value_mask", value_mask, ("batch", "t_in"))
        lengths = self._source_lengths(query, value_mask, source_length)  # (batch,)
        if self.local == "m":
            positions = self._query_positions(check, query, query_positions)  # (batch, t_q)
            last = ops.maximum(lengths - 1.0, 0.0)[:, None]  # (batch, 1)
            return ops.minimum(ops.maximum(positions, 0.0), last)  # (batch, t_q)
        hidden = ops.tanh(ops.einsum("bqd,du->bqu", query, ops.cast(self.w_p, query.dtype)))  # (batch, t_q, units)
        aligned = ops.einsum("bqu,u->bq", hidden, ops.cast(self.v_p, hidden.dtype))  # (batch, t_q)
        return lengths[:, None] * ops.sigmoid(ops.cast(aligned, "float32"))  # (batch, t_q)

    def attention_range(self, query, value_mask, query_positions, t_in):
        """Global: the real positions. Local: those within `D` of `p_t` (rounded half up), and for
        local-p the Gaussian `exp(-(s - p_t)^2 / (2 sigma^2))`, `sigma = D / 2`."""
        if self.local is None:
            return value_mask, None
        centre = self.predict_positions(query, value_mask, query_positions, source_length=t_in)  # (batch, t_q)
        source = ops.arange(t_in, dtype="float32")[None, None, :]  # (1, 1, t_in)
        distance = source - ops.floor(centre + 0.5)[:, :, None]  # (batch, t_q, t_in), whole numbers
        allowed = ops.abs(distance) <= self.window  # (batch, t_q, t_in)
        if value_mask is not None:
            allowed = ops.logical_and(allowed, ops.expand_dims(value_mask, 1))  # (batch, t_q, t_in)
        if self.local == "m":
            return allowed, None
        sigma = self.window / 2.0
        gaussian = ops.exp(-ops.square(source - centre[:, :, None]) / (2.0 * sigma**2))  # (batch, t_q, t_in)
        return allowed, gaussian

    def _source_lengths(self, query, value_mask, source_length):
        """`S`, the number of real source positions, float32 `(batch,)`."""
        ones = ops.ones_like(query[:, 0, 0], dtype="float32")  # (batch,)
        if value_mask is not None:
            return ops.sum(ops.cast(value_mask, "float32"), axis=-1) * ones  # (batch,)
        if source_length is None:
            raise ValueError("predict_positions needs the source length: pass value_mask (batch, t_in) or "
                             "source_length. Received: value_mask=None, source_length=None")
        return ops.cast(source_length, "float32") * ones  # (batch,)

    def _query_positions(self, check, query, query_positions):
        """`query_positions` as float32 `(batch, t_q)`; `0, ..., t_q - 1` when None."""
        if query_positions is None:
            query_positions = ops.arange(ops.shape(query)[1])  # (t_q,)
        elif len(query_positions.shape) == 1:
            check("query_positions", query_positions, ("t_q",))
        else:
            check("query_positions", query_positions, ("batch", "t_q"))
        positions = ops.cast(query_positions, "float32")
        if len(positions.shape) == 1:
            positions = positions[None, :]  # (1, t_q)
        return positions * ops.ones_like(query[:, :, 0], dtype="float32")  # (batch, t_q)

    def get_config(self):
        return {
            **super().get_config(),
            "score": self.score,
            "scale": self.scale,
            "units": self.units,
            "max_length": self.max_length,
            "local": self.local,
            "window": self.window,
        }


def unit_vectors(x):
    """`x (..., d) / sqrt(|x|^2 + eps)`, computed in float32 and returned in `x`'s dtype: a zero
    vector stays zero (no NaN), and float16 neither overflows in `|x|^2` nor divides by zero."""
    x32 = ops.cast(x, "float32")
    norm = ops.sqrt(ops.sum(ops.square(x32), axis=-1, keepdims=True) + COSINE_EPSILON)  # (..., 1)
    return ops.cast(x32 / norm, x.dtype)


def _shapes(query_shape, value_shape, key_shape):
    """Build shapes, from Keras' list form too: `[query, value(, key)]` arrives as one list of shapes."""
    if value_shape is None and query_shape and isinstance(query_shape[0], (list, tuple)):
        shapes = list(query_shape) + [None]
        return shapes[0], shapes[1], shapes[2]
    if value_shape is None:
        raise ValueError(f"value is required to build the layer. Received: value_shape=None")
    return query_shape, value_shape, key_shape
