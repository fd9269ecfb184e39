"""GRU and LSTM steps written out over a Keras cell's weights, with the input projection done apart.

A Keras cell computes `x @ kernel` inside every step. The encoder knows its whole input before its
loop starts, and the decoder most of its input (the target embeddings), so they project it for all
steps in one matmul and pass each step only its share (`gates_x`); what is known only inside the
decoder's loop (the attention context, the fed attentional vector) adds its own share. The steps
below then do the recurrent half, and `run_masked` runs them over padded sequences, both directions
of a bidirectional encoder in one loop, with fewer graph nodes per step than the Keras layers' loop
(`docs/performance.md` has the figures). In training, a GRU runs these same steps in
`tfattn.accel.loops`, with their backward pass written out. On a GPU the encoder and the Luong
decoder without input feeding run the Keras layers instead, for cuDNN (`tfattn.tier.recurrent_path`
decides).

    GRU  (Keras layout, reset_after=True; gates z, r, h):
        gates_x = x @ kernel + input_bias                  # (batch, 3 units), from outside the step
        gates_h = h @ recurrent_kernel + recurrent_bias    # (batch, 3 units)
        z, r = sigmoid(gates_x[:2u] + gates_h[:2u])
        h~   = tanh(gates_x[2u:] + r * gates_h[2u:])
        h    = z * h + (1 - z) * h~
    LSTM (Keras layout; gates i, f, c, o):
        gates_x = x @ kernel                               # from outside the step, no bias
        gates = gates_x + (h @ recurrent_kernel + bias)    # the cell's one bias, with the recurrent product
        c = sigmoid(f) * c + sigmoid(i) * tanh(c~);  h = sigmoid(o) * tanh(c)

The weights stay those of a `keras.layers.GRU`/`LSTM`, so saving, loading and the layer's own
`call` are unchanged; a test checks each step against the Keras cell.
"""

import tensorflow as tf
from keras import ops

from tfattn.accel import branch


def affine(x, w, b=None):
    """`x (..., d) @ w (d, n) + b (n,)` (no bias when None).

    Written as a 2-D product and `bias_add`, which TensorFlow's graph optimizer fuses into one
    kernel (`_FusedMatMul`); for the one-row products of a decoding step that kernel is faster than
    a MatMul alone. A constant zero bias would not do: TensorFlow folds it away first. A 3-D `x` is
    reshaped to 2-D and back (a tensordot takes 12 graph nodes).
    """
    x = tf.convert_to_tensor(x)
    if x.shape.rank is not None and x.shape.rank != 2:
        y = affine(tf.reshape(x, [-1, x.shape[-1]]), w, b)  # (N, n)
        return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(y)[-1:]], axis=0))
    y = tf.matmul(x, w)  # (N, n)
    return y if b is None else tf.nn.bias_add(y, b)


def project_inputs(weights, x):
    """`x (..., input) -> (..., gates * units)`: the input share of every gate, with the input bias
    (a GRU's; an LSTM's one bias is added in its step)."""
    return affine(x, weights["kernel"], weights["input_bias"])


def gru_step(gates_x, h, weights):
    """One GRU step: `gates_x (batch, 3u)`, `h (batch, u)` -> the new `h (batch, u)`."""
    return gru_parts(gates_x, h, weights)["h"]


def gru_parts(gates_x, h, weights):
    """One GRU step with the tensors its backward pass reads (`tfattn.accel.loops`): a dict of the
    new state `h`, the state before it `s`, the gates `z`, `r`, the candidate `n` and the recurrent
    share of the candidate's gate `gh_n`, each `(batch, u)`."""
    gates_h = affine(h, weights["recurrent_kernel"], weights["recurrent_bias"])  # (batch, 3u)
    units = weights["recurrent_kernel"].shape[0]
    # tf.split with both sizes: one graph node (keras' split at an index adds about 20 that work out
    # the sizes, at every step of a loop).
    x_zr, x_h = tf.split(gates_x, [2 * units, units], axis=-1)  # (batch, 2u), (batch, u)
    h_zr, h_h = tf.split(gates_h, [2 * units, units], axis=-1)
    z, r = tf.split(ops.sigmoid(x_zr + h_zr), 2, axis=-1)  # (batch, u) each
    n = ops.tanh(x_h + r * h_h)  # (batch, u)
    return {"h": z * h + (1.0 - z) * n, "s": h, "z": z, "r": r, "n": n, "gh_n": h_h}


def lstm_step(gates_x, h, c, weights):
    """One LSTM step: `gates_x (batch, 4u)`, `h`, `c (batch, u)` -> the new `(h, c)`."""
    gates = gates_x + affine(h, weights["recurrent_kernel"], weights["recurrent_bias"])  # (batch, 4u)
    i, f, candidate, o = ops.split(gates, 4, axis=-1)
    c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(candidate)
    return ops.sigmoid(o) * ops.tanh(c), c


def step(kind, gates_x, state, weights):
    """One step of a `"gru"` or `"lstm"` on a state dict `{"h"[, "c"]}`; returns the new `h` and state."""
    if kind == "gru":
        h = gru_step(gates_x, state["h"], weights)
        return h, {"h": h}
    h, c = lstm_step(gates_x, state["h"], state["c"], weights)
    return h, {"h": h, "c": c}


def run_masked(kind, directions, mask, training=False, padded=True):
    """Runs RNNs over right-padded sequences, all in one `tf.while_loop`, skipping padding.

    A bidirectional encoder passes two directions: their steps are independent, so the two chains
    of small ops in each iteration can run on two cores at once.

    Args:
        kind: `"gru"` or `"lstm"`.
        directions: list of `(gates_x, weights, reverse)`: `gates_x (batch, t, gates * units)` from
            `project_inputs`, `weights` from `adapter.cell_weights`, and whether to read the sequence from
            its end.
        mask: bool `(batch, t)`, `False` on padding. A padding step leaves the state as it was and
            outputs zeros, so the reverse direction starts at each sentence's last real token. In
            inference, a batch without padding runs a loop that reads no mask.
        training: bool. In training every batch runs the masked loop, which TensorFlow
            differentiates. (A GRU trains faster in `tfattn.accel.loops.gru`, the same steps with
            their backward pass written out; `tfattn.accel.encoder` chooses.)
        padded: bool. `False` says that no sequence has padding (one sentence with its padding
            cut), so the loop that reads no mask runs without a branch deciding it when the graph
            runs. Defaults to `True`.

    Returns:
        `(outputs, states)`: per direction, outputs `(batch, t, units)` and the final state dict.
    """
    zeros = [zero_state(g, w) for g, w, _ in directions]
    if training or not padded:
        return _loop(kind, directions, mask, zeros, masked=padded)
    # In inference, a batch without padding (one sentence, say) skips the masks' reads and selects:
    # 60 graph nodes a step instead of 78 for two GRU directions.
    return branch.cond(tf.reduce_all(mask), lambda: _loop(kind, directions, mask, zeros, masked=False),
                       lambda: _loop(kind, directions, mask, zeros, masked=True))


def zero_state(gates_x, weights):
    """A zero state `(batch, units)` for inputs `gates_x (batch, t, gates * units)`."""
    return tf.zeros([tf.shape(gates_x)[0], weights["recurrent_kernel"].shape[0]], gates_x.dtype)


def _loop(kind, directions, mask, zeros, masked):
    """`run_masked`'s `tf.while_loop`; `masked=False` treats every position as real."""
    t_max = tf.shape(mask)[1]
    time_major = lambda x: tf.transpose(x, [1, 0, *range(2, x.shape.rank)])  # noqa: E731
    if masked:
        masks = tf.TensorArray(tf.bool, size=t_max, clear_after_read=False).unstack(time_major(mask))  # t x (batch,)
    inputs = [tf.TensorArray(g.dtype, size=t_max).unstack(time_major(g)) for g, _, _ in directions]
    states = [{"h": h0} if kind == "gru" else {"h": h0, "c": h0} for h0 in zeros]
    arrays = [tf.TensorArray(gates_x.dtype, size=t_max) for gates_x, _, _ in directions]

    def body(i, states, arrays):
        new_states, new_arrays = [], []
        for (_, weights, reverse), x, state, array in zip(directions, inputs, states, arrays):
            t = t_max - 1 - i if reverse else i
            h, stepped = step(kind, x.read(t), state, weights)
            if masked:
                real = masks.read(t)[:, None]  # (batch, 1)
                stepped = {k: tf.where(real, stepped[k], state[k]) for k in state}
                h = tf.where(real, h, tf.zeros_like(h))
            new_states.append(stepped)
            new_arrays.append(array.write(t, h))
        return i + 1, new_states, new_arrays

    _, states, arrays = tf.while_loop(lambda i, *_: i < t_max, body, (tf.constant(0), states, arrays),
                                      maximum_iterations=t_max)
    return [time_major(a.stack()) for a in arrays], states


def scan(step, inputs, state, n_outputs=2):
    """Runs `step(x_t, state) -> (*outputs, state)` over `inputs (batch, t_out, ...)` in order, by a
    `tf.while_loop` over `tf.TensorArray`s (no carry copies, unlike `keras.ops.scan` on TensorFlow).

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
