"""NumPy oracles for multi-head attention, positions and a Transformer block, written from the papers
(no TensorFlow, so that the tests can import them under any Keras backend).

Vaswani et al. 2017 (arXiv 1706.03762): eq. 1 and section 3.2.2 (multi-head), 3.3 (feed-forward),
3.5 (sinusoids); Shaw et al. 2018 (arXiv 1803.02155): eq. 3-6 (relative positions); Ba et al. 2016
(arXiv 1607.06450): layer normalization.
"""

import math

import numpy as np


def np_softmax_rows(scores, allowed):
    """Softmax over the last axis among the `allowed` entries; 0 elsewhere (and for empty rows)."""
    scores = np.where(allowed, scores, -np.inf)
    top = np.max(np.where(allowed, scores, -1e300), axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(scores - top), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def np_multihead(query, key, value, wq, wk, wv, wo, allowed=None, a_key=None, a_value=None):
    """Multi-head attention, one head at a time, in float64.

    query `(batch, t_q, dq)`, key `(batch, t_in, dk)`, value `(batch, t_in, dv)`; wq `(dq, heads,
    key_dim)`, wk `(dk, heads, key_dim)`, wv `(dv, heads, value_dim)`, wo `(heads, value_dim, out)`;
    allowed bool broadcastable to `(batch, t_q, t_in)`; Shaw's a_key `(t_q, t_in, key_dim)` and
    a_value `(t_q, t_in, value_dim)`. Returns context `(batch, t_q, out)` and weights `(batch, heads,
    t_q, t_in)`.
    """
    q, k, v = (np.asarray(x, "float64") for x in (query, key, value))
    batch, t_q, t_in, heads = q.shape[0], q.shape[1], k.shape[1], wq.shape[1]
    allowed = np.ones((batch, t_q, t_in), bool) if allowed is None else np.broadcast_to(allowed, (batch, t_q, t_in))
    weights = np.zeros((batch, heads, t_q, t_in))
    concat = []
    for h in range(heads):
        qh, kh, vh = q @ wq[:, h, :], k @ wk[:, h, :], v @ wv[:, h, :]  # Q W_i^Q, K W_i^K, V W_i^V
        head = np.zeros((batch, t_q, vh.shape[-1]))
        for b in range(batch):
            for i in range(t_q):
                # Shaw eq. 4: e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_z); Vaswani eq. 1 without a^K.
                keys = kh[b] + (0 if a_key is None else a_key[i])  # (t_in, key_dim)
                scores = keys @ qh[b, i] / math.sqrt(qh.shape[-1])
                weights[b, h, i] = np_softmax_rows(scores, allowed[b, i])
                # Shaw eq. 3: z_i = sum_j a_ij (v_j + a^V_ij).
                values = vh[b] + (0 if a_value is None else a_value[i])  # (t_in, value_dim)
                head[b, i] = weights[b, h, i] @ values
        concat.append(head)
    context = np.concatenate(concat, axis=-1) @ wo.reshape(-1, wo.shape[-1])  # Concat(head_1..h) W^O
    return context, weights


def np_sinusoid(pos, i, dim):
    """Vaswani section 3.5: PE(pos, 2j) = sin(pos / 10000^(2j/dim)), PE(pos, 2j+1) = cos(same angle)."""
    angle = pos / 10000 ** (2 * (i // 2) / dim)
    return math.sin(angle) if i % 2 == 0 else math.cos(angle)


def np_sinusoids(positions, dim):
    """The table at `positions (t,)`: `(t, dim)`."""
    return np.array([[np_sinusoid(p, i, dim) for i in range(dim)] for p in positions])


def np_relative(table, clip, query_positions, key_positions):
    """Shaw eq. 5-6: `a_ij = w[clip(j - i, -k, k)]`, with `w` stored as `table (2k + 1, size)`, row
    `d + k` for distance `d`: `(t_q, t_in, size)`."""
    return np.array([[table[max(-clip, min(clip, j - i)) + clip] for j in key_positions] for i in query_positions])


def np_layer_norm(x, gamma, beta, epsilon=1e-6):
    """Ba et al. 2016: normalize each vector over its features, then scale and shift."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def np_feed_forward(x, w1, b1, w2, b2):
    """Vaswani eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2."""
    return np.maximum(0, x @ w1 + b1) @ w2 + b2
