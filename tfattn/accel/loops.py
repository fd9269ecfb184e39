"""Training loops with their backward pass written out: the Bahdanau decoder's, and a GRU's (and
the decoder's output layers over all steps, whose backward pass is only put in a better order).

In training (`training=True`), `Decoder.call` runs `bahdanau_gru` instead of autodiff through its
step loop when it can (a GRU and a plain `BahdanauAttention`), and `gru` runs the encoder's GRUs and
the Luong decoder's without input feeding; tests check that both ways give the same outputs and
gradients. Inference and exports keep the plain loops: these here keep what their backward pass
reads, and a SavedModel cannot save gradient functions that capture a loop's tensors.

The forward pass is the decoder's step, unchanged. The backward pass is where the time goes:
through a `tf.while_loop`, autodiff computes every weight's gradient inside the reversed loop, one
small matmul per weight per step plus an AddN to accumulate it, and keeps every intermediate. Here
each reversed step only carries the gradient back to the previous state; the weight gradients are
one large matmul each, over all steps, after the loop (the gain is in `docs/performance.md`).

Forward, step i (B batch, T source positions, u state size, a attention size; K = keys + b):
    q      = s_{i-1} W1                                   # (B, a)
    hid    = tanh(q + K)                                  # (B, T, a)
    e      = hid v ;  alpha = masked softmax(e)           # (B, T)
    c      = sum_j alpha_j V_j                            # (B, dv)
    gx     = gates_x_i + c Kc ;  gh = s_{i-1} R + b_r     # (B, 3u), GRU gates z, r, n
    z, r   = sigmoid(gx_zr + gh_zr) ;  n = tanh(gx_n + r * gh_n)
    s_i    = z s_{i-1} + (1 - z) n                        # (B, u)

Backward, step i in reverse, with ds the gradient reaching s_i (from the output and from step i+1):
    dn   = tanh'(n) (1 - z) ds ;  dz = sigmoid'(z) (s_{i-1} - n) ds ;  dr = sigmoid'(r) gh_n dn
    dgx  = [dz, dr, dn] ;  dgh = [dz, dr, r dn]
    dc   = dc_out + dgx Kc^T ;  dalpha = V dc + dalpha_out
    de   = alpha (dalpha - sum_j alpha_j dalpha_j)        # softmax; 0 where masked, as alpha is
    dhid = tanh'(hid) de v ;  dK += dhid ;  dv += sum hid de ;  dq = sum_j dhid
    ds_{i-1} = z ds + dgh R^T + dq W1^T
After the loop, with S, C the stacked s_{i-1}, c_i:
    dW1 = S^T dQ ;  dR = S^T dGH ;  db_r = sum dGH ;  dKc = C^T dGX ;  dV = sum_i alpha_i^T dc_i
"""

import tensorflow as tf

from tfattn.accel import rnn
from tfattn.layers.attention import masked_softmax

_SAVED = ("s", "z", "r", "n", "gh_n", "hid", "alpha", "c")  # what the Bahdanau backward pass reads, per step


def bahdanau_gru(gates_x, h0, keys, values, mask, weights):
    """Runs the Bahdanau decoder's steps over a whole target (teacher forcing).

    Args:
        gates_x: `(batch, t_out, 3 units)`, the target embeddings' share of the GRU gates, input
            bias included (`rnn.project_inputs`).
        h0: `(batch, units)`, the initial state.
        keys: `(batch, t_in, att_units)`, the projected keys, plus the score bias `b` if any.
        values: `(batch, t_in, dv)`, the encoder outputs.
        mask: bool `(batch, t_in)`, `False` on source padding.
        weights: dict of tensors: `w1 (units, att_units)` and `v (att_units,)` of the score (`v`
            already weight-normalized if it is), `kernel_rest (dv, 3 units)` (the context's share
            of the GRU kernel), `recurrent_kernel (units, 3 units)`, `recurrent_bias (3 units,)`.

    Returns:
        `(states, contexts, attention)`: `(batch, t_out, units)`, `(batch, t_out, dv)`,
        `(batch, t_out, t_in)`; step i's state is `s_i`, its context and weights are `c_i`, `alpha_i`.
    """
    return _bahdanau_gru(mask, gates_x, h0, keys, values, *(weights[k] for k in _BAHDANAU_WEIGHTS))


def _bahdanau_gru(mask, *args):
    @tf.custom_gradient
    def loop(gates_x, h0, keys, values, *weights):
        w = dict(zip(_BAHDANAU_WEIGHTS, weights))
        s_last, saved = _bahdanau_forward(mask, gates_x, h0, keys, values, w)
        s_prev, contexts, alphas = (saved[k].stack() for k in ("s", "c", "alpha"))  # time-major
        states = tf.concat([s_prev[1:], s_last[None]], axis=0)  # (t_out, B, u): s_1 .. s_t_out

        def backward(d_states, d_contexts, d_alphas):
            upstream = {"ds": d_states, "dc": d_contexts}
            if d_alphas is not None:  # the attention weights are an output too (None if unused)
                upstream["dalpha"] = d_alphas
            d_h0, d_keys, d_v, grads = _bahdanau_backward(saved, upstream, h0, keys, values, w)
            d_gx, d_gh, d_q, d_c = (grads[k].stack() for k in ("dgx", "dgh", "dq", "dc"))  # time-major
            return (_time_major(d_gx), d_h0, d_keys,
                    tf.einsum("tbj,tbd->bjd", alphas, d_c),  # d values (B, T, dv)
                    _kernel_gradient(s_prev, d_q), d_v,  # d w1, d v
                    _kernel_gradient(contexts, d_gx), _kernel_gradient(s_prev, d_gh),  # d kernel_rest, d R
                    tf.reduce_sum(d_gh, axis=[0, 1]))  # d recurrent_bias

        return (_time_major(states), _time_major(contexts), _time_major(alphas)), backward

    return loop(*args)


_BAHDANAU_WEIGHTS = ("w1", "v", "kernel_rest", "recurrent_kernel", "recurrent_bias")


def _bahdanau_forward(mask, gates_x, h0, keys, values, w):
    """The forward loop: the last state `(B, u)` and, per step, what the backward pass reads."""
    t_out = tf.shape(gates_x)[1]
    inputs = tf.TensorArray(gates_x.dtype, size=t_out).unstack(_time_major(gates_x))  # t_out x (B, 3u)
    saved = _arrays(gates_x.dtype, t_out, _SAVED, keep=True)

    def forward(i, s, saved):
        alpha, c, hid = _attend(s, keys, values, mask, w)
        gx = inputs.read(i) + tf.matmul(c, w["kernel_rest"])  # (B, 3u)
        s_new, step = _gru_forward(gx, s, w["recurrent_kernel"], w["recurrent_bias"])
        step = dict(step, hid=hid, alpha=alpha, c=c)
        return i + 1, s_new, {k: saved[k].write(i, step[k]) for k in _SAVED}

    _, s_last, saved = tf.while_loop(lambda i, *_: i < t_out, forward, (tf.constant(0), h0, saved),
                                     maximum_iterations=t_out)
    return s_last, saved


def _attend(s, keys, values, mask, w):
    """Bahdanau attention with the query `s (B, u)`: weights `(B, T)`, context `(B, dv)`, and the
    score's hidden layer `(B, T, a)`."""
    batch, t_in, att_units = tf.shape(keys)[0], tf.shape(keys)[1], w["v"].shape[0]
    q = tf.matmul(s, w["w1"])  # (B, a)
    hid = tf.tanh(q[:, None, :] + keys)  # (B, T, a)
    e = tf.reshape(tf.matmul(tf.reshape(hid, [-1, att_units]), w["v"][:, None]), [batch, t_in])  # (B, T)
    alpha = masked_softmax(e, mask)  # (B, T)
    c = tf.matmul(alpha[:, None, :], values)[:, 0, :]  # (B, dv), one batched matrix-vector product
    return alpha, c, hid


def _bahdanau_backward(saved, upstream, h0, keys, values, w):
    """The backward loop, steps in reverse: the gradients of `h0`, the keys and `v`, and per step
    `dgx`, `dgh`, `dq`, `dc` (TensorArrays) for the weight gradients taken after it."""
    t_out = tf.shape(upstream["ds"])[1]
    upstream = {k: tf.TensorArray(x.dtype, size=t_out).unstack(_time_major(x)) for k, x in upstream.items()}
    grads = _arrays(h0.dtype, t_out, ("dgx", "dgh", "dq", "dc"))
    by_t = {k: _by_transpose(w[k]) for k in ("kernel_rest", "recurrent_kernel", "w1")}  # x -> x W^T

    def step_back(j, ds, d_keys, d_v, grads):
        i = t_out - 1 - j
        step = {k: saved[k].read(i) for k in _SAVED[:-1]}
        dgx, dgh, ds_prev = _gru_backward(ds + upstream["ds"].read(i), step, by_t["recurrent_kernel"])
        dc = upstream["dc"].read(i) + by_t["kernel_rest"](dgx)  # (B, dv)
        dalpha = tf.matmul(values, dc[:, :, None])[:, :, 0]  # (B, T)
        if "dalpha" in upstream:
            dalpha = dalpha + upstream["dalpha"].read(i)
        dhid, dv_step, dq = _attend_backward(dalpha, step["alpha"], step["hid"], w["v"])
        ds_prev = ds_prev + by_t["w1"](dq)  # the query's share
        grads = {k: grads[k].write(i, g) for k, g in (("dgx", dgx), ("dgh", dgh), ("dq", dq), ("dc", dc))}
        return j + 1, ds_prev, d_keys + dhid, d_v + dv_step, grads

    start = (tf.constant(0), tf.zeros_like(h0), tf.zeros_like(keys), tf.zeros_like(w["v"]), grads)
    _, d_h0, d_keys, d_v, grads = tf.while_loop(lambda j, *_: j < t_out, step_back, start,
                                                maximum_iterations=t_out)
    return d_h0, d_keys, d_v, grads


def _attend_backward(dalpha, alpha, hid, v):
    """Back through the softmax and the score, given `dalpha (B, T)`: the gradients of the hidden
    layer `(B, T, a)` (which is the keys' too), of `v` `(a,)` and of the query's projection `(B, a)`."""
    de = alpha * (dalpha - tf.reduce_sum(alpha * dalpha, axis=-1, keepdims=True))  # (B, T); 0 where masked
    dhid = tf.raw_ops.TanhGrad(y=hid, dy=de[:, :, None] * v)  # (B, T, a)
    dv = tf.matmul(tf.reshape(de, [1, -1]), tf.reshape(hid, [-1, v.shape[0]]))[0]  # (a,)
    return dhid, dv, tf.reduce_sum(dhid, axis=1)


def _arrays(dtype, size, names, keep=False):
    """A dict of TensorArrays, one per name; `keep`: readable more than once."""
    return {k: tf.TensorArray(dtype, size=size, clear_after_read=not keep) for k in names}


def _kernel_gradient(inputs, d_outputs):
    """A kernel's gradient over all steps, `sum_t x_t^T dy_t`, as one matmul: `inputs (t, B, n)`,
    `d_outputs (t, B, m)` -> `(n, m)`."""
    rows = lambda x: tf.reshape(x, [-1, x.shape[-1]])  # noqa: E731  (t * B, ...)
    return tf.matmul(rows(inputs), rows(d_outputs), transpose_a=True)


def _time_major(x):
    """`(a, b, ...) -> (b, a, ...)`: batch-major to time-major and back."""
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


def gru(directions, mask=None):
    """Runs GRUs over whole sequences in one loop, skipping padding, with the backward pass written out.

    The encoder runs its two directions here (their independent steps use both cores of a small
    CPU), and the Luong decoder without input feeding its single one. Per step, for a real position
    (a padding position keeps the state and outputs zeros, so a reversed direction starts at each
    sentence's last token):

        forward:   gh = s R + b_r ;  z, r = sigmoid(gx_zr + gh_zr) ;  n = tanh(gx_n + r * gh_n)
                   s' = z s + (1 - z) n
        backward:  ds' = (gradient from step i+1) + (gradient of the output)
                   dgx = [sigmoid'(z) (s - n) ds', sigmoid'(r) gh_n dn, dn] with dn = tanh'(n) (1 - z) ds'
                   dgh = [dgx_z, dgx_r, r dn] ;  ds = z ds' + dgh R^T
        after:     dR = S^T dGH ;  db_r = sum dGH           (S: the stacked states before each step)

    Args:
        directions: list of `(gates_x, h0, weights, reverse)`: `gates_x (batch, t, 3 units)` from
            `rnn.project_inputs`, the initial state `h0 (batch, units)`, `weights` from
            `adapter.cell_weights` (a GRU's), and whether to read the sequence from its end.
        mask: optional bool `(batch, t)`, `False` on padding. Defaults to none (every step real).

    Returns:
        Per direction, `(outputs (batch, t, units), final state (batch, units))`.
    """
    flat = []
    for gates_x, h0, weights, _ in directions:
        flat += [gates_x, h0, weights["recurrent_kernel"], weights["recurrent_bias"]]
    reverses = [reverse for *_, reverse in directions]
    results = _gru(mask, reverses, *flat)
    return [(results[2 * d], results[2 * d + 1]) for d in range(len(directions))]


def _gru(mask, reverses, *flat):
    @tf.custom_gradient
    def loop(*flat):
        gates_x, h0, kernels, biases = (flat[k::4] for k in range(4))
        t_max = tf.shape(gates_x[0])[1]
        masks = None
        if mask is not None:
            masks = tf.TensorArray(tf.bool, size=t_max, clear_after_read=False).unstack(
                tf.transpose(mask)[:, :, None])  # t x (B, 1)
        position = lambda i, d: t_max - 1 - i if reverses[d] else i  # noqa: E731
        finals, saved, outs = _gru_forward_loop(gates_x, h0, kernels, biases, masks, position)
        results = []
        for d in range(len(reverses)):
            results += [_time_major(outs[d].stack()), finals[d]]

        def backward(*upstream):
            # An output nobody used (a final state the caller dropped) has no upstream gradient.
            upstream = [tf.zeros_like(x) if g is None else g for g, x in zip(upstream, results)]
            d_h0, grads = _gru_backward_loop(upstream, saved, kernels, masks, position)
            result = []
            for d in range(len(reverses)):
                d_gh = grads[d]["dgh"].stack()  # (t, B, 3u)
                d_kernel = _kernel_gradient(saved[d]["s"].stack(), d_gh)
                result += [_time_major(grads[d]["dgx"].stack()), d_h0[d], d_kernel, tf.reduce_sum(d_gh, axis=[0, 1])]
            return result

        return results, backward

    return loop(*flat)


def _gru_forward_loop(gates_x, h0, kernels, biases, masks, position):
    """`gru`'s forward loop, every direction in each iteration: the final states, and per direction
    the saved tensors (`_GRU_SAVED`) and the outputs, as TensorArrays by position."""
    n_dir, dtype, t_max = len(gates_x), gates_x[0].dtype, tf.shape(gates_x[0])[1]
    inputs = [tf.TensorArray(dtype, size=t_max).unstack(_time_major(g)) for g in gates_x]
    saved = [_arrays(dtype, t_max, _GRU_SAVED, keep=True) for _ in range(n_dir)]
    outs = [tf.TensorArray(dtype, size=t_max) for _ in range(n_dir)]

    def forward(i, states, saved, outs):
        new_states, new_saved, new_outs = [], [], []
        for d in range(n_dir):
            t, s = position(i, d), states[d]
            s_new, step = _gru_forward(inputs[d].read(t), s, kernels[d], biases[d])
            out = s_new
            if masks is not None:  # a padding position keeps the state and outputs zeros
                real = masks.read(t)  # (B, 1)
                s_new, out = tf.where(real, s_new, s), tf.where(real, s_new, tf.zeros_like(s_new))
            new_saved.append({k: saved[d][k].write(t, step[k]) for k in _GRU_SAVED})
            new_outs.append(outs[d].write(t, out))
            new_states.append(s_new)
        return i + 1, new_states, new_saved, new_outs

    _, finals, saved, outs = tf.while_loop(lambda i, *_: i < t_max, forward,
                                           (tf.constant(0), list(h0), saved, outs), maximum_iterations=t_max)
    return finals, saved, outs


def _gru_backward_loop(upstream, saved, kernels, masks, position):
    """`gru`'s backward loop, positions in reverse: the gradients of the initial states, and per
    direction `dgx`, `dgh` (TensorArrays by position). `upstream`: outputs' and final states'
    gradients, alternating by direction."""
    n_dir, dtype, t_max = len(kernels), upstream[0].dtype, tf.shape(upstream[0])[1]
    d_outs = [tf.TensorArray(dtype, size=t_max).unstack(_time_major(upstream[2 * d])) for d in range(n_dir)]
    grads = [_arrays(dtype, t_max, ("dgx", "dgh")) for _ in range(n_dir)]
    by_t = [_by_transpose(k) for k in kernels]  # dgh -> dgh R^T

    def step_back(j, ds_all, grads):
        new_ds, new_grads = [], []
        for d in range(n_dir):
            t, ds = position(t_max - 1 - j, d), ds_all[d]
            ds_new = ds + d_outs[d].read(t)  # the gradient reaching this step's new state
            if masks is not None:  # a padding step passed the state through, untouched
                real, zeros = masks.read(t), tf.zeros_like(ds)
                ds_new, ds_kept = tf.where(real, ds_new, zeros), tf.where(real, zeros, ds)
            dgx, dgh, ds_prev = _gru_backward(ds_new, {k: saved[d][k].read(t) for k in _GRU_SAVED}, by_t[d])
            new_ds.append(ds_prev + ds_kept if masks is not None else ds_prev)
            new_grads.append({"dgx": grads[d]["dgx"].write(t, dgx), "dgh": grads[d]["dgh"].write(t, dgh)})
        return j + 1, new_ds, new_grads

    d_finals = [upstream[2 * d + 1] for d in range(n_dir)]
    _, d_h0, grads = tf.while_loop(lambda j, *_: j < t_max, step_back, (tf.constant(0), d_finals, grads),
                                   maximum_iterations=t_max)
    return d_h0, grads


def _gru_forward(gx, s, recurrent_kernel, recurrent_bias):
    """One GRU step (`rnn.gru_parts`) from `gx (B, 3u)`, the input's share of the gates, and the
    state `s (B, u)`. Returns the new state and what `_gru_backward` reads (`_GRU_SAVED`)."""
    parts = rnn.gru_parts(gx, s, {"recurrent_kernel": recurrent_kernel, "recurrent_bias": recurrent_bias})
    return parts["h"], {k: parts[k] for k in _GRU_SAVED}


def _gru_backward(ds, step, by_recurrent_t):
    """A GRU step's backward pass, given `ds (B, u)`, the gradient reaching its new state, and
    `by_recurrent_t`, the product by the recurrent kernel's transpose (`_by_transpose`).

    Returns `(dgx, dgh, ds_prev)`: the gradients of the input's and the state's shares of the gates
    `(B, 3u)`, and the state's share of the gradient reaching the previous state `(B, u)`.
    """
    s, z, r, n, gh_n = (step[k] for k in _GRU_SAVED)
    dn = tf.raw_ops.TanhGrad(y=n, dy=ds * (1.0 - z))
    dz = tf.raw_ops.SigmoidGrad(y=z, dy=ds * (s - n))
    dr = tf.raw_ops.SigmoidGrad(y=r, dy=dn * gh_n)
    dgh = tf.concat([dz, dr, dn * r], axis=-1)
    ds_prev = z * ds + by_recurrent_t(dgh)
    return tf.concat([dz, dr, dn], axis=-1), dgh, ds_prev


_GRU_SAVED = ("s", "z", "r", "n", "gh_n")


def _by_transpose(kernel):
    """`x -> x kernel^T`, for a backward loop's every step, the kernel's layout chosen once before it.

    oneDNN's float32 product of a batch's rows by a kernel read transposed (`transpose_b=True`) runs
    several times slower than by the same kernel stored transposed, so a float32 kernel is transposed
    once; in bfloat16 the transposed read is as fast, and the copy would cost more than it saves
    (`docs/performance.md`, "Fast-tier techniques")."""
    if kernel.dtype == tf.float32:
        kernel_t = tf.transpose(kernel)
        return lambda x: tf.matmul(x, kernel_t)
    return lambda x: tf.matmul(x, kernel, transpose_b=True)


def output_layers(x, keep, weights, hidden):
    """The decoder's output layers over all target steps in training, with the backward pass ordered.

        out    = tanh(x Wh + bh) if hidden else x          # the Bahdanau tanh layer; Luong: x is h~
        logits = (out * keep) Wl + bl                      # keep: dropout's mask, scaled, or 1

    The values are those of the layers; so are the gradients. The order is the point: the
    gradient of `x` leads to the decoder's backward loop, a serial chain of small ops, and the
    weights' gradients lead nowhere but the optimizer. Autodiff leaves the order to the executor,
    which may start the vocabulary projection's large weight-gradient products first and keep the
    loop waiting. Here they wait for `dx`, then run beside the loop, on a core it leaves idle.

    Args:
        x: `(batch, t_out, n)`. keep: `(batch, t_out, units)`, or a scalar 1.
        weights: dict with `logits_kernel (units, vocab)`, `logits_bias (vocab,)` and, if `hidden`,
            `hidden_kernel (n, units)`, `hidden_bias (units,)`.
        hidden: bool, whether the `tanh` layer is part of it.

    Returns:
        logits `(batch, t_out, vocab)`.
    """
    names = ("logits_kernel", "logits_bias") + (("hidden_kernel", "hidden_bias") if hidden else ())
    return _output_layers(hidden, x, keep, *(weights[k] for k in names))


def _output_layers(hidden, x, keep, logits_kernel, logits_bias, *hidden_weights):
    @tf.custom_gradient
    def layers(x, keep, logits_kernel, logits_bias, *hidden_weights):
        rows = lambda t: tf.reshape(t, [-1, tf.shape(t)[-1]]) if t.shape.rank else t  # noqa: E731  (N, ...)
        x_rows, keep_rows = rows(x), rows(keep)
        out = tf.tanh(tf.nn.bias_add(tf.matmul(x_rows, hidden_weights[0]), hidden_weights[1])) if hidden else x_rows
        kept = out * keep_rows  # (N, units)
        logits = tf.nn.bias_add(tf.matmul(kept, logits_kernel), logits_bias)  # (N, vocab)

        def backward(d_logits):
            d_logits = tf.reshape(d_logits, tf.shape(logits))  # (N, vocab)
            d = tf.matmul(d_logits, logits_kernel, transpose_b=True) * keep_rows  # d out (N, units)
            if hidden:
                d_pre = tf.raw_ops.TanhGrad(y=out, dy=d)
                d = tf.matmul(d_pre, hidden_weights[0], transpose_b=True)  # (N, n)
            with tf.control_dependencies([d]):  # the weights' gradients after dx
                grads = [tf.matmul(kept, d_logits, transpose_a=True), tf.reduce_sum(d_logits, axis=0)]
                if hidden:
                    grads += [tf.matmul(x_rows, d_pre, transpose_a=True), tf.reduce_sum(d_pre, axis=0)]
            return [tf.reshape(d, tf.shape(x)), None] + grads

        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], tf.shape(logits_kernel)[1:]], axis=0)), backward

    return layers(x, keep, logits_kernel, logits_bias, *hidden_weights)
