"""Tests for tfattn.layers.decoder whose oracle is the papers: one decoder step written in NumPy.

Every expected value here comes from the equations of Bahdanau, Cho, Bengio (2014, arXiv 1409.0473)
and Luong, Pham, Manning (2015, arXiv 1508.04025), and from the GRU/LSTM equations in Keras' layout,
computed in float64 NumPy on the weights read from the decoder's variables. No function of `tfattn`
computes an expected value. The decoder's `step` and its teacher-forced `call` must both agree with
the NumPy step at every target position, within float32 rounding.

Sizes differ on purpose so that a transposed or swapped weight cannot pass: batch 3, t_in 5,
t_out 4, vocab 11, embeddings 4, units 6, encoder outputs (dv) 7 (6 for the dot score, which needs
dv = units), Bahdanau attention units 5, Luong concat units 5.
"""

import keras
import numpy as np
import pytest

from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder

BATCH, T_IN, T_OUT, VOCAB, EMB, UNITS, ATT_UNITS = 3, 5, 4, 11, 4, 6, 5
# Source sentence 0 has two padding positions, sentence 1 none, sentence 2 three.
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
# Shifted targets; sentence 2 ends in target padding (id 0), which the decoder reads like any id.
TARGET_IN = np.array([[1, 4, 9, 3], [1, 10, 2, 7], [1, 5, 0, 0]])
RTOL = ATOL = 1e-5

# (style, score or Bahdanau variant, input_feeding, rnn)
CASES = [("bahdanau", variant, True, rnn) for variant in ("plain", "normalized") for rnn in ("gru", "lstm")] + [
    ("luong", score, feeding, rnn)
    for score in ("general", "concat", "dot") for feeding in (True, False) for rnn in ("gru", "lstm")
]


def case_id(case):
    style, score, feeding, rnn = case
    return f"{style}-{score}-{rnn}" + ("" if style == "bahdanau" else "-feed" if feeding else "-nofeed")


# -- the decoder under test ---------------------------------------------------------------------------


def make_decoder(style, layer, input_feeding, rnn):
    """A `Decoder` with the new keywords (`attention="bahdanau"|"luong"`, `attention_layer=`), or
    the old ones (`style=`, `attention=<layer>`) where the new ones are not known yet."""
    try:
        return Decoder(VOCAB, EMB, UNITS, attention=style, attention_layer=layer, input_feeding=input_feeding,
                       rnn=rnn)
    except (TypeError, ValueError):  # old signature: an unknown keyword, or a str where a layer goes
        return Decoder(VOCAB, EMB, UNITS, attention=layer, style=style, input_feeding=input_feeding, rnn=rnn)


def attention_layer(decoder):
    return getattr(decoder, "attention_layer", None) or decoder.attention


def setup(case):
    """A built decoder with every weight random (biases too), and its inputs, all float32.

    Returns `(decoder, encoder_outputs (batch, t_in, dv), encoder_state)`.
    """
    style, score, feeding, rnn = case
    if style == "bahdanau":
        layer = BahdanauAttention(ATT_UNITS, normalize=score == "normalized")
    else:
        layer = LuongAttention(score, units=ATT_UNITS if score == "concat" else None)
    dv = UNITS if score == "dot" else 7
    keras.utils.set_random_seed(0)
    decoder = make_decoder(style, layer, feeding, rnn)
    rng = np.random.default_rng(1)
    encoder_outputs = rng.normal(size=(BATCH, T_IN, dv)).astype("float32")  # padding rows non-zero too
    state = {"h": rng.normal(size=(BATCH, UNITS)).astype("float32")}
    if rnn == "lstm":
        state["c"] = rng.normal(size=(BATCH, UNITS)).astype("float32")
    decoder(TARGET_IN, encoder_outputs, state, MASK)  # builds
    for variable in decoder.weights:  # off their initial values (zero biases, g = sqrt(1/units), ...)
        variable.assign(rng.normal(0.0, 0.4, variable.shape))
    return decoder, encoder_outputs, state


def numpy_weights(decoder, case):
    """The decoder's variables as float64 arrays, named as in the papers."""
    style, score, _, rnn = case
    f64 = lambda x: np.asarray(x, "float64")  # noqa: E731
    cell, att = decoder.rnn_layer.cell, attention_layer(decoder)
    w = {"E": f64(decoder.embedding.embeddings),  # (vocab, emb)
         "kernel": f64(cell.kernel), "recurrent_kernel": f64(cell.recurrent_kernel), "bias": f64(cell.bias),
         "W": f64(decoder.hidden_dense.kernel),  # Bahdanau's output layer W; Luong's W_c
         "W_o": f64(decoder.logits_dense.kernel), "b_o": f64(decoder.logits_dense.bias)}  # Luong's W_s, b
    if style == "bahdanau":
        w["b"] = f64(decoder.hidden_dense.bias)
        w["W_a"], w["U_a"], w["v_a"] = f64(att.query_dense.kernel), f64(att.key_dense.kernel), f64(att.v)
        if score == "normalized":
            w["g"], w["b_a"] = f64(att.g), f64(att.b)
    elif score == "general":
        w["W_a"] = f64(att.w).T  # the layer stores W_a as (dk, dq); the paper's W_a is (dq, dk)
    elif score == "concat":
        w["W_a"] = np.concatenate([f64(att.w_query), f64(att.w_key)], axis=0)  # rows for [h_t; h_s]
        w["v_a"] = f64(att.v)
    return w


# -- the papers' equations in NumPy -------------------------------------------------------------------


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru(x, h, w):
    """Keras' GRU with `reset_after=True` (the cuDNN form; the paper's eq. in A.2.1 applies r before
    U): kernel columns are the gates z, r, h; `bias` is (2, 3 units), the input bias then the
    recurrent one. Keras' z is the paper's 1 - z.

        z = sigmoid(W_z x + b_xz + U_z h + b_hz)
        r = sigmoid(W_r x + b_xr + U_r h + b_hr)
        h~ = tanh(W_h x + b_xh + r * (U_h h + b_hh))
        h' = z * h + (1 - z) * h~
    """
    W_z, W_r, W_h = np.split(w["kernel"], 3, axis=1)
    U_z, U_r, U_h = np.split(w["recurrent_kernel"], 3, axis=1)
    (b_xz, b_xr, b_xh), (b_hz, b_hr, b_hh) = (np.split(row, 3) for row in w["bias"])
    z = sigmoid(x @ W_z + b_xz + h @ U_z + b_hz)
    r = sigmoid(x @ W_r + b_xr + h @ U_r + b_hr)
    candidate = np.tanh(x @ W_h + b_xh + r * (h @ U_h + b_hh))
    return z * h + (1.0 - z) * candidate


def lstm(x, h, c, w):
    """Keras' LSTM: kernel columns are the gates i, f, c, o; one bias (4 units).

        i = sigmoid(W_i x + U_i h + b_i),  f = sigmoid(W_f x + U_f h + b_f),  o = sigmoid(W_o x + U_o h + b_o)
        c' = f * c + i * tanh(W_c x + U_c h + b_c),  h' = o * tanh(c')
    """
    W_i, W_f, W_c, W_o = np.split(w["kernel"], 4, axis=1)
    U_i, U_f, U_c, U_o = np.split(w["recurrent_kernel"], 4, axis=1)
    b_i, b_f, b_c, b_o = np.split(w["bias"], 4)
    i = sigmoid(x @ W_i + h @ U_i + b_i)
    f = sigmoid(x @ W_f + h @ U_f + b_f)
    o = sigmoid(x @ W_o + h @ U_o + b_o)
    c = f * c + i * np.tanh(x @ W_c + h @ U_c + b_c)
    return o * np.tanh(c), c


def rnn_step(rnn, x, state, w):
    """The recurrent function f of either paper, on the state dict: the new h and state."""
    if rnn == "gru":
        h = gru(x, state["h"], w)
        return h, {"h": h}
    h, c = lstm(x, state["h"], state["c"], w)
    return h, {"h": h, "c": c}


def masked_softmax(e, mask):
    """Bahdanau eq. 6 / Luong eq. 7, over the unmasked source positions only: a padding position
    gets exp(-inf) = 0, exactly."""
    e = np.where(mask, e, -np.inf)  # (batch, t_in)
    p = np.exp(e - e.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def bahdanau_step(y_prev, state, h_src, mask, w, rnn):
    """One step of Bahdanau et al. (2014): `y_prev (batch,)` ids, `h_src (batch, t_in, dv)` the
    annotations h_j. Returns `(logits (batch, vocab), alpha (batch, t_in), state)`."""
    s_prev = state["h"]  # s_{i-1}
    # Eq. 6 with Appendix A.1.2: e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j).
    hidden = (s_prev @ w["W_a"])[:, None, :] + h_src @ w["U_a"]  # (batch, t_in, att)
    v_a = w["v_a"]
    if "g" in w:  # weight normalization (Salimans and Kingma 2016, eq. 2): v = g v / ||v||, plus a bias
        hidden, v_a = hidden + w["b_a"], w["g"] * v_a / np.linalg.norm(v_a)
    e = np.tanh(hidden) @ v_a  # (batch, t_in)
    alpha = masked_softmax(e, mask)  # eq. 6: alpha_ij = exp(e_ij) / sum_k exp(e_ik)
    c = np.einsum("bj,bjd->bd", alpha, h_src)  # eq. 5: c_i = sum_j alpha_ij h_j
    Ey = w["E"][y_prev]  # (batch, emb): E y_{i-1}
    # Eq. 4 / A.2.2: s_i = f(s_{i-1}, y_{i-1}, c_i), f a GRU (or LSTM) on [E y_{i-1}; c_i].
    s, state = rnn_step(rnn, np.concatenate([Ey, c], axis=-1), state, w)
    # Output (A.2.2): the paper has t~_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i and a maxout t_i.
    # The package's stated simplification (Decoder docstring): t_i = tanh(W [s_i; c_i; E y_{i-1}] + b),
    # then logits = W_o t_i + b_o.
    t = np.tanh(np.concatenate([s, c, Ey], axis=-1) @ w["W"] + w["b"])  # (batch, units)
    return t @ w["W_o"] + w["b_o"], alpha, state


def luong_step(y_prev, state, h_src, mask, w, rnn, score, input_feeding):
    """One step of Luong et al. (2015): `h_src (batch, t_in, dv)` the source states h-bar_s.
    Returns `(logits (batch, vocab), a_t (batch, t_in), state)`."""
    Ey = w["E"][y_prev]  # (batch, emb): E y_{t-1}
    # Section 3.3, input feeding: the RNN reads [E y_{t-1}; h~_{t-1}] (h~_0 = 0); else E y_{t-1}.
    x = np.concatenate([Ey, state["feed"]], axis=-1) if input_feeding else Ey
    h, new_state = rnn_step(rnn, x, state, w)  # h_t
    # Eq. 8, the scores of h_t and each h-bar_s.
    if score == "dot":
        e = np.einsum("bd,bjd->bj", h, h_src)  # h_t^T h-bar_s
    elif score == "general":
        e = np.einsum("bd,de,bje->bj", h, w["W_a"], h_src)  # h_t^T W_a h-bar_s
    else:  # concat: v_a^T tanh(W_a [h_t; h-bar_s])
        pairs = np.concatenate([np.broadcast_to(h[:, None, :], (*h_src.shape[:2], h.shape[-1])), h_src], axis=-1)
        e = np.tanh(pairs @ w["W_a"]) @ w["v_a"]  # (batch, t_in)
    a = masked_softmax(e, mask)  # eq. 7: a_t(s) = softmax over s of score(h_t, h-bar_s)
    c = np.einsum("bj,bjd->bd", a, h_src)  # section 3: c_t = the a_t-weighted average of h-bar_s
    h_tilde = np.tanh(np.concatenate([c, h], axis=-1) @ w["W"])  # eq. 5: h~_t = tanh(W_c [c_t; h_t])
    if input_feeding:
        new_state["feed"] = h_tilde
    return h_tilde @ w["W_o"] + w["b_o"], a, new_state  # eq. 6: softmax(W_s h~_t), with a bias


def numpy_decode(case, w, encoder_outputs, encoder_state):
    """The NumPy step over TARGET_IN: per position, `(logits, weights, state)`."""
    style, score, feeding, rnn = case
    state = {k: np.asarray(v, "float64") for k, v in encoder_state.items()}
    if style == "luong" and feeding:
        state["feed"] = np.zeros((BATCH, UNITS))  # h~_0: nothing attended yet
    h_src = np.asarray(encoder_outputs, "float64")
    steps = []
    for t in range(T_OUT):
        if style == "bahdanau":
            logits, weights, state = bahdanau_step(TARGET_IN[:, t], state, h_src, MASK, w, rnn)
        else:
            logits, weights, state = luong_step(TARGET_IN[:, t], state, h_src, MASK, w, rnn, score, feeding)
        steps.append((logits, weights, dict(state)))
    return steps


# -- the tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_step_equals_the_papers_step(case):
    decoder, encoder_outputs, encoder_state = setup(case)
    expected = numpy_decode(case, numpy_weights(decoder, case), encoder_outputs, encoder_state)
    memory = decoder.prepare_memory(encoder_outputs, MASK)
    state = decoder.initial_state(encoder_state)
    for t, (want_logits, want_weights, want_state) in enumerate(expected):
        logits, weights, state = decoder.step(TARGET_IN[:, t], state, memory)
        np.testing.assert_allclose(weights, want_weights, rtol=RTOL, atol=ATOL, err_msg=f"weights, t={t}")
        np.testing.assert_allclose(logits, want_logits, rtol=RTOL, atol=ATOL, err_msg=f"logits, t={t}")
        assert set(state) == set(want_state), t
        for name in want_state:
            np.testing.assert_allclose(state[name], want_state[name], rtol=RTOL, atol=ATOL, err_msg=f"{name}, t={t}")
        assert np.all(np.asarray(weights)[~MASK] == 0.0), "padding must get exactly zero weight"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_teacher_forced_call_equals_the_papers_step(case):
    """Position t of `call` is the NumPy step t after the same prefix TARGET_IN[:, :t]."""
    decoder, encoder_outputs, encoder_state = setup(case)
    expected = numpy_decode(case, numpy_weights(decoder, case), encoder_outputs, encoder_state)
    logits, attention = decoder(TARGET_IN, encoder_outputs, encoder_state, MASK)
    logits, attention = np.asarray(logits), np.asarray(attention)
    assert logits.shape == (BATCH, T_OUT, VOCAB) and attention.shape == (BATCH, T_OUT, T_IN)
    for t, (want_logits, want_weights, _) in enumerate(expected):
        np.testing.assert_allclose(attention[:, t], want_weights, rtol=RTOL, atol=ATOL, err_msg=f"weights, t={t}")
        np.testing.assert_allclose(logits[:, t], want_logits, rtol=RTOL, atol=ATOL, err_msg=f"logits, t={t}")
    assert np.all(attention[np.broadcast_to(~MASK[:, None], attention.shape)] == 0.0)


def test_numpy_cells_equal_keras_cells():
    """The NumPy GRU and LSTM above read Keras' gate order right: checked against Keras' own cells."""
    rng = np.random.default_rng(2)
    x, h, c = (rng.normal(size=s) for s in [(3, 5), (3, 4), (3, 4)])
    for cell in (keras.layers.GRUCell(4), keras.layers.LSTMCell(4)):
        cell.build((None, 5))
        for variable in cell.weights:
            variable.assign(rng.normal(0.0, 0.5, variable.shape))
        w = {k: np.asarray(getattr(cell, k), "float64") for k in ("kernel", "recurrent_kernel", "bias")}
        if isinstance(cell, keras.layers.GRUCell):
            got, [want] = gru(x, h, w), cell(x.astype("float32"), [h.astype("float32")])[1]
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        else:
            got, want = lstm(x, h, c, w), cell(x.astype("float32"), [h.astype("float32"), c.astype("float32")])[1]
            np.testing.assert_allclose(got, np.stack(want), rtol=RTOL, atol=ATOL)
