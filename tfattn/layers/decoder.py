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
previous attentional vector, for Luong input feeding, and `"position"`, int32 `(batch,)`, the target
step, when the attention layer reads it (`uses_positions`: Luong's local-m centres its window there).
"""

import warnings

import keras
from keras import ops

from tfattn.layers.attention import ScoredAttention
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.checks import ShapeChecker, positive_int, rate, refuse_unused, token_ids
from tfattn.layers.encoder import make_rnn, state_dict
from tfattn.layers.tied import add_bias, check_tied, tied_logits

STYLES = ("bahdanau", "luong")


@keras.saving.register_keras_serializable(package="tfattn")
class Decoder(keras.layers.Layer):
    """Attention decoder in the style of Bahdanau et al. (2014) or Luong et al. (2015).

    - `attention="bahdanau"`: the query is the previous state `s_{i-1}`; the context `c_i` joins the
      input embedding `E y_{i-1}` as the RNN input (eq. 4-6 and Appendix A.2.2). The output layer
      is `t_i = tanh(W [s_i; c_i; E y_{i-1}] + b)`, then the vocabulary projection: a simplification
      of the paper's maxout layer (Appendix A.2.2 pairs units by a max), and the initial state is
      the encoder's final state (both directions concatenated), not the paper's
      `tanh(W_s h_1_backward)`.
    - `attention="luong"`: the RNN runs first and its output `h_t` is the query; the attentional
      vector is `h~_t = tanh(W_c [c_t; h_t])` and the logits are `W_s h~_t`; with
      `input_feeding=True`, `h~_{t-1}` is concatenated to the next input (arXiv 1508.04025, eq. 5
      and section 3.3).

    Args:
        vocab_size: int. Size of the target vocabulary (id 0 is padding).
        embedding_dim: int. Size of the target embeddings.
        units: int. Size of the recurrent state (the encoder's `units`).
        attention: str. The decoder's style, `"bahdanau"` or `"luong"`, as `ModelConfig.attention`
            and `tfattn train --attention` name it. Defaults to `"bahdanau"`.
        attention_layer: a `ScoredAttention` layer, or None for `BahdanauAttention(units)`
            (Bahdanau style) or `LuongAttention("general")` (Luong style). Local attention
            (`LuongAttention(local=...)`) needs the Luong style; hard attention works in both.
            Defaults to `None`.
        input_feeding: bool. Luong style only: feed `h~_{t-1}` to the next step. Defaults to `True`.
        rnn: str. `"gru"` or `"lstm"`. Defaults to `"gru"`.
        dropout: float. Dropout on embeddings and on the output features. Defaults to `0.0`.
        tie_embeddings: bool. The vocabulary projection is the target embedding table, transposed,
            plus a bias (Press & Wolf 2017; `tfattn.layers.tied`): needs `embedding_dim == units`.
            Defaults to `False`: a projection of its own (`logits_dense`).
        **kwargs: base layer arguments (`name`, `dtype`, ...). `style=` is the deprecated name of
            `attention`, and a layer passed as `attention` is taken as `attention_layer`.

    Call arguments:
        target_in: int `(batch, t_out)`, the target shifted right (starts with `[START]`).
        encoder_outputs: float `(batch, t_in, dv)`.
        state: dict from `Encoder` (`{"h": (batch, units)}`, plus `"c"` for an LSTM).
        encoder_outputs_mask: bool `(batch, t_in)`, `False` on source padding; taken from
            `encoder_outputs`' Keras mask when not given (the `Encoder`'s outputs carry one).
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(logits, attention)`: logits `(batch, t_out, vocab)`, attention `(batch, t_out, t_in)`.
        The logits carry the target's Keras mask (`target_in != 0`).

    Attributes:
        embedding, rnn_layer (its `cell` is the step's RNN), attention_layer, hidden_dense (Bahdanau's
        `tanh` output layer, Luong's `W_c`), logits_dense, dropout_layer: the sub-layers, in the
        order the step uses them; with `tie_embeddings`, `logits_dense` is None and `logits_bias`
        the projection's bias. `initial_state`, `prepare_memory` and `step` are public too: the
        decoding loops and the fast tier (`tfattn.accel`) use only these.

    Example:

    >>> encoder = Encoder(vocab_size=50, embedding_dim=8, units=16)
    >>> decoder = Decoder(vocab_size=60, embedding_dim=8, units=16, attention="luong")
    >>> outputs, state, mask = encoder(np.array([[4, 5, 6, 0]]))
    >>> logits, attention = decoder(np.array([[2, 7, 8]]), outputs, state, mask)
    >>> logits.shape, attention.shape
    (TensorShape([1, 3, 60]), TensorShape([1, 3, 4]))
    """

    def __init__(self, vocab_size, embedding_dim, units, attention="bahdanau", attention_layer=None,
                 input_feeding=True, rnn="gru", dropout=0.0, tie_embeddings=False, **kwargs):
        attention, attention_layer = _style_arguments(attention, attention_layer, kwargs)
        super().__init__(**kwargs)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.embedding_dim = positive_int("embedding_dim", embedding_dim)
        self.units = positive_int("units", units)
        self.attention = attention
        self.input_feeding = input_feeding
        refuse_unused("input_feeding", input_feeding, True, attention == "luong", "attention='luong'",
                      f"attention={attention!r}")
        self.rnn = rnn
        self.dropout = rate("dropout", dropout)
        self.tie_embeddings = check_tied(tie_embeddings, self.embedding_dim, self.units)
        dtype = self.dtype_policy  # sub-layers compute in the decoder's dtype (e.g. "float16")
        self.attention_layer = attention_layer or (
            BahdanauAttention(self.units, dtype=dtype) if attention == "bahdanau" else LuongAttention(dtype=dtype))
        local = getattr(self.attention_layer, "local", None)
        if attention == "bahdanau" and local is not None:
            raise ValueError("Local attention (Luong et al. 2015, section 3.2) centres its window on the target step "
                             "of the query h_t: use attention='luong'. Received: attention='bahdanau' with an "
                             f"attention layer of local={local!r}")
        self.embedding = keras.layers.Embedding(self.vocab_size, self.embedding_dim, name="embedding", dtype=dtype)
        self.rnn_layer = make_rnn(rnn, self.units, name=rnn, dtype=dtype)  # its cell is the step's RNN
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=dtype)
        # Bahdanau: t_i = tanh(W [s_i; c_i; E y_{i-1}] + b).  Luong: h~_t = tanh(W_c [c_t; h_t]).
        self.hidden_dense = keras.layers.Dense(self.units, activation="tanh", use_bias=attention == "bahdanau",
                                               name="hidden_dense", dtype=dtype)
        self.logits_dense = None if self.tie_embeddings else keras.layers.Dense(self.vocab_size, name="logits_dense",
                                                                                dtype=dtype)
        self.supports_masking = True

    @property
    def style(self):
        """The decoder's style, `"bahdanau"` or `"luong"` (the same as `attention`)."""
        return self.attention

    @property
    def feeds_input(self):
        return self.attention == "luong" and self.input_feeding

    @property
    def tracks_position(self):
        """Whether the state holds `"position"`, the target step the attention layer reads."""
        return self.attention_layer.uses_positions

    def build(self, target_in_shape, encoder_outputs_shape, state_shape=None):
        batch, t_in, dv = encoder_outputs_shape
        self.embedding.build(target_in_shape)
        # Sub-layers may come built (from_config, or an attention layer shared with other models).
        rnn_input = self.embedding_dim + (dv if self.attention == "bahdanau" else 0)
        rnn_input += self.units if self.feeds_input else 0
        self.rnn_layer.build((batch, None, rnn_input))
        if not self.attention_layer.built:
            self.attention_layer.build((batch, None, self.units), encoder_outputs_shape)
        hidden_input = self.units + dv + (self.embedding_dim if self.attention == "bahdanau" else 0)
        self.hidden_dense.build((batch, hidden_input))
        if self.tie_embeddings:
            self.logits_bias = add_bias(self, self.vocab_size)
        else:
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
        if self.tracks_position:
            state["position"] = ops.zeros_like(h[:, 0], dtype="int32")  # (batch,): step 0
        return state

    def prepare_memory(self, encoder_outputs, mask=None):
        """What every step attends to: values, keys projected once per sentence, and the bool
        `mask (batch, t_in)` (None: every position is real)."""
        keys = self.attention_layer.prepare_keys(encoder_outputs)  # (batch, t_in, ...)
        return {"values": encoder_outputs, "keys": keys, "mask": None if mask is None else ops.cast(mask, "bool")}

    def attend(self, query, memory, positions=None, training=None):
        """`query (batch, t_q, units)` -> context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`.
        `positions`: int `(batch, t_q)` or `(t_q,)`, the queries' target steps, for a layer that reads them."""
        positions = dict(query_positions=positions) if self.tracks_position else {}
        return self.attention_layer(query, memory["values"], value_mask=memory["mask"], prepared_keys=memory["keys"],
                                    training=training, **positions)

    # -- one step ---------------------------------------------------------------------------------

    def _step(self, embedded, state, memory, training=None):
        """One decoder step on the previous token's embedding `(batch, emb)`.

        Returns `(out (batch, units), attention (batch, t_in), state)`: `out` are the features the
        vocabulary projection reads (Bahdanau's `t_i`, Luong's `h~_t`).
        """
        if self.attention == "bahdanau":
            # 1. Attend with s_{i-1}; 2. the RNN reads [E y_{i-1}; c_i]; 3. t_i = tanh(W [s_i; c_i; E y_{i-1}] + b).
            query = state["h"][:, None, :]  # (batch, 1, units): s_{i-1}
            context, attention = self.attend(query, memory, training=training)  # (batch, 1, dv), (batch, 1, t_in)
            context = context[:, 0, :]  # (batch, dv)
            h, new_state = self._rnn_step(ops.concatenate([embedded, context], axis=-1), state, training)
            out = self.hidden_dense(ops.concatenate([h, context, embedded], axis=-1))  # (batch, units)
        else:
            # 1. The RNN reads [E y_{t-1}; h~_{t-1}] (or E y_{t-1}); 2. attend with h_t; 3. h~_t = tanh(W_c [c_t; h_t]).
            x = ops.concatenate([embedded, state["feed"]], axis=-1) if self.feeds_input else embedded
            h, new_state = self._rnn_step(x, state, training)
            position = state["position"][:, None] if self.tracks_position else None  # (batch, 1): step t
            context, attention = self.attend(h[:, None, :], memory, position, training)  # (batch, 1, dv), (.., t_in)
            out = self.hidden_dense(ops.concatenate([context[:, 0, :], h], axis=-1))  # (batch, units)
            if self.feeds_input:
                new_state["feed"] = out
            if self.tracks_position:
                new_state["position"] = state["position"] + 1
        return out, attention[:, 0, :], new_state

    def _rnn_step(self, x, state, training=None):
        """The Keras GRU/LSTM cell on `x (batch, input)`: returns `h (batch, units)` and the new state."""
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, new_states = self.rnn_layer.cell(x, states, training=training)
        return h, state_dict(self.rnn, new_states)

    def _logits(self, out, training=None):
        """Output features `(..., units)` -> logits `(..., vocab)`, after dropout."""
        out = self.dropout_layer(out, training=training)
        if self.tie_embeddings:
            return tied_logits(out, self.embedding.embeddings, self.logits_bias)  # (..., vocab)
        return self.logits_dense(out)

    def step(self, token, state, memory):
        """One inference step.

        Args:
            token: int `(batch,)`, the previous output token (`[START]` first).
            state: dict of `(batch, units)` tensors (and `"position"` int32 `(batch,)`, the step), from
                `initial_state` or the previous step.
            memory: from `prepare_memory`.

        Returns:
            `(logits (batch, vocab), weights (batch, t_in), state)`.
        """
        check = ShapeChecker()
        check("token", token, ("batch",))
        check("state['h']", state["h"], ("batch", "units"))
        token_ids("token", token, self.vocab_size)
        out, attention, state = self._step(self.embedding(token), state, memory)
        return self._logits(out), attention, state

    # -- teacher forcing --------------------------------------------------------------------------

    def call(self, target_in, encoder_outputs, state, encoder_outputs_mask=None, training=None, mask=None):
        # 1. Check the inputs; embed the shifted target and prepare what every step attends to.
        encoder_outputs_mask = self._check(target_in, encoder_outputs, state, encoder_outputs_mask, mask)
        memory = self.prepare_memory(encoder_outputs, encoder_outputs_mask)
        embedded = self.dropout_layer(self.embedding(target_in), training=training)  # (batch, t_out, emb)
        state = self.initial_state(state)
        # 2. Run the step over every target position.
        if self.attention == "luong" and not self.input_feeding:
            out, attention = self._luong_all_steps(embedded, state, memory, training)
        else:
            zeros = (ops.zeros_like(state["h"]), ops.zeros_like(encoder_outputs[:, :, 0]))  # (batch, units), (batch, t_in)
            out, attention = scan(lambda x, s: self._step(x, s, memory, training), embedded, state, zeros)
        # 3. Project every position to the vocabulary at once.
        return self._logits(out, training), attention

    def _check(self, target_in, encoder_outputs, state, encoder_outputs_mask, mask):
        """Shape checks; returns the source mask (from the deprecated `mask=` if that is all there is)."""
        if mask is not None:
            warnings.warn("Decoder(..., mask=) is deprecated: pass encoder_outputs_mask= (or the 4th "
                          "argument), or let Keras take it from encoder_outputs' mask.", DeprecationWarning,
                          stacklevel=3)
            encoder_outputs_mask = mask if encoder_outputs_mask is None else encoder_outputs_mask
        if not isinstance(state, dict) or "h" not in state:
            raise ValueError(f"state must be a dict with 'h' (batch, units), as Encoder returns. Received: state={state!r}")
        check = ShapeChecker()
        check("target_in", target_in, ("batch", "t_out"))
        check("encoder_outputs", encoder_outputs, ("batch", "t_in", "dv"))
        check("encoder_outputs_mask", encoder_outputs_mask, ("batch", "t_in"))
        check("state['h']", state["h"], ("batch", "units"))
        token_ids("target_in", target_in, self.vocab_size)
        if state["h"].shape[-1] not in (None, self.units):
            raise ValueError(f"state['h'] must have shape (batch, units) with units = {self.units}. "
                             f"Received: state['h'].shape={tuple(state['h'].shape)}")
        return encoder_outputs_mask

    def _luong_all_steps(self, embedded, state, memory, training):
        """Luong without input feeding: the RNN over the whole target, then attention for all steps."""
        states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
        h, *_ = self.rnn_layer(embedded, initial_state=states, training=training)  # (batch, t_out, units)
        positions = ops.arange(ops.shape(h)[1]) if self.tracks_position else None  # (t_out,): steps 0, 1, ...
        context, attention = self.attend(h, memory, positions, training)  # (batch, t_out, dv), (batch, t_out, t_in)
        return self.hidden_dense(ops.concatenate([context, h], axis=-1)), attention  # (batch, t_out, units)

    def attention_heads(self, target_in, encoder_outputs, state, encoder_outputs_mask=None):
        """Every head's weights of a teacher-forced pass, for plots: `(batch, heads, t_out, t_in)`.

        A `MultiHeadAttention` layer gives its `heads`; any other layer one, its weights (what
        `call` returns). The queries are the step's own: `s_{i-1}` (Bahdanau style), `h_t` (Luong).
        """
        encoder_outputs_mask = self._check(target_in, encoder_outputs, state, encoder_outputs_mask, None)
        if not getattr(self.attention_layer, "heads", None):
            _, attention = self.call(target_in, encoder_outputs, state, encoder_outputs_mask)
            return attention[:, None]  # (batch, 1, t_out, t_in)
        memory = self.prepare_memory(encoder_outputs, encoder_outputs_mask)
        state = self.initial_state(state)

        def with_query(x, s):  # the step, returning the query it attended with
            _, attention, new_state = self._step(x, s, memory)
            return (new_state if self.attention == "luong" else s)["h"], attention, new_state

        zeros = (ops.zeros_like(state["h"]), ops.zeros_like(encoder_outputs[:, :, 0]))  # (batch, units), (batch, t_in)
        queries, _ = scan(with_query, self.embedding(target_in), state, zeros)  # (batch, t_out, units)
        _, heads = self.attention_layer(queries, memory["values"], value_mask=memory["mask"],
                                        prepared_keys=memory["keys"], return_heads=True)
        return heads  # (batch, heads, t_out, t_in)

    def compute_mask(self, inputs, mask=None):
        """The logits carry the target's padding mask; the attention carries none."""
        return ops.not_equal(inputs, 0), None

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "attention": self.attention,
            "attention_layer": keras.saving.serialize_keras_object(self.attention_layer),
            "input_feeding": self.input_feeding,
            "rnn": self.rnn,
            "dropout": self.dropout,
            "tie_embeddings": self.tie_embeddings,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("attention"), dict):  # saved before `attention` named the style
            config["attention_layer"] = config.pop("attention")
            config["attention"] = config.pop("style", "bahdanau")
        config["attention_layer"] = keras.saving.deserialize_keras_object(config["attention_layer"])
        return cls(**config)


def _style_arguments(attention, attention_layer, kwargs):
    """`(style, layer)` from `Decoder`'s arguments, with the deprecated `style=` and a layer passed as
    `attention` (both worked before `attention` named the style)."""
    if isinstance(attention, ScoredAttention) or attention is None:
        warnings.warn("Decoder(attention=<layer>) is deprecated: pass the layer as attention_layer= and the "
                      "style as attention='bahdanau' or 'luong'.", DeprecationWarning, stacklevel=3)
        attention, attention_layer = kwargs.pop("style", "bahdanau"), attention_layer or attention
    elif "style" in kwargs:
        warnings.warn("Decoder(style=) is deprecated: the style is attention='bahdanau' or 'luong'.",
                      DeprecationWarning, stacklevel=3)
        attention = kwargs.pop("style")
    if attention not in STYLES:
        raise ValueError(f"attention must be one of {STYLES}. Received: attention={attention!r}")
    if attention_layer is not None and not isinstance(attention_layer, ScoredAttention):
        raise ValueError(f"attention_layer must be a ScoredAttention layer. Received: attention_layer={attention_layer!r}")
    return attention, attention_layer


def scan(step, inputs, state, zeros):
    """Runs `step(x_t, state) -> (out, attention, state)` over `inputs (batch, t_out, ...)` in order.

    `zeros` are one step's `(out, attention)` shapes, zero-filled. Returns `out (batch, t_out, ...)`
    and `attention (batch, t_out, t_in)`, stacked batch first.
    """
    inputs = ops.moveaxis(inputs, 1, 0)  # (t_out, batch, ...)
    if keras.backend.backend() == "tensorflow":
        # `tf.scan` bounds its loop by the number of steps, which XLA needs to compile the
        # gradient (`jit_compile`); Keras' TensorFlow `ops.scan` leaves the bound unset.
        import tensorflow as tf

        outs, attentions, _ = tf.scan(lambda carry, x: step(x, carry[2]), inputs, initializer=(*zeros, state))
    else:
        def body(carry, x):
            carry = step(x, carry[2])  # (out, attention, state)
            return carry, carry

        _, (outs, attentions, _) = ops.scan(body, (*zeros, state), inputs)
    return ops.moveaxis(outs, 0, 1), ops.moveaxis(attentions, 0, 1)  # (batch, t_out, ...)
