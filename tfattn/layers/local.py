"""Luong's local attention (section 3.2): attend within a window `[p_t - D, p_t + D]` around an
aligned source position `p_t`, instead of to every source position (global attention).

`D` is the window's half width and `S` the source length without padding (the real positions of
`value_mask`, which are taken to come first):

- local-m (monotonic): `p_t = t`, the query's target step, clipped to `[0, S - 1]` (a departure, below).
- local-p (predictive): `p_t = S * sigmoid(v_p^T tanh(W_p h_t))` (eq. 9), and the softmax weights
  are multiplied by `exp(-(s - p_t)^2 / (2 sigma^2))`, `sigma = D / 2` (eq. 10); the product is not
  renormalized, as in the paper, so a row sums to less than 1.

The Gaussian uses the real `p_t`, which is how `W_p` and `v_p` get a gradient. Positions outside the
window and padding get exactly zero weight: `LuongAttention.attention_range` hands the window to the
base (`tfattn.layers.attention.ScoredAttention`), which masks before the softmax.

Two departures from the paper, on purpose (`docs/models.md`, "Where the code departs from the
papers"; `tests/layers/test_paper_departures.py` pins both against the paper's rule):

- The clip (local-m). The paper's window `[t - D, t + D]` is cut to the sentence, so it shrinks once
  `t > S - 1 - D` and is empty from `t = S + D` on: a target longer than its source would decode its
  last steps with a zero context. Here `p_t = t` is clipped to `S - 1`, and every step from `S - 1`
  on attends to the last `D + 1` words. With `S = 7, D = 2`: the paper gives `{5, 6}` at `t = 7` and
  nothing at `t = 9`; the layer `{4, 5, 6}` at both.
- The rounding (local-m and local-p alike). The window is centred on `p_t` rounded half up,
  `floor(p_t + 0.5)`, so that it spans the paper's fixed `2D + 1` positions (its `a_t` has `2D + 1`
  entries; fewer at the sentence's ends). For a real local-p `p_t`, the paper's `[p_t - D, p_t + D]`
  holds only `2D` whole positions, and the rounded window admits one more, up to `D + 0.5` from
  `p_t` (`p_t = 2.5, D = 1`: the paper `{2, 3}`, the layer `{2, 3, 4}`; that position's Gaussian
  factor is small, `exp(-4.5)` there). The centre can be `S`, one past the last word, when
  `p_t >= S - 0.5`; the window then holds the last `D` words, as the paper's does.
"""

from keras import ops


def source_lengths(query, value_mask, source_length):
    """`S`, the number of real source positions, float32 `(batch,)`: from `value_mask (batch, t_in)`,
    else `source_length` (an int, or int `(batch,)`)."""
    ones = ops.ones_like(query[:, 0, 0], dtype="float32")  # (batch,)
    if value_mask is not None:
        return ops.sum(ops.cast(value_mask, "float32"), axis=-1) * ones  # (batch,)
    if source_length is None:
        raise ValueError("predict_positions needs the source length: pass value_mask (batch, t_in) or "
                         "source_length. Received: value_mask=None, source_length=None")
    return ops.cast(source_length, "float32") * ones  # (batch,)


def target_steps(check, query, query_positions):
    """`query_positions` (int `(batch, t_q)` or `(t_q,)`) as float32 `(batch, t_q)`; `0, ..., t_q - 1`
    when None (teacher forcing over a whole target)."""
    if query_positions is None:
        query_positions = ops.arange(ops.shape(query)[1])  # (t_q,)
    elif len(query_positions.shape) == 1:
        check("query_positions", query_positions, ("t_q",))
    else:
        check("query_positions", query_positions, ("batch", "t_q"))
    positions = ops.cast(query_positions, "float32")
    if len(positions.shape) == 1:
        positions = positions[None, :]  # (1, t_q)
    return positions * ops.ones_like(query[:, :, 0], dtype="float32")  # (batch, t_q)


def monotonic(steps, lengths):
    """local-m's `p_t`: the target steps `(batch, t_q)` clipped to `[0, S - 1]`, `lengths (batch,)` = S."""
    last = ops.maximum(lengths - 1.0, 0.0)[:, None]  # (batch, 1)
    return ops.minimum(ops.maximum(steps, 0.0), last)  # (batch, t_q)


def predictive(query, w_p, v_p, lengths):
    """local-p's `p_t = S * sigmoid(v_p^T tanh(W_p h_t))` (eq. 9) for `query (batch, t_q, dq)`."""
    hidden = ops.tanh(ops.einsum("bqd,du->bqu", query, ops.cast(w_p, query.dtype)))  # (batch, t_q, units)
    aligned = ops.einsum("bqu,u->bq", hidden, ops.cast(v_p, hidden.dtype))  # (batch, t_q)
    return lengths[:, None] * ops.sigmoid(ops.cast(aligned, "float32"))  # (batch, t_q)


def window(centre, t_in, half_width, value_mask=None):
    """The positions within `D = half_width` of `centre (batch, t_q)` rounded half up, and real
    (`value_mask (batch, t_in)`): bool `(batch, t_q, t_in)`."""
    source = ops.arange(t_in, dtype="float32")[None, None, :]  # (1, 1, t_in)
    distance = source - ops.floor(centre + 0.5)[:, :, None]  # (batch, t_q, t_in), whole numbers
    allowed = ops.abs(distance) <= half_width  # (batch, t_q, t_in)
    if value_mask is not None:
        allowed = ops.logical_and(allowed, ops.expand_dims(value_mask, 1))  # (batch, t_q, t_in)
    return allowed


def gaussian(centre, t_in, half_width):
    """local-p's weights by position, `exp(-(s - p_t)^2 / (2 sigma^2))`, `sigma = D / 2` (eq. 10):
    `centre (batch, t_q)` -> float32 `(batch, t_q, t_in)`."""
    source = ops.arange(t_in, dtype="float32")[None, None, :]  # (1, 1, t_in)
    sigma = half_width / 2.0
    return ops.exp(-ops.square(source - centre[:, :, None]) / (2.0 * sigma**2))  # (batch, t_q, t_in)
