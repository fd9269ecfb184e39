"""Multi-head scaled dot-product attention (Vaswani et al. 2017, section 3.2), written with `keras.ops`.

    head_i  = softmax(Q W_i^Q (K W_i^K)^T / sqrt(key_dim)) V W_i^V      i = 1 .. heads
    context = Concat(head_1, ..., head_heads) W^O

Each head has its own projections, so each can look at a different source position. The layer is a
`ScoredAttention` (the RNN `Decoder` takes it as its Luong attention, query `h_t`) and is also the
self-attention and cross-attention of the Transformer, which calls its pieces one by one:

    queries = project_queries(query)         # (batch, heads, t_q, key_dim)
    keys    = project_keys(key)              # (batch, heads, t_in, key_dim), once per sentence
    values  = project_values(value)          # (batch, heads, t_in, value_dim), once per sentence
    context, weights = attend(queries, keys, values, mask, relative)

As a `ScoredAttention`, `prepare_keys(value)` projects the encoder outputs once per sentence as both
keys and values (`{"keys", "values"}`), so that a decoder step only projects its query.

`relative_clip=k` adds the relative positions of Shaw et al. (2018) inside the scores and the values,
and `use_causal_mask=True` lets a query step see only key steps at or before its own position.
"""

import math

import keras
from keras import ops

from tfattn.layers.attention import ScoredAttention, build_shapes, large_negative
from tfattn.layers.checks import positive_int, refuse_unused
from tfattn.layers.positions import RelativePositions, default_positions


def renamed_heads(heads, num_heads, layer="MultiHeadAttention"):
    """`heads`, the old name of `num_heads`, with a DeprecationWarning; both given is refused."""
    import warnings

    if num_heads != 4:
        raise ValueError(f"Give num_heads only (heads is its old name). Received: heads={heads!r}, "
                         f"num_heads={num_heads!r}")
    warnings.warn(f"{layer}(heads=...) is renamed num_heads=..., as Keras names it; heads will be "
                  "removed in a later release.", DeprecationWarning, stacklevel=3)
    return heads


def glorot(fan_in, fan_out):
    """Glorot-uniform limits of a `(fan_in, fan_out)` matrix, for a kernel stored per head."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return keras.initializers.RandomUniform(-limit, limit)


def masked_head_softmax(scores, mask=None):
    """Softmax of `scores (batch, heads, t_q, t_in)` over `t_in`, exactly 0 where bool `mask`
    `(batch, t_q or 1, t_in)` is False; a row with every position masked gets all zeros."""
    if mask is None:
        return ops.softmax(scores, axis=-1)
    mask = ops.expand_dims(mask, 1)  # (batch, 1, t_q, t_in): the same for every head
    scores = ops.where(mask, scores, ops.cast(large_negative(scores.dtype), scores.dtype))
    weights = ops.softmax(scores, axis=-1)  # (batch, heads, t_q, t_in)
    return ops.where(mask, weights, ops.zeros_like(weights))


def causal_mask(query_positions, key_positions):
    """True where key step `j` is at or before query step `i`: bool `(batch, t_q, t_in)`."""
    return ops.expand_dims(key_positions, 1) <= ops.expand_dims(query_positions, 2)


@keras.saving.register_keras_serializable(package="tfattn")
class MultiHeadAttention(ScoredAttention):
    """Multi-head scaled dot-product attention, optionally with relative positions and a causal mask.

    Every head scores, softmaxes and sums on its own; the weights returned are their **mean over
    heads** `(batch, t_q, t_in)` (each row still sums to 1 and padding still gets exactly 0), and
    `return_heads=True` returns every head's weights `(batch, heads, t_q, t_in)` instead. The
    projections have no biases, as in the paper's equations.

    How it differs from `keras.layers.MultiHeadAttention` (whose argument names it shares):
    it always returns a tuple `(context, weights)`, as tfattn's other attention layers do, where
    Keras returns the context alone unless `return_attention_scores=True` (and then every head's
    weights, which `return_heads=True` gives here); it takes masks by side (`value_mask`,
    `query_mask`), from the inputs' Keras masks when not given, rather than an `attention_mask`;
    it has Shaw et al.'s relative positions (`relative_clip`); and a decoder projects the keys
    and values once per sentence (`prepare_keys`) and only the query at each step, where Keras'
    layer projects all three at every call. It has no biases and no `key_dim` requirement
    (`num_heads` divides the query size by default).

    Args:
        num_heads: int. Number of heads, as Keras names it (`heads=` is still taken, with a
            `DeprecationWarning`). Defaults to `4`.
        key_dim: int or None. Size of each head's queries and keys; `None` takes `dq // num_heads`
            (then `num_heads` must divide the query size). Defaults to `None`.
        value_dim: int or None. Size of each head's values; `None` takes `dv // num_heads` (then
            `num_heads` must divide the value size). Defaults to `None`.
        output_dim: int or None. Size of the context; `None` takes `dv`, so the layer fits where a
            single-head attention was. Defaults to `None`.
        relative_clip: int or None. Shaw et al.'s clipping distance `k`; `None` uses no relative
            positions. Defaults to `None`.
        relative_values: bool. With `relative_clip`, add `a^V_ij` to the values too (eq. 3), not
            only `a^K_ij` to the keys (eq. 4). Defaults to `True`.
        dropout: float. Dropout on the attention weights in training. Defaults to `0.0`.
        seed: int or None. Seed of that dropout. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        query_kernel: `W^Q (dq, heads, key_dim)`. key_kernel: `W^K (dk, heads, key_dim)`.
        value_kernel: `W^V (dv, heads, value_dim)`. output_kernel: `W^O (heads, value_dim,
        output_dim)`. relative: the `RelativePositions` layer, or None.

    Call arguments:
        query: `(batch, t_q, dq)`. value: `(batch, t_in, dv)`. key: optional `(batch, t_in, dk)`,
            defaults to `value`. query_mask, value_mask, key_mask, training: as `ScoredAttention`
            takes them.
        prepared_keys: optional `prepare_keys(value)`: the projected keys and, unless a separate
            `key` is given, the projected values.
        use_causal_mask: bool. Key step `j` is seen only by query steps `i >= j` (by position).
        return_heads: bool. Return every head's weights rather than their mean.
        query_positions: optional int `(batch, t_q)`; key_positions: optional int `(batch, t_in)`.
            The positions the causal mask and the relative positions use; default `0, 1, ...`.

    Returns:
        `(context, weights)`: context `(batch, t_q, output_dim)`; weights `(batch, t_q, t_in)`, the
        mean over heads, or `(batch, heads, t_q, t_in)` with `return_heads=True`.

    Example:

    >>> attention = MultiHeadAttention(num_heads=2)
    >>> query, value = np.ones((2, 3, 4)), np.ones((2, 5, 6))
    >>> context, weights = attention(query, value)
    >>> context.shape, weights.shape
    (TensorShape([2, 3, 6]), TensorShape([2, 3, 5]))

    Reference: Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, section 3.2.1
    (eq. 1) and 3.2.2; relative positions: Shaw et al. 2018, arXiv 1803.02155, eq. 3-5.
    """

    def __init__(self, num_heads=4, key_dim=None, value_dim=None, output_dim=None, relative_clip=None,
                 relative_values=True, **kwargs):
        if "heads" in kwargs:  # the name of tfattn 0.1, and of configs saved by it
            num_heads = renamed_heads(kwargs.pop("heads"), num_heads)
        if kwargs.get("probability", "soft") != "soft":  # every head's weights are a softmax
            raise ValueError(f"MultiHeadAttention is soft attention only: hard attention is for BahdanauAttention "
                             f"and LuongAttention. Received: probability={kwargs['probability']!r}")
        super().__init__(**kwargs)
        self.num_heads = positive_int("num_heads", num_heads)
        self.key_dim = None if key_dim is None else positive_int("key_dim", key_dim)
        self.value_dim = None if value_dim is None else positive_int("value_dim", value_dim)
        self.output_dim = None if output_dim is None else positive_int("output_dim", output_dim)
        self.relative_clip = None if relative_clip is None else positive_int("relative_clip", relative_clip)
        self.relative_values = bool(relative_values)
        refuse_unused("relative_values", self.relative_values, True, relative_clip is not None, "relative positions "
                      "(relative_clip)", f"relative_clip={relative_clip!r}")
        self.relative = None

    @property
    def heads(self):
        """The number of heads, `num_heads` (read by the decoder and the export, as for any layer)."""
        return self.num_heads

    def head_size(self, name, size, given):
        """`given`, or `size // num_heads` when `num_heads` divides `size` (else a ValueError)."""
        if given is not None:
            return given
        if size % self.num_heads:
            raise ValueError(f"num_heads must divide the {name} size when {name}_dim is not given: {size} is not a "
                             f"multiple of num_heads={self.num_heads}. Received: num_heads={self.num_heads}, "
                             f"{name} size {size}")
        return size // self.num_heads

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape, value_shape, key_shape = build_shapes(query_shape, value_shape, key_shape)
        dq, dv = query_shape[-1], value_shape[-1]
        dk = (value_shape if key_shape is None else key_shape)[-1]
        kd, vd = self.head_size("key", dq, self.key_dim), self.head_size("value", dv, self.value_dim)
        out = self.output_dim or dv
        h = self.num_heads
        self.query_kernel = self.add_weight(name="query_kernel", shape=(dq, h, kd), initializer=glorot(dq, h * kd))
        self.key_kernel = self.add_weight(name="key_kernel", shape=(dk, h, kd), initializer=glorot(dk, h * kd))
        self.value_kernel = self.add_weight(name="value_kernel", shape=(dv, h, vd), initializer=glorot(dv, h * vd))
        self.output_kernel = self.add_weight(name="output_kernel", shape=(h, vd, out),
                                             initializer=glorot(h * vd, out))
        if self.relative_clip:
            self.relative = RelativePositions(self.relative_clip, kd, vd if self.relative_values else None,
                                              name="relative", dtype=self.dtype_policy)
            self.relative.build()

    # -- the pieces ---------------------------------------------------------------------------------

    def project_queries(self, query):
        """`query (batch, t_q, dq)` -> `Q W_i^Q` for every head, `(batch, heads, t_q, key_dim)`."""
        return ops.einsum("bqd,dhe->bhqe", query, ops.cast(self.query_kernel, query.dtype))

    def project_keys(self, key):
        """`key (batch, t_in, dk)` -> `K W_i^K` for every head, `(batch, heads, t_in, key_dim)`."""
        return ops.einsum("bkd,dhe->bhke", key, ops.cast(self.key_kernel, key.dtype))

    def prepare_keys(self, key):
        """What a decoder computes once per sentence: `{"keys": K W_i^K, "values": K W_i^V}`, each
        `(batch, heads, t_in, ...)`, for attending over `key` as both keys and values (as the
        `Decoder` does); `call` uses the values only when no separate `key` is given."""
        return {"keys": self.project_keys(key), "values": self.project_values(key)}

    def project_values(self, value):
        """`value (batch, t_in, dv)` -> `V W_i^V` for every head, `(batch, heads, t_in, value_dim)`."""
        return ops.einsum("bkd,dhe->bhke", value, ops.cast(self.value_kernel, value.dtype))

    def relative_embeddings(self, query_positions, key_positions):
        """Shaw's `(a^K, a^V)` for the pairs of positions, each `(batch, t_q, t_in, size)` (a^V may
        be None); `(None, None)` without relative positions."""
        if self.relative is None:
            return None, None
        return self.relative(query_positions, key_positions)

    def compute_scores(self, queries, keys, a_key=None):
        """Scaled dot products of every head: `queries (batch, heads, t_q, key_dim)` and `keys (batch,
        heads, t_in, key_dim)` -> `(batch, heads, t_q, t_in)`; with Shaw's `a_key (batch, t_q, t_in,
        key_dim)`, `e_ij = q_i (k_j + a^K_ij)^T / sqrt(key_dim)` (eq. 4)."""
        scores = ops.einsum("bhqe,bhke->bhqk", queries, keys)  # (batch, heads, t_q, t_in)
        if a_key is not None:
            a_key = ops.cast(a_key, queries.dtype)
            if a_key.shape[0] == 1:  # the same positions in every row: (1, t_q, t_in, key_dim)
                scores = scores + ops.einsum("bhqe,qke->bhqk", queries, a_key[0])
            else:
                scores = scores + ops.einsum("bhqe,bqke->bhqk", queries, a_key)
        return scores / ops.cast(math.sqrt(queries.shape[-1]), scores.dtype)

    def attend(self, queries, keys, values, mask=None, relative=(None, None), training=None):
        """Projected queries, keys and values (see above) and a bool `mask (batch, t_q or 1, t_in)` ->
        `context (batch, t_q, output_dim)` and every head's weights `(batch, heads, t_q, t_in)`.
        `relative` is `relative_embeddings(...)`."""
        a_key, a_value = relative
        # 1. Scores and the masked softmax, per head.
        weights = masked_head_softmax(self.compute_scores(queries, keys, a_key), mask)  # (batch, heads, t_q, t_in)
        weights = self.dropout_layer(weights, training=training)
        # 2. Each head's weighted sum of its values (plus a^V_ij, Shaw eq. 3).
        heads = ops.einsum("bhqk,bhkv->bhqv", weights, values)  # (batch, heads, t_q, value_dim)
        if a_value is not None:
            a_value = ops.cast(a_value, weights.dtype)
            if a_value.shape[0] == 1:  # the same positions in every row: (1, t_q, t_in, value_dim)
                heads = heads + ops.einsum("bhqk,qkv->bhqv", weights, a_value[0])
            else:
                heads = heads + ops.einsum("bhqk,bqkv->bhqv", weights, a_value)
        # 3. Concat(head_1, ..., head_h) W^O, written as one sum over heads and value features.
        output_kernel = ops.cast(self.output_kernel, heads.dtype)  # (heads, value_dim, output_dim)
        context = ops.einsum("bhqv,hvo->bqo", heads, output_kernel)  # (batch, t_q, output_dim)
        return context, weights

    # -- the layer ----------------------------------------------------------------------------------

    def call(self, query, value=None, key=None, query_mask=None, value_mask=None, key_mask=None,
             prepared_keys=None, training=None, mask=None, use_causal_mask=False, return_heads=False,
             query_positions=None, key_positions=None):
        # 1. Inputs and masks, checked (as every ScoredAttention does).
        query, value, key, query_mask, value_mask = self._inputs(
            query, value, key, query_mask, value_mask, key_mask, mask)
        key_input = value if key is None else key
        query_positions = default_positions(query) if query_positions is None else query_positions  # (batch, t_q)
        key_positions = default_positions(key_input) if key_positions is None else key_positions  # (batch, t_in)
        # 2. Projections, per head.
        queries = self.project_queries(query)  # (batch, heads, t_q, key_dim)
        if prepared_keys is None:
            keys, values = self.project_keys(key_input), self.project_values(value)  # (batch, heads, t_in, ...)
        else:
            keys = prepared_keys["keys"]  # (batch, heads, t_in, key_dim)
            # (batch, heads, t_in, value_dim): prepared from the value itself unless a separate key was given
            values = prepared_keys["values"] if key is None else self.project_values(value)
        # 3. Which (query step, key step) pairs may attend: padding, query mask, causal order.
        allowed = self.allowed_pairs(query_mask, value_mask, query_positions, key_positions, use_causal_mask)
        relative = self.relative_embeddings(query_positions, key_positions)
        # 4. Attention per head; the context and the weights (mean over heads unless return_heads).
        context, weights = self.attend(queries, keys, values, allowed, relative, training)
        return context, weights if return_heads else ops.mean(weights, axis=1)

    @staticmethod
    def allowed_pairs(query_mask, value_mask, query_positions, key_positions, causal):
        """A bool `(batch, t_q or 1, t_in)` mask of the pairs that may attend, or None for all."""
        allowed = None if value_mask is None else ops.expand_dims(value_mask, 1)  # (batch, 1, t_in)
        if causal:
            order = causal_mask(query_positions, key_positions)  # (batch, t_q, t_in)
            allowed = order if allowed is None else ops.logical_and(allowed, order)
        if query_mask is not None:
            rows = ops.expand_dims(query_mask, 2)  # (batch, t_q, 1)
            allowed = rows if allowed is None else ops.logical_and(allowed, rows)
        return allowed

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "output_dim": self.output_dim,
            "relative_clip": self.relative_clip,
            "relative_values": self.relative_values,
        }
