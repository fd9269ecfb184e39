"""NumPy oracles for the attention layers, written from the papers' equations (no TensorFlow, so
that the layer tests can import them under any Keras backend).

Bahdanau, Cho, Bengio 2014 (arXiv 1409.0473), Appendix A.1.2 and eq. 5-6; Luong, Pham, Manning 2015
(arXiv 1508.04025), eq. 7-9.
"""

import operator

import numpy as np


def set_weights(layer, weights):
    """Assigns `weights` (attribute path -> array), checking each shape and that none is left out."""
    for path, value in weights.items():
        variable = operator.attrgetter(path)(layer)
        assert tuple(variable.shape) == value.shape, path
        variable.assign(value)
    assert len(layer.weights) == len(weights)


def np_scores(variant, weights, query, key):
    """Scores `(batch, t_q, t_in)` in float64; -inf where a position has no score."""
    q, k = query.astype("float64"), key.astype("float64")
    w = {name: np.asarray(value, "float64") for name, value in weights.items()}
    if variant.startswith("bahdanau"):
        # Bahdanau A.1.2: e = v^T tanh(W1 q + W2 k); weight-normalized: v -> g v / ||v||, and + b in the tanh.
        v, b = w["v"], w.get("b", 0.0)
        if "g" in w:
            v = w["g"] * v / np.linalg.norm(v)
        hidden = (q @ w["query_dense.kernel"])[:, :, None, :] + (k @ w["key_dense.kernel"])[:, None, :, :] + b
        scores = np.tanh(hidden) @ v  # (batch, t_q, t_in)
    elif variant == "dot":  # Luong eq. 8: q^T k
        scores = np.einsum("bqd,bkd->bqk", q, k)
    elif variant == "general":  # Luong eq. 8: q^T W k, with W stored as w (dk, dq)
        scores = np.einsum("bqd,bke,ed->bqk", q, k, w["w"])
    elif variant == "concat":  # Luong eq. 8: v^T tanh(W [q; k]), W split into its q and k rows
        scores = np.tanh((q @ w["w_query"])[:, :, None, :] + (k @ w["w_key"])[:, None, :, :]) @ w["v"]
    else:  # Luong eq. 9: a_t = softmax(W_a h_t), one score per position up to max_length
        by_position = q @ w["w"]  # (batch, t_q, max_length)
        t_in, length = k.shape[1], by_position.shape[-1]
        scores = np.full(q.shape[:2] + (t_in,), -np.inf)
        scores[..., : min(t_in, length)] = by_position[..., :t_in]
    return scores * w.get("gain", 1.0)


def np_attention(scores, value, mask=None):
    """Bahdanau eq. 6 / Luong eq. 7 over the real positions (exp(-inf) = 0), then the weighted sum of
    the values (Bahdanau eq. 5): context `(batch, t_q, dv)`, weights `(batch, t_q, t_in)`."""
    if mask is not None:
        scores = np.where(mask[:, None, :], scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ value.astype("float64"), weights


# -- the attention zoo: cosine score, local attention, hard attention ---------------------------------
# Luong, Pham, Manning 2015 (arXiv 1508.04025), section 3.2 and eq. 9-10 (local-m, local-p); the cosine
# of Graves et al. 2014 (arXiv 1410.5401, eq. 6); Xu et al. 2015 (arXiv 1502.03044), section 4.1 (hard).


def np_cosine_scores(gain, query, key):
    """`gain * q . k / (|q| |k|)` `(batch, t_q, t_in)` in float64; a zero vector has cosine 0 with anything."""
    def unit(x):
        x = x.astype("float64")
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
        return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)
    return float(gain) * np.einsum("bqd,bkd->bqk", unit(query), unit(key))


def np_source_lengths(mask, batch, t_in):
    """S, the number of real source positions of each sentence `(batch,)`."""
    return np.full(batch, float(t_in)) if mask is None else mask.sum(-1).astype("float64")


def np_aligned_positions(local, query, lengths, positions=None, w_p=None, v_p=None):
    """p_t `(batch, t_q)` (section 3.2). local-m: p_t = t, the target step (not clipped: the paper's
    window simply leaves the sentence); local-p (eq. 9): p_t = S sigmoid(v_p^T tanh(W_p h_t))."""
    batch, t_q = query.shape[:2]
    if local == "m":
        return np.broadcast_to(np.arange(t_q) if positions is None else positions, (batch, t_q)).astype("float64")
    aligned = np.tanh(query.astype("float64") @ w_p) @ v_p  # (batch, t_q)
    return lengths[:, None] / (1.0 + np.exp(-aligned))


def np_window(p, length, window, rounded=False):
    """The source positions local attention may use (section 3.2): the real positions `s` (0 <= s < S,
    S = `length`) of the window `[p_t - D, p_t + D]` around a real `p_t`; empty once the window has
    left the sentence. `rounded=True` centres it on `p_t` rounded half up instead (a departure that
    `tfattn.layers.local` states)."""
    centre = np.floor(p + 0.5) if rounded else p
    return [s for s in range(int(length)) if abs(s - centre) <= window]


def np_local_attention(scores, value, mask, local, window, p, departures=False):
    """Local attention, one (sentence, query) at a time: the softmax over the positions of `np_window`,
    zero elsewhere; local-p multiplies by exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2 (eq. 10), with
    the real p_t. A query whose window holds no real position gets zero weights. Returns context
    `(batch, t_q, dv)` and weights `(batch, t_q, t_in)` in float64.

    The paper's rule by default. `departures=True` applies instead the two departures that
    `tfattn.layers.local` states, written here from that statement: local-m's `p_t = t` is clipped to
    `S - 1`, and every window is centred on `p_t` rounded half up; a test then compares the layer with
    the paper plus exactly the departures its documentation names."""
    batch, t_q, t_in = scores.shape
    lengths = np.full(batch, t_in) if mask is None else mask.sum(-1)
    weights = np.zeros((batch, t_q, t_in))
    for b in range(batch):
        for q in range(t_q):
            centre = min(p[b, q], lengths[b] - 1.0) if local == "m" and departures else p[b, q]
            inside = np_window(centre, lengths[b], window, rounded=departures)
            if not inside:
                continue
            e = np.exp(scores[b, q, inside] - scores[b, q, inside].max())
            weights[b, q, inside] = e / e.sum()
            if local == "p":
                sigma = window / 2.0
                weights[b, q, inside] *= np.exp(-((np.array(inside) - p[b, q]) ** 2) / (2 * sigma**2))
    return weights @ value.astype("float64"), weights


def np_hard(weights):
    """Hard attention at inference: one-hot of each row's argmax `(batch, t_q, t_in)`; an all-zero row stays zero."""
    one_hot = np.zeros_like(weights)
    rows = weights.max(-1) > 0
    idx = np.argmax(weights, axis=-1)
    b, q = np.nonzero(rows)
    one_hot[b, q, idx[b, q]] = 1.0
    return one_hot
