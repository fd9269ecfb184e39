"""Bahdanau's additive attention: `score = v^T tanh(W1 q + W2 k)`, a small network per pair.

The masking, softmax and weighted sum are the base's (`tfattn.layers.attention.ScoredAttention`);
this file only scores.
"""

import keras
from keras import ops

from tfattn.layers.attention import ScoredAttention, build_shapes
from tfattn.layers.checks import positive_int


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
        query_shape, value_shape, key_shape = build_shapes(query_shape, value_shape, key_shape)
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
