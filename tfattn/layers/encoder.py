"""The encoder: token ids -> one annotation vector per source position, plus a state for the decoder."""

import keras
from keras import ops

from tfattn.layers.checks import ShapeChecker, positive_int, rate, token_ids
from tfattn.layers.options import RNNS


def make_rnn(kind, units, **kwargs):
    """A cuDNN-eligible GRU or LSTM layer (default activations, `reset_after=True`, no recurrent dropout)."""
    if kind not in RNNS:
        raise ValueError(f"rnn must be one of {RNNS}. Received: rnn={kind!r}")
    layer = keras.layers.GRU if kind == "gru" else keras.layers.LSTM
    return layer(units, return_sequences=True, return_state=True, **kwargs)


def state_dict(kind, states):
    """Names the states a Keras RNN returns: `{"h": h}` for a GRU, `{"h": h, "c": c}` for an LSTM."""
    return {"h": states[0]} if kind == "gru" else {"h": states[0], "c": states[1]}


@keras.saving.register_keras_serializable(package="tfattn")
class Encoder(keras.layers.Layer):
    """Embeds source ids and runs a (bidirectional, stacked) GRU or LSTM over them.

    Padding (id 0) is masked: the recurrent layers skip it (their outputs there are zeros), so a
    sentence gets the same annotations alone or in a batch of longer sentences. With
    `bidirectional=True` each direction has `units // 2` cells and their outputs and final states
    are concatenated, so `outputs` always have `units` features and the final state fits a decoder
    of `units` cells. The recurrent layers are Keras's `GRU` / `LSTM` (cuDNN on a GPU).

    Args:
        vocab_size: int. Size of the source vocabulary (id 0 is padding).
        embedding_dim: int. Size of the token embeddings.
        units: int. Output size (must be even when `bidirectional`).
        rnn: str. `"gru"` or `"lstm"`. Defaults to `"gru"`.
        bidirectional: bool. Read the sentence both ways. Defaults to `True`.
        num_layers: int. Number of stacked recurrent layers. Defaults to `1`.
        dropout: float. Dropout on the embeddings and between layers. Defaults to `0.0`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        source: int tensor `(batch, t_in)`, right-padded with 0. An id outside 0 .. vocab_size - 1
            is refused with a ValueError where the values are known (an eager call; `checks.token_ids`).
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(outputs, state, mask)`: outputs `(batch, t_in, units)`, carrying the padding mask as their
        Keras mask; state a dict `{"h": (batch, units)}` (plus `"c"` for an LSTM) from the last
        layer; mask bool `(batch, t_in)`, `False` on padding.

    Attributes:
        embedding: the `Embedding` layer. rnn_layers: the recurrent layers, first to last: Keras
        `GRU`/`LSTM` layers, each in a `Bidirectional` wrapper when `bidirectional`. dropout_layer:
        the dropout before each of them. `merge_states` names a Keras layer's final states.

    Example:

    >>> encoder = Encoder(vocab_size=100, embedding_dim=16, units=32)
    >>> outputs, state, mask = encoder(np.array([[5, 6, 7, 0]]))
    >>> outputs.shape, state["h"].shape, mask.numpy().tolist()
    (TensorShape([1, 4, 32]), TensorShape([1, 32]), [[True, True, True, False]])

    Reference: Bahdanau et al., arXiv 1409.0473, section 3.2 (bidirectional annotations).
    """

    def __init__(self, vocab_size, embedding_dim, units, rnn="gru", bidirectional=True, num_layers=1,
                 dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.embedding_dim = positive_int("embedding_dim", embedding_dim)
        self.units = positive_int("units", units)
        if bidirectional and units % 2:
            raise ValueError(f"units must be even when bidirectional=True. Received: units={units!r}")
        self.rnn = rnn
        self.bidirectional = bidirectional
        self.num_layers = positive_int("num_layers", num_layers)
        self.dropout = rate("dropout", dropout)
        self.supports_masking = True
        # Sub-layers compute in the encoder's dtype (e.g. "float16").
        self.embedding = keras.layers.Embedding(self.vocab_size, self.embedding_dim, name="embedding", dtype=self.dtype_policy)
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        size = self.units // 2 if bidirectional else self.units
        self.rnn_layers = [self._make_layer(size, i) for i in range(num_layers)]

    def _make_layer(self, size, i):
        layer = make_rnn(self.rnn, size, name=f"{self.rnn}_{i}", zero_output_for_mask=True, dtype=self.dtype_policy)
        if self.bidirectional:
            layer = keras.layers.Bidirectional(layer, merge_mode="concat", name=f"bidirectional_{i}",
                                               dtype=self.dtype_policy)
        return layer

    def build(self, source_shape):
        self.embedding.build(source_shape)
        shape = (*source_shape[:2], self.embedding_dim)
        for layer in self.rnn_layers:
            layer.build(shape)
            shape = (*source_shape[:2], self.units)

    def call(self, source, training=None):
        # 1. Embed; padding (id 0) is masked for the recurrent layers.
        ShapeChecker()("source", source, ("batch", "t_in"))
        token_ids("source", source, self.vocab_size)
        mask = ops.not_equal(source, 0)  # (batch, t_in)
        x = self.dropout_layer(self.embedding(source), training=training)  # (batch, t_in, embedding_dim)
        # 2. Recurrent layers; the final state of the last one initializes the decoder.
        for i, layer in enumerate(self.rnn_layers):
            if i:
                x = self.dropout_layer(x, training=training)
            x, *states = layer(x, mask=mask, training=training)  # (batch, t_in, units), final states
        return x, self.merge_states(states), mask

    def merge_states(self, states):
        """The final states as a Keras layer returns them (forward, then backward) -> a state dict."""
        if not self.bidirectional:
            return state_dict(self.rnn, states)
        half = len(states) // 2  # forward states first, then backward ones
        merged = [ops.concatenate([f, b], axis=-1) for f, b in zip(states[:half], states[half:])]
        return state_dict(self.rnn, merged)  # each (batch, units)

    def compute_mask(self, inputs, mask=None):
        """The outputs carry the source's padding mask (for the `Decoder` or an attention layer next)."""
        padding = ops.not_equal(inputs, 0)  # (batch, t_in)
        state = {"h": None} if self.rnn == "gru" else {"h": None, "c": None}
        return padding, state, None

    def compute_output_spec(self, source, training=None):
        batch, t_in = source.shape
        spec = keras.KerasTensor((batch, self.units))
        state = {"h": spec} if self.rnn == "gru" else {"h": spec, "c": spec}
        return keras.KerasTensor((batch, t_in, self.units)), state, keras.KerasTensor((batch, t_in), "bool")

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "rnn": self.rnn,
            "bidirectional": self.bidirectional,
            "num_layers": self.num_layers,
            "dropout": self.dropout,
        }
