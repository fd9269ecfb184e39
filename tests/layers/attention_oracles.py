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
