"""Luong's multiplicative attention and its relatives: five scores, global or local.

The scores are here (section 3.1: dot, general, concat, location; and the cosine); the local windows
are in `tfattn.layers.local`, hard attention in `tfattn.layers.hard`, and the masking, softmax and
weighted sum in the base, `tfattn.layers.attention.ScoredAttention`.
"""

import keras
from keras import ops

from tfattn.layers.attention import ScoredAttention, build_shapes, large_negative
from tfattn.layers.checks import ShapeChecker, positive_int, refuse_unused
from tfattn.layers.local import gaussian, monotonic, predictive, source_lengths, target_steps, window
from tfattn.layers.options import LOCALS, SCORES

# The cosine score's gain at initialization: see `LuongAttention`.
COSINE_GAIN = 10.0
# Inside the cosine's norms, `sqrt(|x|^2 + eps)`: a zero vector has norm sqrt(eps), not 0.
COSINE_EPSILON = 1e-12


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

    Range (section 3.2): `local=None` is global attention (every real source position);
    `local="m"` (monotonic) and `local="p"` (predictive) attend within a window of `2D + 1`
    positions, `D = window`, around an aligned position `p_t` (`tfattn.layers.local` says how each
    finds `p_t`). `predict_positions` returns `p_t`, e.g. to mark it in a plot.

    Departures from the paper (`docs/models.md`, "Where the code departs from the papers"): the
    window is centred on `p_t` rounded half up, and local-m's `p_t = t` is clipped to the last word
    (`tfattn.layers.local` says where each differs); `scale=True` adds a gain the paper's scores do
    not have (`ModelConfig` and `tfattn train` turn it on by default).

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
        refuse_unused("window", window, 10, local is not None, "local attention (local='m' or 'p')", f"local={local!r}")
        refuse_unused("units", units, None, score == "concat" or local == "p", "score='concat' and local='p'",
                      f"score={score!r}, local={local!r}")

    @property
    def uses_positions(self):
        """local-m centres its window on the query's target step; local-p predicts it from the query."""
        return self.local == "m"

    @property
    def has_gain(self):
        """Whether the scores are multiplied by the learned scalar `gain`."""
        return self.scale or self.score == "cosine"

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape, value_shape, key_shape = build_shapes(query_shape, value_shape, key_shape)
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
        lengths = source_lengths(query, value_mask, source_length)  # (batch,)
        if self.local == "m":
            return monotonic(target_steps(check, query, query_positions), lengths)  # (batch, t_q)
        return predictive(query, self.w_p, self.v_p, lengths)  # (batch, t_q)

    def attention_range(self, query, value_mask, query_positions, t_in):
        """Global: the real positions. Local: the window around `p_t` (`tfattn.layers.local.window`),
        and for local-p the Gaussian (`tfattn.layers.local.gaussian`) applied after the softmax."""
        if self.local is None:
            return value_mask, None
        centre = self.predict_positions(query, value_mask, query_positions, source_length=t_in)  # (batch, t_q)
        allowed = window(centre, t_in, self.window, value_mask)  # (batch, t_q, t_in)
        return allowed, (gaussian(centre, t_in, self.window) if self.local == "p" else None)

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
