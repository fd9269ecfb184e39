"""The encoder's recurrent layers as written-out loops, on the Keras layers' own weights.

Replaces `Encoder.call`'s Keras GRU/LSTM layers on a CPU: each direction's input projection is one
matmul over all steps, both directions of a bidirectional layer step in one `tf.while_loop`
(`rnn.run_masked`), and in training a GRU runs `loops.gru`, whose backward pass is written out.
On a GPU the Keras layers run, as cuDNN kernels (`tfattn.tier.recurrent_path`). A test checks
outputs and gradients against `Encoder.call`.
"""

from keras import ops

from tfattn.accel import adapter, loops, rnn
from tfattn.tier import recurrent_path


def encode(encoder, source, training=False, padded=True):
    """`encoder(source, training)` by the fast path: `(outputs, state, mask)` as `Encoder.call` returns.
    `padded=False` says the source has no padding (`rnn.run_masked`)."""
    if recurrent_path(accel=True) == "cudnn":  # the Keras layers, for cuDNN
        return encoder(source, training=training)
    view = adapter.encoder_view(encoder)
    # 1. Embed; padding (id 0) is masked, as in `Encoder.call`.
    mask = ops.not_equal(source, 0)  # (batch, t_in)
    x = view.dropout_layer(view.embedding(source), training=training)  # (batch, t_in, emb)
    # 2. Recurrent layers, each as one loop over its directions.
    for i, cells in enumerate(view.cells):
        if i:
            x = view.dropout_layer(x, training=training)
        x, states = _run_layer(view, cells, x, mask, training, padded)
    return x, view.merge_states(states), mask


def _run_layer(view, cells, x, mask, training, padded):
    """One (bidirectional) recurrent layer of `cells`: outputs `(batch, t_in, units)` and its final
    states, in the order a Keras layer returns them."""
    weights = [adapter.cell_weights(cell, view.dtype) for cell in cells]
    directions = [(rnn.project_inputs(w, x), w, reverse) for w, reverse in zip(weights, (False, True))]
    if training and view.rnn == "gru":  # the backward pass written out
        runs = [(g, rnn.zero_state(g, w), w, reverse) for g, w, reverse in directions]
        results = loops.gru(runs, mask)
        outputs, states = [out for out, _ in results], [{"h": h} for _, h in results]
    else:
        outputs, states = rnn.run_masked(view.rnn, directions, mask, training, padded)
    flat = [state[k] for state in states for k in ("h", "c") if k in state]
    return ops.concatenate(outputs, axis=-1), flat  # (batch, t_in, units)
