"""Positions for self-attention, which by itself is a bag of words.

Attention weighs every position by its content alone: permute the inputs of a self-attention layer
and its outputs permute the same way (a test shows it). Order has to be put in by hand:

- `SinusoidalPositions` adds Vaswani's fixed sinusoids to the embeddings (any length, no weights);
- `LearnedPositions` adds one learned vector per position, up to `max_length`;
- `RelativePositions` is used inside the attention scores (Shaw et al. 2018): one learned vector
  per clipped distance `j - i`, added to the keys (and to the values).

The two absolute kinds are layers that take `inputs (batch, t, dim)` and return `inputs + positions`;
`positions (batch, t)` int, the index of each step, defaults to `0, 1, ..., t - 1` and is given by a
decoder that runs one step at a time.
"""

import keras
from keras import ops

from tfattn.layers.checks import ShapeChecker, positive_int


def default_positions(inputs):
    """`0, 1, ..., t - 1` for the steps of `inputs (batch, t, ...)`: int32 `(1, t)`."""
    return ops.expand_dims(ops.arange(ops.shape(inputs)[1], dtype="int32"), 0)


def sinusoids(positions, dim, dtype="float32"):
    """Vaswani's table at the given positions: `positions (batch, t)` int -> `(batch, t, dim)`.

    `PE(pos, 2i) = sin(pos / 10000^(2i / dim))` and `PE(pos, 2i + 1) = cos(pos / 10000^(2i / dim))`:
    even features are sines, odd features cosines, of the same frequency. (The angles are computed
    in float32 and cast, so float16 does not lose the position.)
    """
    features = ops.arange(dim, dtype="int32")  # (dim,)
    exponent = ops.cast(2 * (features // 2), "float32") / float(dim)  # 2i / dim for features 2i and 2i + 1
    frequency = ops.power(10000.0, -exponent)  # (dim,)
    angles = ops.cast(ops.expand_dims(positions, -1), "float32") * frequency  # (batch, t, dim)
    table = ops.where(features % 2 == 0, ops.sin(angles), ops.cos(angles))  # (batch, t, dim)
    return ops.cast(table, dtype)


@keras.saving.register_keras_serializable(package="tfattn")
class SinusoidalPositions(keras.layers.Layer):
    """Adds the fixed sinusoidal position encodings of the Transformer to its inputs.

    No weights and no length limit: position `pos` gets `PE(pos, 2i) = sin(pos / 10000^(2i/dim))`,
    `PE(pos, 2i+1) = cos(pos / 10000^(2i/dim))`, so `PE(pos, 0) = sin(pos)` and `PE(pos, 1) = cos(pos)`.

    Args:
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float `(batch, t, dim)`, e.g. scaled embeddings.
        positions: optional int `(batch, t)` or `(1, t)`, the position of each step. Defaults to
            `0, ..., t - 1`.

    Returns:
        `inputs + PE[positions]`, `(batch, t, dim)`; the Keras mask passes through.

    Example:

    >>> layer = SinusoidalPositions()
    >>> out = layer(np.zeros((1, 3, 4)))
    >>> np.round(out[0, :, 0], 4).tolist()   # PE(pos, 0) = sin(pos)
    [0.0, 0.8415, 0.9093]

    Reference: Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, section 3.5.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, positions=None):
        ShapeChecker()("inputs", inputs, ("batch", "t", "dim"))
        positions = default_positions(inputs) if positions is None else positions
        return inputs + sinusoids(positions, inputs.shape[-1], inputs.dtype)  # (batch, t, dim)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="tfattn")
class LearnedPositions(keras.layers.Layer):
    """Adds one learned vector per position (`0 .. max_length - 1`) to its inputs.

    Args:
        max_length: int. Number of positions with a vector. A longer input is refused with a
            `ValueError` where its length is known; positions given to a step must be below it.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        table: `(max_length, dim)`, row `pos` the vector of position `pos`.

    Call arguments:
        inputs: float `(batch, t, dim)`. positions: optional int `(batch, t)` or `(1, t)`;
        defaults to `0, ..., t - 1`.

    Returns:
        `inputs + table[positions]`, `(batch, t, dim)`; the Keras mask passes through.

    Example:

    >>> layer = LearnedPositions(max_length=10)
    >>> layer(np.zeros((2, 3, 4))).shape
    TensorShape([2, 3, 4])

    Reference: Gehring et al. 2017, "Convolutional Sequence to Sequence Learning", arXiv 1705.03122,
    section 3.1 (learned position embeddings); Vaswani et al. 2017, section 3.5 compares them with
    sinusoids.
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = positive_int("max_length", max_length)
        self.supports_masking = True

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(self.max_length, input_shape[-1]),
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, inputs, positions=None):
        ShapeChecker()("inputs", inputs, ("batch", "t", "dim"))
        t = inputs.shape[1]
        if positions is None and t is not None and t > self.max_length:
            raise ValueError(f"inputs have {t} steps but LearnedPositions has vectors for max_length="
                             f"{self.max_length} positions. Received: inputs.shape={tuple(inputs.shape)}")
        positions = default_positions(inputs) if positions is None else positions
        return inputs + ops.cast(ops.take(self.table, positions, axis=0), inputs.dtype)  # (batch, t, dim)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


@keras.saving.register_keras_serializable(package="tfattn")
class RelativePositions(keras.layers.Layer):
    """Learned relative-position vectors of Shaw et al. (2018), for use inside self-attention.

    The pair (query step `i`, key step `j`) gets `a^K_ij = w^K[clip(j - i, -k, k)]` and
    `a^V_ij = w^V[clip(j - i, -k, k)]`: `2k + 1` learned vectors each, shared by all heads (and
    distances beyond `k` share the vector of distance `k`). The attention adds `a^K` to the keys
    inside the score and `a^V` to the values (see `MultiHeadAttention(relative_clip=k)`).

    Args:
        clip: int. The largest distance `k` with a vector of its own.
        key_dim: int. Size of `a^K` (the per-head key size).
        value_dim: int or None. Size of `a^V` (the per-head value size); `None` keeps only the key
            term (nothing is added to the values). Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes (once built):
        key_table: `w^K (2k + 1, key_dim)`; value_table: `w^V (2k + 1, value_dim)`. Row `d + k` is
        distance `d`.

    Call arguments:
        query_positions: int `(batch, t_q)` (or `(1, t_q)`). key_positions: int `(batch, t_in)`
        (or `(1, t_in)`).

    Returns:
        `(a_key, a_value)`: `(batch, t_q, t_in, key_dim)` and `(batch, t_q, t_in, value_dim)` (or
        None without values).

    Reference: Shaw, Uszkoreit, Vaswani 2018, "Self-Attention with Relative Position Representations",
    arXiv 1803.02155, eq. 3-6.
    """

    def __init__(self, clip, key_dim, value_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.clip = positive_int("clip", clip)
        self.key_dim = positive_int("key_dim", key_dim)
        self.value_dim = None if value_dim is None else positive_int("value_dim", value_dim)

    def build(self, query_positions_shape=None, key_positions_shape=None):
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.key_table = self.add_weight(name="key_table", shape=(2 * self.clip + 1, self.key_dim), initializer=init)
        if self.value_dim:
            self.value_table = self.add_weight(name="value_table", shape=(2 * self.clip + 1, self.value_dim),
                                               initializer=init)

    def distances(self, query_positions, key_positions):
        """Row indices `clip(j - i, -k, k) + k`, int32 `(batch, t_q, t_in)`."""
        j = ops.expand_dims(ops.cast(key_positions, "int32"), 1)  # (batch, 1, t_in)
        i = ops.expand_dims(ops.cast(query_positions, "int32"), 2)  # (batch, t_q, 1)
        return ops.clip(j - i, -self.clip, self.clip) + self.clip  # (batch, t_q, t_in)

    def call(self, query_positions, key_positions):
        rows = self.distances(query_positions, key_positions)  # (batch, t_q, t_in)
        table = lambda w: ops.cast(w, self.compute_dtype)
        a_key = ops.take(table(self.key_table), rows, axis=0)  # (batch, t_q, t_in, key_dim)
        a_value = None
        if self.value_dim:
            a_value = ops.take(table(self.value_table), rows, axis=0)  # (batch, t_q, t_in, value_dim)
        return a_key, a_value

    def get_config(self):
        return {**super().get_config(), "clip": self.clip, "key_dim": self.key_dim, "value_dim": self.value_dim}
