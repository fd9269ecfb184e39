"""The attention decoder, Bahdanau style or Luong style: one step per paper, scanned for training.

`_step` is the paper's decoder step: the previous token's embedding and the state in; the output
features, the attention weights and the next state out. Teacher forcing (`call`) runs that same
step over every position of the shifted target and projects all positions to the vocabulary at
once; inference (`step`) runs it once and projects that one position. So stepping the decoder
`t_out` times gives what `call` gives (a test checks it).

The one exception is the Luong decoder without input feeding: its recurrent layer does not depend
on attention, so `call` runs the Keras RNN layer over the whole target (cuDNN on a GPU) and then
attends with all `t_out` queries at once, which is the same arithmetic as stepping.

State is a dict of `(batch, units)` tensors: `"h"` (and `"c"` for an LSTM), plus `"feed"`, the
previous attentional vector, for Luong input feeding.
"""

import keras
import tensorflow as tf
from keras import ops

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.layers.encoder import make_rnn, state_dict

STYLES = ("bahdanau", "luong")


@keras.saving.register_keras_serializable(package="tfattn")
class Decoder(keras.layers.Layer):
    """Attention decoder in the style of Bahdanau et al. (2014) or Luong et al. (2015).

    - `style="bahdanau"`: the query is the previous state `s_{i-1}`; the context `c_i` joins the
      input embedding `E y_{i-1}` as the RNN input; the output reads `[s_i; c_i; E y_{i-1}]` through
      a `tanh` layer, then the vocabulary projection (arXiv 1409.0473, eq. 4-6 and Appendix A).
    - `style="luong"`: the RNN runs first and its output `h_t` is the query; the attentional vector
      is `h~_t = tanh(W_c [c_t; h_t])` and the logits are `W_s h~_t`; with `input_feeding=True`,
      `h~_{t-1}` is concatenated to the next input (arXiv 1508.04025, eq. 5 and section 3.3).

    Args:
        vocab_size: int. Size of the target vocabulary (id 0 is padding).
        embedding_dim: int. Size of the target embeddings.
        units: int. Size of the recurrent state (the encoder's `units`).
        attention: a `ScoredAttention` layer, or None for `BahdanauAttention(units)` (Bahdanau style)
            or `LuongAttention("general")` (Luong style). Defaults to `None`.
        style: str. `"bahdanau"` or `"luong"`. Defaults to `"bahdanau"`.
        input_feeding: bool. Luong style only: feed `h~_{t-1}` to the next step. Defaults to `True`.
        rnn: str. `"gru"` or `"lstm"`. Defaults to `"gru"`.
        dropout: float. Dropout on embeddings and on the output features. Defaults to `0.0`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        target_in: int `(batch, t_out)`, the target shifted right (starts with `[START]`).
        encoder_outputs: float `(batch, t_in, units)`.
        state: dict from `Encoder` or `initial_state`.
        mask: bool `(batch, t_in)`, `False` on source padding.
        training: bool. Whether dropout is active.

    Returns:
        `(logits, attention)`: logits `(batch, t_out, vocab)`, attention `(batch, t_out, t_in)`.

    Example:

    >>> encoder = Encoder(vocab_size=50, embedding_dim=8, units=16)
    >>> decoder = Decoder(vocab_size=60, embedding_dim=8, units=16, style="luong")
    >>> outputs, state, mask = encoder(np.array([[4, 5, 6, 0]]))
    >>> logits, attention = decoder(np.array([[2, 7, 8]]), outputs, state, mask)
    >>> logits.shape, attention.shape
    (TensorShape([1, 3, 60]), TensorShape([1, 3, 4]))
    """

    def __init__(self, vocab_size, embedding_dim, units, attention=None, style="bahdanau",
                 input_feeding=True, rnn="gru", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}. Received: style={style!r}")
        dtype = self.dtype_policy  # sub-layers compute in the decoder's dtype (e.g. "float16")
        if attention is None:
            attention = (BahdanauAttention(units, dtype=dtype) if style == "bahdanau"
                         else LuongAttention("general", dtype=dtype))
        if not isinstance(attention, ScoredAttention):
            raise ValueError(f"attention must be a ScoredAttention layer. Received: attention={attention!r}")
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.units = units
        self.attention = attention
        self.style = style
        self.input_feeding = input_feeding
        self.rnn = rnn
        self.dropout = dropout
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding", dtype=dtype)
        self.rnn_layer = make_rnn(rnn, units, name=rnn, dtype=dtype)  # its cell is the step's RNN
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=dtype)
        # Bahdanau: t_i = tanh(W [s_i; c_i; E y_{i-1}] + b).  Luong: h~_t = tanh(W_c [c_t; h_t]).
        self.hidden_dense = keras.layers.Dense(units, activation="tanh", use_bias=style == "bahdanau",
                                               name="hidden_dense", dtype=dtype)
        self.logits_dense = keras.layers.Dense(vocab_size, name="logits_dense", dtype=dtype)

    @property
    def feeds_input(self):
        return self.style == "luong" and self.input_feeding

    def build(self, target_in_shape, encoder_outputs_shape):
        batch, t_in, dv = encoder_outputs_shape
        self.embedding.build(target_in_shape)
        # Sub-layers may come built (from_config, or an attention layer shared with other models).
        rnn_input = self.embedding_dim + (dv if self.style == "bahdanau" else 0)
        rnn_input += self.units if self.feeds_input else 0
        self.rnn_layer.build((batch, None, rnn_input))
        if not self.attention.built:
            self.attention.build((batch, None, self.units), encoder_outputs_shape)
        hidden_input = self.units + dv + (self.embedding_dim if self.style == "bahdanau" else 0)
        self.hidden_dense.build((batch, hidden_input))
        self.logits_dense.build((batch, self.units))

    # -- state and memory -------------------------------------------------------------------------

    def initial_state(self, encoder_state):
        """Decoder state from the encoder's final state: adds zeros for a missing `"c"` or `"feed"`."""
        h = encoder_state["h"]  # (batch, units)
        state = {"h": h}
        if self.rnn == "lstm":
            state["c"] = encoder_state.get("c", ops.zeros_like(h))
        if self.feeds_input:
            state["feed"] = ops.zeros_like(h)
        return state

    def prepare_memory(self, encoder_outputs, mask):
        """What every step attends to: values, keys projected once per sentence, and the mask."""
        keys = self.attention.prepare_keys(encoder_outputs)  # (batch, t_in, ...)
        return {"values": encoder_outputs, "keys": keys, "mask": mask}

    def attend(self, query, memory):
        """`query (batch, t_q, units)` -> context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`."""
        return self.attention(query, memory["values"], mask=memory["mask"], prepared_keys=memory["keys"])

    # -- one step ---------------------------------------------------------------------------------

    def _step(self, embedded, state, memory, training=False):
        """One decoder step on the previous token's embedding `(batch, emb)`.

        Returns `(out (batch, units), attention (batch, t_in), state)`: `out` are the features the
        vocabulary projection reads (Bahdanau's `t_i`, Luong's `h~_t`).
        """
        if self.style == "bahdanau":
            # 1. Attend with s_{i-1}; 2. the RNN reads [E y_{i-1}; c_i]; 3. t_i = tanh(W [s_i; c_i; E y_{i-1}] + b).
            context, attention = self.attend(state["h"][:, None, :], memory)  # (batch, 1, dv), (batch, 1, t_in)
            context = context[:, 0, :]  # (batch, dv)
            h, new_state = self._rnn_step(ops.concatenate([embedded, context], axis=-1), state, training)
            out = self.hidden_dense(ops.concatenate([h, context, embedded], axis=-1))  # (batch, units)
        else:
            # 1. The RNN reads [E y_{t-1}; h~_{t-1}] (or E y_{t-1}); 2. attend with h_t; 3. h~_t = tanh(W_c [c_t; h_t]).
            x = ops.concatenate([embedded, state["feed"]], axis=-1) if self.feeds_input else embedded
            h, new_state = self._rnn_step(x, state, training)
            context, attention = self.attend(h[:, None, :], memory)  # (batch, 1, dv), (batch, 1, t_in)
            out = self.hidden_dense(ops.concatenate([context[:, 0, :], h], axis=-1))  # (batch, units)
            if self.feeds_input:
                new_state["feed"] = out
        return out, attention[:, 0, :], new_state

    def _rnn_step(self, x, state, training=False):
        """The Keras GRU/LSTM cell on `x (batch, input)`: returns `h (batch, units)` and the new state."""
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, new_states = self.rnn_layer.cell(x, states, training=training)
        return h, state_dict(self.rnn, new_states)

    def _logits(self, out, training=False):
        """Output features `(..., units)` -> logits `(..., vocab)`, after dropout."""
        return self.logits_dense(self.dropout_layer(out, training=training))

    def step(self, token, state, memory):
        """One inference step.

        Args:
            token: int `(batch,)`, the previous output token (`[START]` first).
            state: dict of `(batch, units)` tensors, from `initial_state` or the previous step.
            memory: from `prepare_memory`.

        Returns:
            `(logits (batch, vocab), weights (batch, t_in), state)`.
        """
        out, attention, state = self._step(self.embedding(token), state, memory)
        return self._logits(out), attention, state

    # -- teacher forcing --------------------------------------------------------------------------

    def call(self, target_in, encoder_outputs, state, mask, training=False):
        # 1. Embed the shifted target and prepare what every step attends to.
        memory = self.prepare_memory(encoder_outputs, mask)
        embedded = self.dropout_layer(self.embedding(target_in), training=training)  # (batch, t_out, emb)
        state = self.initial_state(state)
        # 2. Run the step over every target position.
        if self.style == "luong" and not self.input_feeding:
            out, attention = self._luong_all_steps(embedded, state, memory, training)
        else:
            out, attention = scan(lambda x, s: self._step(x, s, memory, training), embedded, state)
        # 3. Project every position to the vocabulary at once.
        return self._logits(out, training), attention

    def _luong_all_steps(self, embedded, state, memory, training):
        """Luong without input feeding: the RNN over the whole target, then attention for all steps."""
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, *_ = self.rnn_layer(embedded, initial_state=states, training=training)  # (batch, t_out, units)
        context, attention = self.attend(h, memory)  # (batch, t_out, dv), (batch, t_out, t_in)
        return self.hidden_dense(ops.concatenate([context, h], axis=-1)), attention  # (batch, t_out, units)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "attention": keras.saving.serialize_keras_object(self.attention),
            "style": self.style,
            "input_feeding": self.input_feeding,
            "rnn": self.rnn,
            "dropout": self.dropout,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["attention"] = keras.saving.deserialize_keras_object(config["attention"])
        return cls(**config)


def scan(step, inputs, state, n_outputs=2):
    """Runs `step(x_t, state) -> (*outputs, state)` over `inputs (batch, t_out, ...)` in order.

    Returns the `n_outputs` outputs, each stacked batch first: `(batch, t_out, ...)`.
    """
    t_out = tf.shape(inputs)[1]
    xs = tf.TensorArray(inputs.dtype, size=t_out).unstack(tf.transpose(inputs, [1, 0, 2]))  # t_out x (batch, ...)
    arrays = tuple(tf.TensorArray(inputs.dtype, size=t_out) for _ in range(n_outputs))

    def body(t, state, arrays):
        *outputs, state = step(xs.read(t), state)
        return t + 1, state, tuple(a.write(t, o) for a, o in zip(arrays, outputs))

    _, _, arrays = tf.while_loop(lambda t, *_: t < t_out, body, (tf.constant(0), state, arrays),
                                 maximum_iterations=t_out)
    return tuple(tf.transpose(a.stack(), [1, 0, 2]) for a in arrays)  # each (batch, t_out, ...)
