"""Hard attention: one source position per query instead of a weighted average (Xu et al. 2015).

    training:   position ~ weights          (a draw: the Gumbel-max trick)
    inference:  position = argmax(weights)
    returned:   one_hot(position)           (exactly 0 or 1; padding never chosen)
    gradient:   through the soft weights    (straight-through: biased, see below)

The Gumbel-max trick: `argmax(log w + g)`, with `g = -log(-log u)` Gumbel noise and `u` uniform in
(0, 1), is a draw from `w / sum(w)`; `log 0 = -inf`, so a position of weight 0 (padding, outside a
local window) is never drawn.

Straight-through: the forward pass uses the one-hot weights, the backward pass the gradient of the
soft weights (`one_hot + w - stop_gradient(w)`, exactly `one_hot` in value). Xu et al. train hard
attention with REINFORCE and a baseline instead, which needs a reward (the sentence's
log-likelihood), a running baseline and an entropy term in the loss: a different train step.
Straight-through keeps the one train step and loss of every other model, and its gradient reaches
the scores directly (not through one scalar reward per sentence), so it varies far less from draw to
draw; its price is a bias. What holds: the gradient is `J^T dL/dc`, with `J` the soft weights'
Jacobian and `dL/dc` the loss's gradient at the context of the draw (one value, `c_hard`). The soft
model's gradient is `J^T dL/dc` at its own context `c_soft`. The two are equal only for a loss linear
in the context (`dL/dc` the same everywhere); for any other loss, such as the decoder's
cross-entropy after its nonlinear layers, they differ (`tests/layers/test_attention_zoo.py` shows both
cases, the second with `sum(tanh(c)^2)`).

Reference: Xu et al. 2015, "Show, Attend and Tell", arXiv 1502.03044, section 4.1; Jang, Gu, Poole
2017, "Categorical Reparameterization with Gumbel-Softmax", arXiv 1611.01144, section 2 (Gumbel-max)
and 2.2 (straight-through).
"""

import keras
from keras import ops


def one_position(weights, training, seed_generator):
    """`weights (batch, t_q, t_in)` -> one-hot `(batch, t_q, t_in)`: a draw from `weights` in training
    (seeded by the Keras `seed_generator`), the argmax otherwise; the gradient is that of `weights`.
    A row of all zeros (every position masked) stays all zeros."""
    w = ops.cast(weights, "float32")  # (batch, t_q, t_in)
    if training:
        u = keras.random.uniform(ops.shape(w), minval=1e-20, maxval=1.0, seed=seed_generator)
        w = ops.log(w) - ops.log(-ops.log(u))  # (batch, t_q, t_in): log w + Gumbel noise
    chosen = ops.argmax(w, axis=-1)  # (batch, t_q)
    one_hot = ops.one_hot(chosen, ops.shape(weights)[-1], dtype=weights.dtype)  # (batch, t_q, t_in)
    one_hot = ops.where(weights > 0, one_hot, ops.zeros_like(one_hot))  # an all-masked row chooses nothing
    return one_hot + (weights - ops.stop_gradient(weights))  # straight-through: exactly one_hot in value
