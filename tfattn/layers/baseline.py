"""The no-attention baseline: the RNN Encoder-Decoder of Cho et al. (2014), "RNNencdec".

The decoder never looks at the encoder's annotations one by one. All it knows of the source is one
fixed-length vector, the summary `c` (here the encoder's final state). Cho et al. read it at every
step (`feed_summary=True`, the default):

    s_t     = RNN(s_{t-1}, [E y_{t-1}; c])          s_0 = c
    t_t     = tanh(W [s_t; c; E y_{t-1}] + b)
    logits  = W_o t_t

Sutskever et al. (2014) give it to the decoder once, as its first state (`feed_summary=False`):

    s_t     = RNN(s_{t-1}, E y_{t-1})               s_0 = c
    t_t     = tanh(W [s_t; E y_{t-1}] + b)

However long the sentence, `c` has `units` numbers: this is the fixed-length bottleneck that
attention removes (Bahdanau et al. 2014, section 1 and Fig. 2, where this model's BLEU falls with
sentence length). It shares the attention decoders' interface (`initial_state`, `prepare_memory`,
`step`, `call`) so that it trains, decodes and exports with the same code; its attention output is
all zeros, documented as such, so that plots and exports keep their shapes.
"""

import keras
from keras import ops

from tfattn.layers.checks import ShapeChecker, positive_int, rate, token_ids
from tfattn.layers.encoder import make_rnn, state_dict
from tfattn.layers.tied import add_bias, check_tied, tied_logits


@keras.saving.register_keras_serializable(package="tfattn")
class NoAttentionDecoder(keras.layers.Layer):
    """Decoder of the RNN Encoder-Decoder (Cho et al. 2014): the source only through its summary `c`.

    With `feed_summary=True` (Cho et al.) the RNN and the output layer read `c` at every step; with
    `feed_summary=False` (Sutskever et al.) `c` is the first state and nothing more, so what the
    decoder knows of the source after a few steps is what its state has kept of `c`.

    Args:
        vocab_size: int. Size of the target vocabulary (id 0 is padding).
        embedding_dim: int. Size of the target embeddings.
        units: int. Size of the recurrent state (the encoder's `units`).
        rnn: str. `"gru"` or `"lstm"`. Defaults to `"gru"`.
        dropout: float. Dropout on embeddings and on the output features. Defaults to `0.0`.
        feed_summary: bool. Read the summary `c` at every step (the RNN's input and the output
            layer's), as Cho et al. do; `False`: only as the first state, as Sutskever et al. do.
            Defaults to `True`.
        tie_embeddings: bool. Logits `t_t @ E^T + b` from the target embedding table (Press & Wolf
            2017, `tfattn.layers.tied`): needs `embedding_dim == units`. Defaults to `False`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        target_in: int `(batch, t_out)`, the target shifted right (starts with `[START]`).
        encoder_outputs: float `(batch, t_in, dv)`: only their shape is used (for the attention
            output), never their values.
        state: dict from `Encoder` (`{"h": (batch, units)}`, plus `"c"` for an LSTM); `h` is the
            summary `c` and the first state.
        encoder_outputs_mask: accepted for the attention decoders' interface and unused.
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(logits, attention)`: logits `(batch, t_out, vocab)`, carrying the target's Keras mask;
        attention `(batch, t_out, t_in)`, all zeros: there is none.

    Attributes:
        attention: `"none"`, as `ModelConfig.attention` and `tfattn train --attention` name it.
        embedding, rnn_layer, hidden_dense, logits_dense, dropout_layer: the sub-layers.

    Example:

    >>> encoder = Encoder(vocab_size=50, embedding_dim=8, units=16)
    >>> decoder = NoAttentionDecoder(vocab_size=60, embedding_dim=8, units=16)
    >>> outputs, state, mask = encoder(np.array([[4, 5, 6, 0]]))
    >>> logits, attention = decoder(np.array([[2, 7, 8]]), outputs, state, mask)
    >>> logits.shape, float(np.abs(attention).max())
    (TensorShape([1, 3, 60]), 0.0)

    Reference: Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder for Statistical
    Machine Translation", arXiv 1406.1078, section 2.2 (`h_t = f(h_{t-1}, y_{t-1}, c)`, `P(y_t | y_{t-1},
    h_t, c)`). Simplified as the attention decoders are: the first state is `c` itself, not
    `tanh(V' c)`, and the output layer is a tanh layer, not a maxout. Sutskever, Vinyals, Le,
    "Sequence to Sequence Learning with Neural Networks", arXiv 1409.3215, section 2 (eq. 1: the
    decoder is a language model whose first hidden state is the source's representation `v`).
    """

    attention = "none"

    def __init__(self, vocab_size, embedding_dim, units, rnn="gru", dropout=0.0, feed_summary=True,
                 tie_embeddings=False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.embedding_dim = positive_int("embedding_dim", embedding_dim)
        self.units = positive_int("units", units)
        self.rnn = rnn
        self.dropout = rate("dropout", dropout)
        if not isinstance(feed_summary, bool):
            raise ValueError(f"feed_summary must be True or False. Received: feed_summary={feed_summary!r}")
        self.feed_summary = feed_summary
        self.tie_embeddings = check_tied(tie_embeddings, self.embedding_dim, self.units)
        dtype = self.dtype_policy
        self.embedding = keras.layers.Embedding(self.vocab_size, self.embedding_dim, name="embedding", dtype=dtype)
        self.rnn_layer = make_rnn(rnn, self.units, name=rnn, dtype=dtype)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=dtype)
        self.hidden_dense = keras.layers.Dense(self.units, activation="tanh", name="hidden_dense", dtype=dtype)
        self.logits_dense = None if self.tie_embeddings else keras.layers.Dense(self.vocab_size, name="logits_dense",
                                                                                dtype=dtype)
        self.supports_masking = True

    def build(self, target_in_shape, encoder_outputs_shape=None, state_shape=None):
        batch = target_in_shape[0]
        summary = self.units if self.feed_summary else 0  # c's features in each input, or none
        self.embedding.build(target_in_shape)
        self.rnn_layer.build((batch, None, self.embedding_dim + summary))  # [E y_{t-1}; c] or E y_{t-1}
        self.hidden_dense.build((batch, self.units + summary + self.embedding_dim))  # [s_t; c; E y_{t-1}]
        if self.tie_embeddings:
            self.logits_bias = add_bias(self, self.vocab_size)
        else:
            self.logits_dense.build((batch, self.units))

    def initial_state(self, encoder_state):
        """`{"h": c, ("c": ...), "summary": c}`: the RNN starts from the summary and keeps it (only
        `"h"`, and `"c"` for an LSTM, with `feed_summary=False`)."""
        h = encoder_state["h"]  # (batch, units)
        state = {"h": h, "summary": h} if self.feed_summary else {"h": h}
        if self.rnn == "lstm":
            state["c"] = encoder_state.get("c", ops.zeros_like(h))
        return state

    def prepare_memory(self, encoder_outputs, mask=None):
        """Only the source mask, for the shape of the (zero) attention: the annotations are not read."""
        if mask is None:
            mask = ops.ones(ops.shape(encoder_outputs)[:2], "bool")
        return {"mask": ops.cast(mask, "bool")}

    def _inputs(self, embedded, summary):
        """What the RNN reads: `[E y_{t-1}; c]`, or `E y_{t-1}` alone (`summary` None)."""
        return embedded if summary is None else ops.concatenate([embedded, summary], axis=-1)

    def _features(self, h, summary, embedded):
        """`t_t = tanh(W [s_t; c; E y_{t-1}] + b)`, or `tanh(W [s_t; E y_{t-1}] + b)` (`summary` None)."""
        parts = [h, embedded] if summary is None else [h, summary, embedded]
        return self.hidden_dense(ops.concatenate(parts, axis=-1))

    def step(self, token, state, memory):
        """One inference step: `token (batch,)` -> `(logits (batch, vocab), zeros (batch, t_in), state)`."""
        check = ShapeChecker()
        check("token", token, ("batch",))
        check("state['h']", state["h"], ("batch", "units"))
        token_ids("token", token, self.vocab_size)
        embedded = self.embedding(token)  # (batch, emb)
        summary = state.get("summary")  # (batch, units), or None without feed_summary
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, new_states = self.rnn_layer.cell(self._inputs(embedded, summary), states)
        new_state = state_dict(self.rnn, new_states)
        if summary is not None:
            new_state["summary"] = summary
        logits = self._logits(self._features(h, summary, embedded))  # (batch, vocab)
        zeros = ops.zeros_like(ops.cast(memory["mask"], logits.dtype))  # (batch, t_in)
        return logits, zeros, new_state

    def call(self, target_in, encoder_outputs, state, encoder_outputs_mask=None, training=None):
        check = ShapeChecker()
        check("target_in", target_in, ("batch", "t_out"))
        check("encoder_outputs", encoder_outputs, ("batch", "t_in", "dv"))
        token_ids("target_in", target_in, self.vocab_size)
        if not isinstance(state, dict) or "h" not in state:
            raise ValueError(f"state must be a dict with 'h' (batch, units), as Encoder returns. Received: state={state!r}")
        check("state['h']", state["h"], ("batch", "units"))
        if state["h"].shape[-1] not in (None, self.units):
            raise ValueError(f"state['h'] must have shape (batch, units) with units = {self.units}. "
                             f"Received: state['h'].shape={tuple(state['h'].shape)}")
        state = self.initial_state(state)
        # 1. The RNN reads [E y_{t-1}; c] (or E y_{t-1}) at every position: one Keras RNN call (cuDNN on a GPU).
        embedded = self.dropout_layer(self.embedding(target_in), training=training)  # (batch, t_out, emb)
        repeated = None
        if self.feed_summary:
            repeated = ops.repeat(state["summary"][:, None, :], ops.shape(embedded)[1], axis=1)  # (batch, t_out, units)
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, *_ = self.rnn_layer(self._inputs(embedded, repeated), initial_state=states,
                               training=training)  # (batch, t_out, units)
        # 2. The output features and the logits of every position at once.
        out = self._features(h, repeated, embedded)  # (batch, t_out, units)
        logits = self._logits(self.dropout_layer(out, training=training))  # (batch, t_out, vocab)
        attention = ops.zeros((ops.shape(target_in)[0], ops.shape(target_in)[1], ops.shape(encoder_outputs)[1]),
                              logits.dtype)  # (batch, t_out, t_in)
        return logits, attention

    def _logits(self, features):
        """`(..., units)` -> `(..., vocab)`: `logits_dense`, or tied to the embedding table."""
        if self.tie_embeddings:
            return tied_logits(features, self.embedding.embeddings, self.logits_bias)
        return self.logits_dense(features)

    def compute_mask(self, inputs, mask=None):
        """The logits carry the target's padding mask; the attention carries none."""
        return ops.not_equal(inputs, 0), None

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "rnn": self.rnn,
            "dropout": self.dropout,
            "feed_summary": self.feed_summary,
            "tie_embeddings": self.tie_embeddings,
        }
