"""The attention layers' `call` for the fast tier, on the layers' own weights.

`ScoredAttention.call` runs at every decoder step, where a step's graph is a chain of small ops and
their count is what costs on a CPU. What it replaces, and why:
- The `Dense` layers and einsums of the scores and key projections: one 2-D matmul each (`project`),
  and a multiply-sum where the einsum would be a batched product with one query row.
- The weighted sum of one query step: a multiply-sum rather than a batched matmul of one row.

`BahdanauAttention` and `LuongAttention` take this path (`adapter.attention_kind` says when: their
own scores, global soft attention, and no dropout on the weights); any other attention layer (the
cosine score, local windows, hard attention, a subclass that overrides the score) runs its own
`call`. A test checks outputs and gradients against the layers' `call`.
"""

import tensorflow as tf

from tfattn.accel import adapter
from tfattn.layers.attention import masked_softmax


def prepare_memory(layer, encoder_outputs, mask):
    """`Decoder.prepare_memory(encoder_outputs, mask)` for a decoder whose attention layer is `layer`:
    values, keys projected once, and the mask."""
    mask = None if mask is None else tf.cast(mask, tf.bool)
    return {"values": encoder_outputs, "keys": prepare_keys(layer, encoder_outputs), "mask": mask}


def prepare_keys(layer, key):
    """`layer.prepare_keys(key)`: `key (batch, t_in, dk)` projected once per sentence."""
    kind = adapter.attention_kind(layer)
    if kind == "additive":
        weights = adapter.additive_weights(layer)
        keys = project(key, weights["key_kernel"])  # (batch, t_in, units): W2 k
        bias = weights["key_bias"]
        return keys if bias is None else keys + tf.cast(bias, keys.dtype)
    if kind == "luong":
        weights = adapter.luong_weights(layer)
        if weights["score"] in ("general", "concat"):
            kernel = weights["w"] if weights["score"] == "general" else weights["w_key"]
            return project(key, kernel)  # (batch, t_in, dq) or (batch, t_in, units)
    return layer.prepare_keys(key)


def attend(layer, query, memory, positions=None):
    """`layer(query, values, value_mask=..., prepared_keys=...)` on a `memory` from `prepare_memory`;
    `positions`, the queries' target steps, go to a layer that reads them (`uses_positions`).

    Returns context `(batch, t_q, dv)` and weights `(batch, t_q, t_in)`, as the layer does (at
    inference: a hard attention layer takes its argmax here; training runs the reference decoder).
    """
    values, keys, mask = memory["values"], memory["keys"], memory["mask"]
    # 1. Scores; a layer this module does not know runs its own call.
    scores = _scores(layer, query, keys)  # (batch, t_q, t_in)
    if scores is None:
        extra = dict(query_positions=positions) if adapter.uses_positions(layer) else {}
        return layer(query, values, value_mask=mask, prepared_keys=keys, training=False, **extra)
    # 2. Masked softmax (the layers' own); 3. the weighted sum of the values.
    weights = masked_softmax(scores, mask)  # (batch, t_q, t_in)
    values = tf.cast(values, weights.dtype)
    if query.shape[1] == 1:  # one decoder step
        context = tf.reduce_sum(tf.expand_dims(weights, -1) * tf.expand_dims(values, 1), axis=2)  # (batch, 1, dv)
    else:
        context = tf.matmul(weights, values)  # (batch, t_q, dv)
    return context, weights


def project(x, kernel):
    """`x (batch, t, d) @ kernel (d, n) -> (batch, t, n)` as one 2-D matmul (no reshape for `t = 1`)."""
    kernel = tf.cast(kernel, x.dtype)
    if x.shape[1] == 1:
        return tf.expand_dims(tf.matmul(tf.squeeze(x, 1), kernel), 1)  # (batch, 1, n)
    y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)  # (batch * t, n)
    return tf.reshape(y, tf.concat([tf.shape(x)[:2], tf.shape(kernel)[1:]], axis=0))  # (batch, t, n)


def _scores(layer, query, keys):
    """`layer.compute_scores(query, keys)` -> `(batch, t_q, t_in)`, or None when `attention_kind` is None."""
    kind = adapter.attention_kind(layer)
    if kind == "additive":
        weights = adapter.additive_weights(layer)
        return _additive(project(query, weights["query_kernel"]), keys, weights["v"])
    if kind is None:
        return None
    weights = adapter.luong_weights(layer)
    if weights["score"] == "location":
        return layer.compute_scores(query, keys)
    if weights["score"] == "concat":
        scores = _additive(project(query, weights["w_query"]), keys, weights["v"])
    elif query.shape[1] == 1:  # dot or general, one decoder step
        scores = tf.expand_dims(tf.reduce_sum(query * keys, axis=-1), 1)  # (batch, 1, t_in)
    else:
        scores = tf.matmul(query, keys, transpose_b=True)  # (batch, t_q, t_in)
    gain = weights["gain"]
    return scores if gain is None else scores * tf.cast(gain, scores.dtype)


def _additive(q, keys, v):
    """`v^T tanh(q + k)` for every (query step, key): `q (batch, t_q, a)`, `keys (batch, t_in, a)`."""
    hidden = tf.tanh(tf.expand_dims(q, 2) + tf.expand_dims(keys, 1))  # (batch, t_q, t_in, a)
    return tf.reduce_sum(hidden * tf.cast(v, hidden.dtype), axis=-1)  # (batch, t_q, t_in)
