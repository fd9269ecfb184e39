"""The attention base: masks, softmax and the weighted sum, written once for every score.

Every attention layer of the package (Bahdanau's in `bahdanau.py`, Luong's in `luong.py`) is a
`ScoredAttention`: a subclass only says how to turn a query and the keys into scores, in
`compute_scores`; this base does the rest, in this order:

    scores  = compute_scores(query, keys)               # (batch, t_q, t_in)
    allowed, position_weights = attention_range(...)    # global: the real positions; local: a window
    weights = softmax(scores), not allowed = 0          # (batch, t_q, t_in)
    weights = weights * position_weights                # local-p only: a Gaussian around p_t (local.py)
    weights = one_hot(one position)                     # probability="hard" only (hard.py)
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

from tfattn.layers.checks import ShapeChecker, as_float, rate
from tfattn.layers.hard import one_position
from tfattn.layers.options import PROBABILITIES


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
    drawn from the soft weights in training, their argmax at inference, trained straight-through
    (`tfattn.layers.hard`). The weights returned are then exactly one-hot; padding is never chosen,
    and a row with every position masked stays all zeros.

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
            `[query, value]` / `[query, value, key]`, with `mask=[query_mask, value_mask]`. Integer
            or bool query, value and key are cast to the layer's compute dtype, as `keras.layers.Dense`
            computes on them; another dtype (a string) is refused with a ValueError naming it.
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

    Reference: Xu et al. 2015, arXiv 1502.03044, section 4.1 (hard attention; see `tfattn.layers.hard`).
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
        `weights` in training, the argmax otherwise; the gradient is that of `weights` (`tfattn.layers.hard`)."""
        return one_position(weights, training, self.seed_generator)

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
        query, value, key = (as_float(name, x, self.compute_dtype)
                             for name, x in (("query", query), ("value", value), ("key", key)))
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
    """Softmax of `scores (..., t_in)` over `t_in`, exactly 0 where the bool `mask` is False; a row
    with every position masked gets all zeros. `mask` has the rank of `scores` (broadcast against
    it), or, for scores `(batch, t_q, t_in)`, is `(batch, t_in)`: the same for every query step."""
    if mask is None:
        return ops.softmax(scores, axis=-1)
    if len(mask.shape) < len(scores.shape):
        mask = ops.expand_dims(mask, 1)  # (batch, 1, t_in)
    scores = ops.where(mask, scores, ops.cast(large_negative(scores.dtype), scores.dtype))
    weights = ops.softmax(scores, axis=-1)  # (..., t_in)
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


def build_shapes(query_shape, value_shape, key_shape):
    """Build shapes, from Keras' list form too: `[query, value(, key)]` arrives as one list of shapes."""
    if value_shape is None and query_shape and isinstance(query_shape[0], (list, tuple)):
        shapes = list(query_shape) + [None]
        return shapes[0], shapes[1], shapes[2]
    if value_shape is None:
        raise ValueError("value is required to build the layer. Received: value_shape=None")
    return query_shape, value_shape, key_shape
