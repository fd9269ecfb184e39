"""The attention decoder, Bahdanau style or Luong style, with one code path for training and inference.

A decoder step (`_step`) maps the embedding's share of the RNN input and the state to an output,
the attention weights and the next state. Teacher forcing (`call`) runs that same step over the
whole target in a `tf.while_loop` (in training, with a GRU and `BahdanauAttention`,
`loops.bahdanau_gru` runs the same step with its backward pass written out, which is faster);
inference (`step`) runs it once. Whatever does not depend on the previous step is taken out of the
loop and done for all steps at once: the embedding's share of the RNN's input projection before
it, the output layers (`_project`) after it. In inference, what the previous token adds to a step
can be looked up in tables made ahead from every embedding (`decoding_weights(token_tables=True)`,
as an export does).

The one exception is the Luong decoder without input feeding: its recurrent layer does not depend on
attention, so `call` runs the RNN alone over the whole target (the Keras layer, so cuDNN, on a GPU;
in training elsewhere, `loops.gru` for a GRU), then attends with all `t_out` queries in one batched
matmul. A test checks that this gives what stepping gives.

State is a dict of `(batch, units)` tensors: `"h"` (and `"c"` for an LSTM), plus `"feed"`, the
previous attentional vector, for Luong input feeding.
"""

import keras
import tensorflow as tf
from keras import ops

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention
from tfattn.accel import loops, rnn
from tfattn.layers.encoder import make_rnn

STYLES = ("bahdanau", "luong")
PROJECTION_DTYPES = (None, "float32", "bfloat16")
FEW_ROWS = 16  # `_logits` with blocks and the whole kernel: blocks up to this many rows
_HIDDEN_FOLDED = ("hidden_kernel", "hidden_kernel_embedding")  # into Bahdanau's "hidden_table"


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
        projection_dtype: `None` (or `"float32"`) or `"bfloat16"`: the dtype of the output layers'
            matrix products in training (the vocabulary projection and Bahdanau's tanh layer,
            forward and backward; see `loops.output_layers`). On CPUs with AMX (or AVX512-BF16)
            bfloat16 makes a training step faster (spa-eng, units 256: 0.88x the time); the weights,
            their gradients and everything else stay in float32, and inference is unchanged.
            Elsewhere it gains nothing: on an AVX2 CPU TensorFlow's bfloat16 matmul takes as long
            as float32's and truncates its results toward zero. Defaults to `None`: the compute dtype.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        target_in: int `(batch, t_out)`, the target shifted right (starts with `[START]`).
        encoder_outputs: float `(batch, t_in, units)`.
        state: dict from `Encoder` or `initial_state`.
        mask: bool `(batch, t_in)`, `False` on source padding.
        training: bool. Whether dropout is active, and whether a GRU decoder runs the loops of
            `tfattn.accel.loops` (backward pass written out) where they apply.

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
                 input_feeding=True, rnn="gru", dropout=0.0, projection_dtype=None, **kwargs):
        super().__init__(**kwargs)
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}. Received: style={style!r}")
        if projection_dtype not in PROJECTION_DTYPES:
            raise ValueError(f"projection_dtype must be one of {PROJECTION_DTYPES}. "
                             f"Received: projection_dtype={projection_dtype!r}")
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
        self.projection_dtype = None if projection_dtype == "float32" else projection_dtype
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding", dtype=dtype)
        self.rnn_layer = make_rnn(rnn, units, name=rnn, dtype=dtype)
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=dtype)
        # Bahdanau: tanh layer over [s_i; c_i; E y_{i-1}].  Luong: W_c over [c_t; h_t].
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

    def _attend(self, query, memory):
        context, weights = self.attention(  # (batch, t_q, dv), (batch, t_q, t_in)
            query, memory["values"], mask=memory["mask"], prepared_keys=memory["keys"]
        )
        return context, weights

    # -- one step ---------------------------------------------------------------------------------

    def decoding_weights(self, matmul_dtype=None, logits_blocks=0, token_tables=False):
        """What a step reads, read once per call: a flat dict of tensors for `_step` and `stepper`.

        Args:
            matmul_dtype: optional dtype for the step's matrix products: `"bfloat16"` casts their
                kernels (and, in `rnn.matmul`, their inputs) to bfloat16, on CPUs with AMX or
                AVX512-BF16 two to three times faster than float32; biases, activations, softmax
                and the returned logits stay in the compute dtype. Defaults to the compute dtype.
            logits_blocks: int. Cut the vocabulary projection's kernel into this many column blocks
                (`"logits_blocks"`, a list, in place of `"logits_kernel"`), which `stepper` projects
                with as independent ops. For a few rows the projection is a matrix-vector product
                whose time goes to reading its 5 MB kernel (at 5,000 words); on a 2-core CPU with one
                thread per op, two blocks take about two thirds of the time, read on both cores (with
                TensorFlow's default threads, which split every product, they gain nothing; see
                `tfattn.serving.translator.LOGITS_BLOCKS` for the figures). For a batch
                they are slower than one product (an export's beam 4 at batch 64 by 6-7%, greedy the
                same within noise), so a step given both (the export's beam search) chooses by its
                number of rows; the choice, a `tf.cond` at every step, cost greedy single sentences
                4-6%, so greedy gets the blocks alone. The result is the same to the bit. Defaults to
                `0` (no blocks).
            token_tables: bool. Look up, rather than compute, what the previous token adds at each
                step (`_token_shares` of every embedding): `"gates_table"` `(vocab, gates * units)`,
                the embedding's share of the RNN's gates (with a GRU's input bias only for a Luong
                decoder without input feeding), and, Bahdanau style, `"hidden_table"` `(vocab,
                units)`, its share of the tanh layer. They replace the entries they hold (`kernel`,
                `hidden_kernel`, `hidden_kernel_embedding`; `input_bias` when it is in the table;
                the step adds the other biases). On spa-eng (5,000 words,
                units 256), single-sentence greedy latency falls by about 15% and batch-64 greedy
                rises by about 10%, for 4 MB of tables per 1,000 words; the outputs are the same to
                the bit as computing the shares, as long as a row's matrix product does not depend
                on the other rows (oneDNN's, which TensorFlow uses on x86 CPUs with AVX-512; Eigen's,
                on an AVX2 CPU, differ within float32 rounding).

        Both options cost as much as a few steps to compute, so they pay only when done once, ahead:
        an export stores these weights (`tfattn.Translator`, `stored_weights=True`).

        Returns:
            A dict: the RNN's weights from `rnn.cell_weights` (`kernel` for the embedding's share of
            the input, `kernel_rest` for the rest: Bahdanau the context, Luong with input feeding
            `h~_{t-1}`), `hidden_kernel`, `hidden_bias`, `logits_kernel`, `logits_bias`; Bahdanau
            style also the tanh layer's kernel by rows, `hidden_kernel_out` for `[s_i; c_i]` and
            `hidden_kernel_embedding` for `E y_{i-1}`; changed as above by the options. Entries a
            decoder does not have are None.
        """
        dtype = self.compute_dtype
        matmul_dtype = matmul_dtype or dtype
        bias = lambda layer: None if layer.bias is None else ops.cast(layer.bias, dtype)  # noqa: E731
        weights = {
            **rnn.cell_weights(self.rnn_layer.cell, dtype, split_at=self.embedding_dim, matmul_dtype=matmul_dtype),
            "hidden_kernel": ops.cast(self.hidden_dense.kernel, matmul_dtype),  # (hidden input, units)
            "hidden_bias": bias(self.hidden_dense),
            "logits_kernel": ops.cast(self.logits_dense.kernel, matmul_dtype),  # (units, vocab)
            "logits_bias": bias(self.logits_dense),
        }
        if self.style == "bahdanau":  # rows for [s_i; c_i], then for E y_{i-1}
            weights["hidden_kernel_out"] = weights["hidden_kernel"][: -self.embedding_dim]
            weights["hidden_kernel_embedding"] = weights["hidden_kernel"][-self.embedding_dim :]
        if logits_blocks:
            sizes = _block_sizes(self.vocab_size, logits_blocks)
            weights["logits_blocks"] = tf.split(weights.pop("logits_kernel"), sizes, axis=1)
        if token_tables:
            embeddings = ops.cast(self.embedding.embeddings, dtype)  # (vocab, emb)
            gates_table, hidden_table = self._token_shares(embeddings, weights)
            folded = ("kernel",) + (() if self._biased_in_step() else ("input_bias",)) + (
                _HIDDEN_FOLDED if self.style == "bahdanau" else ())
            weights = {k: v for k, v in weights.items() if k not in folded}
            weights["gates_table"] = gates_table  # (vocab, gates * units)
            if hidden_table is not None:
                weights["hidden_table"] = hidden_table  # (vocab, units)
        return weights

    def _token_shares(self, embedded, weights):
        """What the embedding `(..., emb)` of the previous token adds to a step: its share of the
        RNN's gates `(..., gates * units)` and, Bahdanau style, of the tanh layer `(..., units)`
        (else None). A bias is left out where the step adds it with a product of its own
        (`_biased_in_step`; the tanh layer's always), where TensorFlow fuses the two (`rnn.affine`)."""
        input_bias = None if self._biased_in_step() else weights["input_bias"]
        gates_x = rnn.affine(embedded, weights["kernel"], input_bias)
        if self.style != "bahdanau":
            return gates_x, None
        return gates_x, rnn.matmul(embedded, weights["hidden_kernel_embedding"])

    def _biased_in_step(self):
        """Whether the step adds the RNN's input bias with the product of the rest of its input (the
        context, Bahdanau style; the fed `h~_{t-1}`, Luong style with input feeding), rather than
        with the embedding's share. A product with a bias takes 20-30% less time than one without on
        a 2-core CPU (`rnn.affine`), and the step's products are what one sentence waits on."""
        return self.style == "bahdanau" or self.feeds_input

    def _step(self, gates_x, state, memory, weights):
        """One step on `gates_x (batch, gates * units)`, the embedding's share of the RNN input
        (without the input bias when `_biased_in_step`: the step adds it).

        Returns `(out, attention (batch, t_in), state)`, where `out` is `[s_i; c_i]`
        `(batch, units + dv)` (Bahdanau) or `h~_t (batch, units)` (Luong).
        """
        if self.style == "bahdanau":
            # 1. Attend with s_{i-1}; 2. the RNN reads [E y_{i-1}; c_i]; 3. out [s_i; c_i].
            context, attention = self._attend(state["h"][:, None, :], memory)  # (batch, 1, dv)
            context = context[:, 0, :]  # (batch, dv)
            gates_x = gates_x + rnn.affine(context, weights["kernel_rest"], weights["input_bias"])
            h, new_state = rnn.step(self.rnn, gates_x, state, weights)
            out = ops.concatenate([h, context], axis=-1)  # (batch, units + dv)
        else:
            # 1. The RNN reads [E y_{t-1}; h~_{t-1}]; 2. attend with h_t; 3. h~_t = tanh(W_c [c_t; h_t]).
            if self.feeds_input:
                gates_x = gates_x + rnn.affine(state["feed"], weights["kernel_rest"], weights["input_bias"])
            h, new_state = rnn.step(self.rnn, gates_x, state, weights)
            context, attention = self._attend(h[:, None, :], memory)  # (batch, 1, dv)
            out = _hidden(ops.concatenate([context[:, 0, :], h], axis=-1), weights)  # (batch, units)
            if self.feeds_input:
                new_state["feed"] = out
        return out, attention[:, 0, :], new_state

    def _project(self, out, embedded, weights, training=False):
        """Step outputs -> logits for all steps at once (`call`; `stepper` does the same for one).

        Bahdanau: the `tanh` layer reads `[s_i; c_i; E y_{i-1}]` first. Luong: `out` is `h~_t` already.
        """
        hidden = self.style == "bahdanau"
        if hidden:
            out = ops.concatenate([out, embedded], axis=-1)  # (..., hidden input)
        if training:  # all steps at once (`call`), the backward pass ordered
            keep = tf.constant(1.0, out.dtype)
            if self.dropout:  # dropout's mask, scaled: the draw it would make on the output itself
                ones = tf.ones(tf.concat([tf.shape(out)[:-1], [self.units]], axis=0), out.dtype)  # (B, t_out, units)
                keep = self.dropout_layer(ones, training=True)
            return loops.output_layers(out, keep, weights, hidden, self.projection_dtype)  # (batch, t_out, vocab)
        if hidden:
            out = _hidden(out, weights)  # (..., units)
        return _logits(self.dropout_layer(out, training=training), weights)  # (..., vocab)

    def step(self, token, state, memory):
        """One inference step.

        Args:
            token: int `(batch,)`, the previous output token (`[START]` first).
            state: dict of `(batch, units)` tensors, from `initial_state` or the previous step.
            memory: from `prepare_memory`.

        Returns:
            `(logits (batch, vocab), weights (batch, t_in), state)`.
        """
        return self.stepper()(token, state, memory)

    def stepper(self, weights=None):
        """`step` as a function with the weights read once: a decoding loop calls this before it.

        Args:
            weights: optional dict from `decoding_weights`, read or stored ahead (an export keeps
                them as variables, with token tables, the vocabulary projection in column blocks
                and, if asked, the kernels in bfloat16). Defaults to `decoding_weights()`, read now.

        Returns:
            A function `(token, state, memory) -> (logits, weights, state)`, as `step`; the logits
            are in the compute dtype.
        """
        weights = _with_bias_blocks(self.decoding_weights() if weights is None else weights)
        if "gates_table" in weights:  # the previous token's shares, looked up
            hidden_table = weights.get("hidden_table")
            shares = lambda token: (tf.gather(weights["gates_table"], token),  # noqa: E731
                                    None if hidden_table is None else tf.gather(hidden_table, token))
        else:
            shares = lambda token: self._token_shares(self.embedding(token), weights)  # noqa: E731

        def step(token, state, memory):
            gates_x, hidden_x = shares(token)  # (batch, gates * units), Bahdanau (batch, units)
            out, attention, state = self._step(gates_x, state, memory, weights)
            if hidden_x is not None:  # Bahdanau: tanh(W [s_i; c_i; E y_{i-1}] + b), the last share added
                out = tf.tanh(rnn.affine(out, weights["hidden_kernel_out"], weights["hidden_bias"]) + hidden_x)
            return _logits(out, weights), attention, state

        return step

    # -- teacher forcing --------------------------------------------------------------------------

    def call(self, target_in, encoder_outputs, state, mask, training=False):
        # 1. Embed the shifted target; its share of the RNN's gates is projected for all steps at once.
        memory = self.prepare_memory(encoder_outputs, mask)
        embedded = self.dropout_layer(self.embedding(target_in), training=training)  # (batch, t_out, emb)
        weights = self.decoding_weights()
        # 2. Run the steps; 3. project all steps to the vocabulary at once.
        state = self.initial_state(state)
        if self.style == "luong" and not self.input_feeding:
            gates_x = rnn.project_inputs(weights, embedded)  # (batch, t_out, gates * units)
            out, attention = self._luong_parallel(embedded, gates_x, state, memory, weights, training)
        elif training and self._has_written_out_loop():
            gates_x = rnn.project_inputs(weights, embedded)  # the loop's step adds no bias of its own
            out, attention = self._bahdanau_loop(gates_x, state, memory, weights)
        else:
            gates_x, _ = self._token_shares(embedded, weights)  # as `_step` takes it
            out, attention = _scan(lambda x, s: self._step(x, s, memory, weights), gates_x, state, 2)
        return self._project(out, embedded, weights, training=training), attention

    def _has_written_out_loop(self):
        """Whether `loops.bahdanau_gru` (backward pass written out) covers this decoder."""
        return self.style == "bahdanau" and self.rnn == "gru" and type(self.attention) is BahdanauAttention

    def _bahdanau_loop(self, gates_x, state, memory, weights):
        w1, v, b = self.attention.score_weights(gates_x.dtype)
        keys, values, mask = memory["keys"], memory["values"], memory["mask"]
        mask = ops.ones(ops.shape(keys)[:2], "bool") if mask is None else ops.cast(mask, "bool")
        weights = {**weights, "w1": w1, "v": v}
        states, contexts, attention = loops.bahdanau_gru(
            gates_x, state["h"], keys if b is None else keys + b, values, mask, weights)
        return ops.concatenate([states, contexts], axis=-1), attention  # out [s_i; c_i] as `_step` gives

    def _luong_parallel(self, embedded, gates_x, state, memory, weights, training):
        if rnn.prefer_keras_layers():  # cuDNN
            states = [state["h"]] if self.rnn == "gru" else [state["h"], state["c"]]
            h, *_ = self.rnn_layer(embedded, initial_state=states, training=training)  # (batch, t_out, units)
        elif training and self.rnn == "gru":  # its backward pass written out (see `loops`)
            [(h, _)] = loops.gru([(gates_x, state["h"], weights, False)])
        else:
            (h,) = _scan(lambda x, s: rnn.step(self.rnn, x, s, weights), gates_x, state, 1)
        context, attention = self._attend(h, memory)  # (batch, t_out, dv), (batch, t_out, t_in)
        out = _hidden(ops.concatenate([context, h], axis=-1), weights)  # (batch, t_out, units)
        return out, attention

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
            "projection_dtype": self.projection_dtype,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["attention"] = keras.saving.deserialize_keras_object(config["attention"])
        return cls(**config)


def _scan(step, xs, state, n_outputs):
    """Runs `step(x_t, state) -> (*outputs, state)` over `xs (batch, t, ...)` in a `tf.while_loop`.

    Returns the `n_outputs` outputs stacked batch-major, each `(batch, t, ...)`.
    """
    t_out = tf.shape(xs)[1]
    inputs = tf.TensorArray(xs.dtype, size=t_out).unstack(tf.transpose(xs, [1, 0, 2]))  # t_out x (batch, ...)
    arrays = tuple(tf.TensorArray(xs.dtype, size=t_out) for _ in range(n_outputs))

    def body(t, state, arrays):
        *outputs, state = step(inputs.read(t), state)
        return t + 1, state, tuple(a.write(t, o) for a, o in zip(arrays, outputs))

    _, _, arrays = tf.while_loop(
        lambda t, *_: t < t_out, body, (tf.constant(0), state, arrays),
        maximum_iterations=t_out,  # a bound XLA needs for the gradient's stacks
    )
    return tuple(tf.transpose(a.stack(), [1, 0, 2]) for a in arrays)  # each (batch, t_out, ...)


def _hidden(x, weights):
    """The `tanh` layer of either style (`hidden_dense`) on `x (..., hidden input)`."""
    return tf.tanh(rnn.affine(x, weights["hidden_kernel"], weights["hidden_bias"]))  # (..., units)


def _with_bias_blocks(weights):
    """`weights` with, when it has `logits_blocks`, `logits_bias_blocks`: the vocabulary bias in
    the blocks' pieces, each added by its block's product (fused). Split once per call, not per step."""
    blocks, bias = weights.get("logits_blocks"), weights.get("logits_bias")
    if not blocks:
        return weights
    pieces = [None] * len(blocks) if bias is None else tf.split(bias, [block.shape[1] for block in blocks])
    return {**weights, "logits_bias_blocks": pieces}


def _logits(x, weights):
    """The vocabulary projection of `x (..., units)`: by column blocks if `weights` has them (see
    `Decoder.decoding_weights`, and `_with_bias_blocks`); if it also has the kernel in one
    piece, by blocks only up to `FEW_ROWS` rows of a `(rows, units)` step, a choice made at every
    step."""
    blocks, kernel = weights.get("logits_blocks"), weights.get("logits_kernel")
    whole = lambda: rnn.affine(x, kernel, weights["logits_bias"])  # noqa: E731
    if not blocks:
        return whole()
    biases = weights["logits_bias_blocks"]
    by_blocks = lambda: tf.concat([rnn.affine(x, w, b) for w, b in zip(blocks, biases)], axis=-1)  # noqa: E731
    if kernel is None:
        return by_blocks()
    return tf.cond(tf.shape(x)[0] <= FEW_ROWS, by_blocks, whole)  # (rows, vocab)


def _block_sizes(total, n):
    """`total` split into `n` sizes that differ by at most one (fewer when `total < n`)."""
    n = max(1, min(n, total))
    return [total // n + (i < total % n) for i in range(n)]
