"""The attention layers' `call` for the fast tier, on the layers' own weights.

`ScoredAttention.call` runs at every decoder step, where a step's graph is a chain of small ops and
their count is what costs on a CPU. What it replaces, and why:
- The `Dense` layers and einsums of the scores and key projections: one 2-D matmul each (`project`),
  and a multiply-sum where the einsum would be a batched product with one query row.
- The fused softmax: written out (max, exp, sum, divide), cheaper over a few dozen scores.
- The weighted sum of one query step: a multiply-sum rather than a batched matmul of one row.

`BahdanauAttention` and `LuongAttention` take this path (`score_kind` says when: their own scores,
read through their public weights, global soft attention, and no dropout on the weights); any other
attention layer (the cosine score, local windows, hard attention, a subclass that overrides the
score) runs its own `call`. A test checks outputs and gradients against the layers' `call`.
"""

import tensorflow as tf

from tfattn.layers.attention import BahdanauAttention, LuongAttention, ScoredAttention, large_negative


def prepare_memory(decoder, encoder_outputs, mask):
    """`decoder.prepare_memory(encoder_outputs, mask)`: values, keys projected once, and the mask."""
    mask = None if mask is None else tf.cast(mask, tf.bool)
    return {"values": encoder_outputs, "keys": prepare_keys(decoder.attention_layer, encoder_outputs), "mask": mask}


# What this module writes out: Luong's scores but the cosine, global soft attention.
_FAST_SCORES = ("dot", "general", "concat", "location")


def score_kind(layer):
    """`"additive"` for a `BahdanauAttention`, `"luong"` for a `LuongAttention` with one of
    `_FAST_SCORES`, each with the class' own `call`, `prepare_keys`, `compute_scores` and
    `attention_range`, global (no `local`), soft (not `probability="hard"`) and no dropout on its
    weights; else None, and the layer runs its own call."""
    methods = ("prepare_keys", "compute_scores", "attention_range", "one_position")
    for cls, kind in ((BahdanauAttention, "additive"), (LuongAttention, "luong")):
        own = all(getattr(type(layer), name) is getattr(cls, name) for name in methods)
        plain = layer.probability == "soft" and not layer.dropout and type(layer).call is ScoredAttention.call
        if kind == "luong" and isinstance(layer, cls):
            plain = plain and layer.score in _FAST_SCORES and layer.local is None
        if isinstance(layer, cls) and own and plain:
            return kind
    return None


def prepare_keys(layer, key):
    """`layer.prepare_keys(key)`: `key (batch, t_in, dk)` projected once per sentence."""
    kind = score_kind(layer)
    if kind == "additive":
        keys = project(key, layer.key_kernel)  # (batch, t_in, units): W2 k
        return keys + tf.cast(layer.b, keys.dtype) if layer.normalize else keys
    if kind == "luong" and layer.score in ("general", "concat"):
        return project(key, layer.w if layer.score == "general" else layer.w_key)  # (batch, t_in, ...)
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
        extra = dict(query_positions=positions) if layer.uses_positions else {}
        return layer(query, values, value_mask=mask, prepared_keys=keys, training=False, **extra)
    # 2. Masked softmax; 3. the weighted sum of the values.
    if mask is not None:
        mask = tf.expand_dims(tf.cast(mask, tf.bool), 1)  # (batch, 1, t_in)
    weights = masked_softmax(scores, mask)  # (batch, t_q, t_in)
    values = tf.cast(values, weights.dtype)
    if query.shape[1] == 1:  # one decoder step
        context = tf.reduce_sum(tf.expand_dims(weights, -1) * tf.expand_dims(values, 1), axis=2)  # (batch, 1, dv)
    else:
        context = tf.matmul(weights, values)  # (batch, t_q, dv)
    return context, weights


def masked_softmax(scores, mask=None):
    """Softmax over the last axis of `scores`, exactly 0 where the bool `mask` (the rank of `scores`,
    broadcast against it) is False; a row with every position masked gets all zeros, as
    `ScoredAttention` gives."""
    if mask is not None:
        scores = tf.where(mask, scores, tf.constant(large_negative(scores.dtype), scores.dtype))
    # The shift only keeps exp() finite: it needs no gradient.
    shift = tf.stop_gradient(tf.reduce_max(scores, axis=-1, keepdims=True))
    exp = tf.exp(scores - shift)
    weights = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
    return weights if mask is None else tf.where(mask, weights, tf.zeros_like(weights))


def project(x, kernel):
    """`x (batch, t, d) @ kernel (d, n) -> (batch, t, n)` as one 2-D matmul (no reshape for `t = 1`)."""
    kernel = tf.cast(kernel, x.dtype)
    if x.shape[1] == 1:
        return tf.expand_dims(tf.matmul(tf.squeeze(x, 1), kernel), 1)  # (batch, 1, n)
    y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)  # (batch * t, n)
    return tf.reshape(y, tf.concat([tf.shape(x)[:2], tf.shape(kernel)[1:]], axis=0))  # (batch, t, n)


def _scores(layer, query, keys):
    """`layer.compute_scores(query, keys)` -> `(batch, t_q, t_in)`, or None when `score_kind` is None."""
    kind = score_kind(layer)
    if kind == "additive":
        return _additive(project(query, layer.query_kernel), keys, layer.scoring_vector())
    if kind is None:
        return None
    if layer.score == "location":
        return layer.compute_scores(query, keys)
    if layer.score == "concat":
        scores = _additive(project(query, layer.w_query), keys, layer.v)
    elif query.shape[1] == 1:  # dot or general, one decoder step
        scores = tf.expand_dims(tf.reduce_sum(query * keys, axis=-1), 1)  # (batch, 1, t_in)
    else:
        scores = tf.matmul(query, keys, transpose_b=True)  # (batch, t_q, t_in)
    return scores * tf.cast(layer.gain, scores.dtype) if layer.scale else scores


def _additive(q, keys, v):
    """`v^T tanh(q + k)` for every (query step, key): `q (batch, t_q, a)`, `keys (batch, t_in, a)`."""
    hidden = tf.tanh(tf.expand_dims(q, 2) + tf.expand_dims(keys, 1))  # (batch, t_q, t_in, a)
    return tf.reduce_sum(hidden * tf.cast(v, hidden.dtype), axis=-1)  # (batch, t_q, t_in)
