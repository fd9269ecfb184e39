"""The decoder's fast path: `Decoder.call` and `Decoder.step` on the layer's own weights, read once.

What it replaces, and why:
- The Keras cell and `Dense` calls of each step: the weights are read once per call
  (`decoding_weights`) and a step is a few fused products (`rnn.affine`). The embedding's share of
  the RNN input is projected for all target positions at once, before the loop. The attention
  layer's call: `tfattn.accel.attention`.
- Autodiff through the step loop in training: a GRU Bahdanau decoder runs `loops.bahdanau_gru`
  and a GRU Luong decoder without input feeding runs `loops.gru` (backward passes written out);
  the output layers run `loops.output_layers`, whose backward pass is ordered to overlap the loop's.
- The previous token's share of a step at inference: looked up in tables made ahead from every
  embedding (`decoding_weights(token_tables=True)`), which an export stores.

Tests check each against `Decoder.call` / `Decoder.step`: outputs and gradients within float32
rounding.

Here a step's `out` is `[s_i; c_i]` (Bahdanau, before its tanh layer, which `_project` applies
over all positions) or `h~_t` (Luong).
"""

import tensorflow as tf
from keras import ops

from tfattn.accel import adapter, loops, rnn
from tfattn.accel import attention as fast_attention
from tfattn.accel.rnn import scan
from tfattn.tier import recurrent_path

_HIDDEN_FOLDED = ("hidden_kernel", "hidden_kernel_embedding")  # into Bahdanau's "hidden_table"


def decoding_weights(decoder, token_tables=False):
    """What a step reads, read once per call: a flat dict of tensors for `stepper` and `teacher_forced`.

    Args:
        decoder: a built `Decoder`.
        token_tables: bool. Look up, rather than compute, what the previous token adds at each step
            (`_token_shares` of every embedding): `"gates_table"` `(vocab, gates * units)`, the
            embedding's share of the RNN's gates (with a GRU's input bias only for a Luong decoder
            without input feeding), and, Bahdanau style, `"hidden_table"` `(vocab, units)`, its
            share of the tanh layer. They replace the entries they hold (`kernel`, `hidden_kernel`,
            `hidden_kernel_embedding`; `input_bias` when it is in the table). Making them costs as
            much as a few steps, so they pay when made once, ahead: an export stores them.

    Returns:
        A dict: the RNN's weights from `adapter.cell_weights` (`kernel` for the embedding's share of the
        input, `kernel_rest` for the rest: Bahdanau the context, Luong with input feeding `h~_{t-1}`),
        `hidden_kernel`, `hidden_bias`, `logits_kernel`, `logits_bias`; Bahdanau style also the tanh
        layer's kernel by rows, `hidden_kernel_out` for `[s_i; c_i]` and `hidden_kernel_embedding`
        for `E y_{i-1}`; changed as above by `token_tables`. Entries a decoder lacks are None.
    """
    view = adapter.decoder_view(decoder)
    return _decoding_weights(view, token_tables)


def _decoding_weights(view, token_tables=False):
    dtype = view.dtype
    cast = lambda w: None if w is None else ops.cast(w, dtype)  # noqa: E731
    weights = {
        **adapter.cell_weights(view.cell, dtype, split_at=view.embedding_dim),
        "hidden_kernel": cast(view.hidden_kernel),  # (hidden input, units)
        "hidden_bias": cast(view.hidden_bias),
        # (units, vocab); tied: the embedding table (vocab, units), transposed
        "logits_kernel": cast(ops.transpose(view.embeddings) if view.tied else view.logits_kernel),
        "logits_bias": cast(view.logits_bias),
    }
    if view.style == "bahdanau":  # rows for [s_i; c_i], then for E y_{i-1}
        weights["hidden_kernel_out"] = weights["hidden_kernel"][: -view.embedding_dim]
        weights["hidden_kernel_embedding"] = weights["hidden_kernel"][-view.embedding_dim:]
    if token_tables:
        embeddings = ops.cast(view.embeddings, dtype)  # (vocab, emb)
        gates_table, hidden_table = _token_shares(view, embeddings, weights)
        folded = ("kernel",) + (() if _biased_in_step(view) else ("input_bias",)) + (
            _HIDDEN_FOLDED if view.style == "bahdanau" else ())
        weights = {k: v for k, v in weights.items() if k not in folded}
        weights["gates_table"] = gates_table  # (vocab, gates * units)
        if hidden_table is not None:
            weights["hidden_table"] = hidden_table  # (vocab, units)
    return weights


def _token_shares(view, embedded, weights):
    """What the embedding `(..., emb)` of the previous token adds to a step: its share of the RNN's
    gates `(..., gates * units)` and, Bahdanau style, of the tanh layer `(..., units)` (else None).
    A bias is left out where the step adds it with a product of its own (`_biased_in_step`; the tanh
    layer's always), where TensorFlow fuses the two (`rnn.affine`)."""
    input_bias = None if _biased_in_step(view) else weights["input_bias"]
    gates_x = rnn.affine(embedded, weights["kernel"], input_bias)
    if view.style != "bahdanau":
        return gates_x, None
    return gates_x, rnn.affine(embedded, weights["hidden_kernel_embedding"])


def _biased_in_step(view):
    """Whether the step adds the RNN's input bias with the product of the rest of its input (the
    context, Bahdanau style; the fed `h~_{t-1}`, Luong style with input feeding), where the two fuse."""
    return view.style == "bahdanau" or view.feeds_input


def _step(view, gates_x, state, memory, weights):
    """`Decoder._step` on `gates_x (batch, gates * units)`, the embedding's share of the RNN input
    (without the input bias when `_biased_in_step`: the step adds it).

    Returns `(out, attention (batch, t_in), state)`, `out` as the module docstring says.
    """
    if view.style == "bahdanau":
        query = state["h"][:, None, :]  # (batch, 1, units)
        context, attention = fast_attention.attend(view.attention_layer, query, memory)  # (batch, 1, dv)
        context = context[:, 0, :]  # (batch, dv)
        gates_x = gates_x + rnn.affine(context, weights["kernel_rest"], weights["input_bias"])
        h, new_state = rnn.step(view.rnn, gates_x, state, weights)
        out = ops.concatenate([h, context], axis=-1)  # (batch, units + dv)
    else:
        if view.feeds_input:
            gates_x = gates_x + rnn.affine(state["feed"], weights["kernel_rest"], weights["input_bias"])
        h, new_state = rnn.step(view.rnn, gates_x, state, weights)
        position = state["position"][:, None] if view.tracks_position else None  # (batch, 1): step t
        query = h[:, None, :]  # (batch, 1, units)
        context, attention = fast_attention.attend(view.attention_layer, query, memory, position)  # (batch, 1, dv)
        out = _hidden(ops.concatenate([context[:, 0, :], h], axis=-1), weights)  # (batch, units)
        if view.feeds_input:
            new_state["feed"] = out
        if view.tracks_position:
            new_state["position"] = state["position"] + 1
    return out, attention[:, 0, :], new_state


def stepper(decoder, weights=None):
    """`Decoder.step` as a function with the weights read once: a decoding loop calls this before it.

    Args:
        decoder: a built `Decoder`.
        weights: optional dict from `decoding_weights`, read or stored ahead (an export keeps them as
            variables, with token tables). Defaults to `decoding_weights(decoder)`, read now.

    Returns:
        A function `(token, state, memory) -> (logits, weights, state)`, as `Decoder.step`.
    """
    view = adapter.decoder_view(decoder)
    weights = _decoding_weights(view) if weights is None else weights
    if "gates_table" in weights:  # the previous token's shares, looked up
        hidden_table = weights.get("hidden_table")
        shares = lambda token: (tf.gather(weights["gates_table"], token),  # noqa: E731
                                None if hidden_table is None else tf.gather(hidden_table, token))
    else:
        shares = lambda token: _token_shares(view, view.embedding(token), weights)  # noqa: E731

    def step(token, state, memory):
        gates_x, hidden_x = shares(token)  # (batch, gates * units), Bahdanau (batch, units)
        out, attention, state = _step(view, gates_x, state, memory, weights)
        if hidden_x is not None:  # Bahdanau: tanh(W [s_i; c_i; E y_{i-1}] + b), the last share added
            out = tf.tanh(rnn.affine(out, weights["hidden_kernel_out"], weights["hidden_bias"]) + hidden_x)
        return rnn.affine(out, weights["logits_kernel"], weights["logits_bias"]), attention, state

    return step


def teacher_forced(decoder, target_in, encoder_outputs, state, mask, training=False):
    """`decoder(target_in, encoder_outputs, state, mask, training)`: logits and attention, fast.
    Dropout on the attention weights and hard attention's draws are the layer's own: in training
    such a decoder runs its call."""
    view = adapter.decoder_view(decoder)
    if training and adapter.trains_itself(view.attention_layer):
        return decoder(target_in, encoder_outputs, state, mask, training=True)
    # 1. Embed the shifted target; its share of the RNN's gates is projected for all steps at once.
    memory = fast_attention.prepare_memory(view.attention_layer, encoder_outputs, mask)
    embedded = view.dropout_layer(view.embedding(target_in), training=training)  # (batch, t_out, emb)
    weights = _decoding_weights(view)
    state = view.initial_state(state)
    # 2. Run the steps.
    if view.style == "luong" and not view.feeds_input:
        out, attention = _luong_parallel(view, embedded, state, memory, weights, training)
    elif training and _has_written_out_loop(view):
        gates_x = rnn.project_inputs(weights, embedded)  # the loop's step adds no bias of its own
        out, attention = _bahdanau_loop(view, gates_x, state, memory, weights)
    else:
        gates_x, _ = _token_shares(view, embedded, weights)  # as `_step` takes it
        out, attention = scan(lambda x, s: _step(view, x, s, memory, weights), gates_x, state, 2)
    # 3. Project all steps to the vocabulary at once.
    return _project(view, out, embedded, weights, training), attention


def _has_written_out_loop(view):
    """Whether `loops.bahdanau_gru` (backward pass written out) covers this decoder."""
    return (view.style == "bahdanau" and view.rnn == "gru"
            and adapter.attention_kind(view.attention_layer) == "additive")


def _bahdanau_loop(view, gates_x, state, memory, weights):
    scorer = adapter.additive_weights(view.attention_layer)
    dtype = gates_x.dtype
    keys, values, mask = memory["keys"], memory["values"], memory["mask"]
    mask = ops.ones(ops.shape(keys)[:2], "bool") if mask is None else ops.cast(mask, "bool")
    weights = {**weights, "w1": ops.cast(scorer["query_kernel"], dtype), "v": ops.cast(scorer["v"], dtype)}
    states, contexts, attention = loops.bahdanau_gru(gates_x, state["h"], keys, values, mask, weights)
    return ops.concatenate([states, contexts], axis=-1), attention  # out [s_i; c_i] as `_step` gives


def _luong_parallel(view, embedded, state, memory, weights, training):
    """Luong without input feeding: the RNN over the whole target, then attention for all steps."""
    gates_x = rnn.project_inputs(weights, embedded)  # (batch, t_out, gates * units)
    if recurrent_path(accel=True) == "cudnn":  # the Keras layer, for cuDNN
        states = [state["h"]] if view.rnn == "gru" else [state["h"], state["c"]]
        h, *_ = view.rnn_layer(embedded, initial_state=states, training=training)  # (batch, t_out, units)
    elif training and view.rnn == "gru":  # its backward pass written out (see `loops`)
        [(h, _)] = loops.gru([(gates_x, state["h"], weights, False)])
    else:
        recurrent = {k: state[k] for k in ("h", "c") if k in state}  # not local-m's "position"
        (h,) = scan(lambda x, s: rnn.step(view.rnn, x, s, weights), gates_x, recurrent, 1)
    positions = tf.range(tf.shape(h)[1]) if view.tracks_position else None  # (t_out,): steps 0, 1, ...
    context, attention = fast_attention.attend(view.attention_layer, h, memory, positions)  # (batch, t_out, dv)
    return _hidden(ops.concatenate([context, h], axis=-1), weights), attention  # (batch, t_out, units)


def _project(view, out, embedded, weights, training=False):
    """Step outputs -> logits for all steps at once. Bahdanau: the `tanh` layer reads
    `[s_i; c_i; E y_{i-1}]` first. Luong: `out` is `h~_t` already."""
    hidden = view.style == "bahdanau"
    if hidden:
        out = ops.concatenate([out, embedded], axis=-1)  # (..., hidden input)
    if training:  # the backward pass ordered (`loops.output_layers`)
        keep = tf.constant(1.0, out.dtype)
        if view.dropout:  # dropout's mask, scaled: the draw it would make on the output itself
            ones = tf.ones(tf.concat([tf.shape(out)[:-1], [view.units]], axis=0), out.dtype)  # (batch, t_out, units)
            keep = view.dropout_layer(ones, training=True)
        return loops.output_layers(out, keep, weights, hidden)  # (batch, t_out, vocab)
    if hidden:
        out = _hidden(out, weights)  # (..., units)
    return rnn.affine(out, weights["logits_kernel"], weights["logits_bias"])  # (..., vocab)


def _hidden(x, weights):
    """The `tanh` layer of either style (`hidden_dense`) on `x (..., hidden input)`."""
    return tf.tanh(rnn.affine(x, weights["hidden_kernel"], weights["hidden_bias"]))  # (..., units)
