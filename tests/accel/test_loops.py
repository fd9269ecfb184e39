"""Tests for tfattn.accel.loops: the written-out loops' outputs and gradients against the reference tier.

The oracles are independent of the code under test: the reference `Decoder`'s teacher-forced call
and Keras' own `GRU` layer, both differentiated by TensorFlow, finite differences in float64, and
steps worked out by hand. Nothing in `tfattn.accel` computes an expected value.

Sizes differ on purpose so that a transposed or swapped weight cannot pass: batch 3, t_in 4,
t_out 5, decoder units 6, attention units 5, encoder outputs (dv) 7.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import decoder as fast_decoder
from tfattn.accel import loops
from tfattn.accel import seq2seq as fast
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.decoder import Decoder

BATCH, T_IN, T_OUT, UNITS, ATT_UNITS, DV, VOCAB = 3, 4, 5, 6, 5, 7, 11
# Sentence 0 has two padding positions, sentence 1 one, sentence 2 none.
MASK = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], bool)


def make_decoder(style="bahdanau", layer=None, **kwargs):
    """A `Decoder` with the new keywords (`attention="bahdanau"|"luong"`, `attention_layer=`), or
    the old ones (`style=`, `attention=<layer>`) where the new ones are not known yet."""
    try:
        return Decoder(VOCAB, 4, UNITS, attention=style, attention_layer=layer, **kwargs)
    except (TypeError, ValueError):  # old signature: an unknown keyword, or a str where a layer goes
        return Decoder(VOCAB, 4, UNITS, attention=layer, style=style, **kwargs)


def attention_layer(decoder):
    return getattr(decoder, "attention_layer", None) or decoder.attention


def decoder_and_inputs(normalize, dtype="float32"):
    rng = np.random.default_rng(0)
    decoder = make_decoder("bahdanau", BahdanauAttention(ATT_UNITS, normalize=normalize, dtype=dtype), dtype=dtype)
    target_in = rng.integers(1, VOCAB, size=(BATCH, T_OUT))
    encoder_outputs = tf.constant(rng.normal(size=(BATCH, T_IN, DV)), dtype)
    h0 = tf.constant(rng.normal(size=(BATCH, UNITS)), dtype)
    decoder(target_in, encoder_outputs, {"h": h0}, MASK)
    for layer in (decoder.rnn_layer.cell, decoder.hidden_dense, decoder.logits_dense):  # non-zero biases
        layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.5)
    if normalize:  # move g and b off their initial values, so that both matter
        attention_layer(decoder).g.assign(0.7)
        attention_layer(decoder).b.assign(rng.normal(size=ATT_UNITS))
    return decoder, target_in, encoder_outputs, h0


def reference_tier(decoder, target_in, encoder_outputs, h0):
    """The oracle: the reference `Decoder`'s teacher-forced call (its Keras cell and layers),
    which TensorFlow differentiates."""
    return decoder(target_in, encoder_outputs, {"h": h0}, MASK, training=True)


def fast_tier(decoder, target_in, encoder_outputs, h0):
    """The fast tier in training: `loops.bahdanau_gru`, then `loops.output_layers`."""
    return fast_decoder.teacher_forced(decoder, target_in, encoder_outputs, {"h": h0}, MASK, training=True)


def loops_inputs(decoder, target_in, weights):
    from tfattn.accel import rnn

    return rnn.project_inputs(weights, decoder.embedding(target_in))


def written_out_loop(decoder, target_in, encoder_outputs, h0):
    memory = decoder.prepare_memory(encoder_outputs, MASK)
    weights = fast_decoder.decoding_weights(decoder)
    gates_x = loops_inputs(decoder, target_in, weights)
    return fast_decoder._bahdanau_loop(decoder, gates_x, {"h": h0}, memory, weights)


def outputs_and_gradients(fn, decoder, target_in, encoder_outputs, h0):
    rng = np.random.default_rng(1)  # a non-uniform upstream gradient on both outputs
    up_logits = tf.constant(rng.normal(size=(BATCH, T_OUT, VOCAB)), encoder_outputs.dtype)
    up_att = tf.constant(rng.normal(size=(BATCH, T_OUT, T_IN)), encoder_outputs.dtype)
    with tf.GradientTape() as tape:
        tape.watch([encoder_outputs, h0])
        logits, attention = fn(decoder, target_in, encoder_outputs, h0)
        loss = tf.reduce_sum(logits * up_logits) + tf.reduce_sum(attention * up_att)
    sources = [encoder_outputs, h0] + decoder.trainable_variables
    return (logits, attention), tape.gradient(loss, sources), ["encoder_outputs", "h0"] + [
        v.path for v in decoder.trainable_variables]


@pytest.mark.parametrize("normalize", [False, True])
def test_outputs_and_gradients_equal_the_reference_tier(normalize, monkeypatch):
    decoder, *inputs = decoder_and_inputs(normalize)
    ref_outputs, ref_grads, names = outputs_and_gradients(reference_tier, decoder, *inputs)
    calls, real_loop = [], loops.bahdanau_gru  # the fast tier must run the written-out loop here
    monkeypatch.setattr(loops, "bahdanau_gru", lambda *args: calls.append(1) or real_loop(*args))
    outputs, grads, _ = outputs_and_gradients(fast_tier, decoder, *inputs)
    assert calls == [1]
    for a, b in zip(outputs, ref_outputs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for name, g, ref in zip(names, grads, ref_grads):
        assert g is not None and ref is not None, name
        np.testing.assert_allclose(tf.convert_to_tensor(g), tf.convert_to_tensor(ref), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    # encoder outputs, h0, embeddings, GRU kernel, recurrent kernel, bias, W1, W2, v (+ g, b), the
    # tanh layer's kernel and bias, the vocabulary projection's kernel and bias
    assert len(names) == 13 + 2 * normalize


def test_gradient_equals_finite_differences_in_float64():
    rng = np.random.default_rng(2)
    units, att, dv, t_in, t_out = 3, 2, 4, 3, 3
    mask = tf.constant([[True, True, False], [True, True, True]])
    shapes = dict(gates_x=(2, t_out, 3 * units), h0=(2, units), keys=(2, t_in, att), values=(2, t_in, dv),
                  w1=(units, att), v=(att,), kernel_rest=(dv, 3 * units), recurrent_kernel=(units, 3 * units),
                  recurrent_bias=(3 * units,))
    xs = [tf.constant(rng.normal(size=s) * 0.5) for s in shapes.values()]
    up = [tf.constant(rng.normal(size=s)) for s in ((2, t_out, units), (2, t_out, dv), (2, t_out, t_in))]

    def f(*xs):
        outs = loops.bahdanau_gru(*xs[:4], mask, dict(zip(list(shapes)[4:], xs[4:])))
        return sum(tf.reduce_sum(o * u) for o, u in zip(outs, up))

    theoretical, numerical = tf.test.compute_gradient(tf.function(f), xs, delta=1e-6)  # a graph: ~10x faster
    for name, t, n in zip(shapes, theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-7, err_msg=name)


def test_one_step_by_hand():
    # One source position (so alpha = 1 and c = V), zero weights and gates_x: z = r = sigmoid(0) = 1/2,
    # n = tanh(0) = 0, s_1 = s_0 / 2. For the loss sum(s_1): ds_0 = z = 1/2; d gates_x = [dz, dr, dn]
    # with dz = z(1-z)(s_0 - n) = s_0 / 4, dr = 0 (gh_n = 0), dn = (1 - z)(1 - n^2) = 1/2.
    s0 = tf.constant([[2.0, -4.0]])
    zeros = lambda *shape: tf.zeros(shape)  # noqa: E731
    weights = dict(w1=zeros(2, 3), v=zeros(3), kernel_rest=zeros(5, 6), recurrent_kernel=zeros(2, 6),
                   recurrent_bias=zeros(6))
    gates_x, values = zeros(1, 1, 6), tf.constant([[[1.0, 2.0, 3.0, 4.0, 5.0]]])
    with tf.GradientTape() as tape:
        tape.watch([gates_x, s0])
        states, contexts, attention = loops.bahdanau_gru(gates_x, s0, zeros(1, 1, 3), values,
                                                         tf.constant([[True]]), weights)
        loss = tf.reduce_sum(states)
    np.testing.assert_allclose(states, [[[1.0, -2.0]]])
    np.testing.assert_allclose(contexts, values)
    np.testing.assert_allclose(attention, [[[1.0]]])
    d_gates_x, d_s0 = tape.gradient(loss, [gates_x, s0])
    np.testing.assert_allclose(d_s0, [[0.5, 0.5]])
    np.testing.assert_allclose(d_gates_x, [[[0.5, -1.0, 0, 0, 0.5, 0.5]]])


def test_masked_positions_get_no_gradient():
    decoder, target_in, encoder_outputs, h0 = decoder_and_inputs(False)
    with tf.GradientTape() as tape:
        tape.watch(encoder_outputs)
        out, attention = written_out_loop(decoder, target_in, encoder_outputs, h0)
        loss = tf.reduce_sum(out ** 2)
    grad = tape.gradient(loss, encoder_outputs).numpy()
    assert (attention.numpy()[~np.broadcast_to(MASK[:, None], attention.shape)] == 0).all()
    assert (grad[~MASK] == 0).all() and (np.abs(grad[MASK]).min(axis=-1) > 0).all()


class DoubledScores(BahdanauAttention):
    """Bahdanau scores times 2: a score the written-out loop does not compute. (`compute_scores` is
    the score's public name, `_scores` its former one.)"""

    def compute_scores(self, query, keys):
        base = getattr(super(), "compute_scores", None) or super()._scores
        return 2.0 * base(query, keys)

    _scores = compute_scores


@pytest.mark.parametrize("rnn, attention, expected", [
    ("gru", lambda: BahdanauAttention(6), True),
    ("gru", lambda: BahdanauAttention(6, normalize=True), True),
    ("lstm", lambda: BahdanauAttention(6), False),  # the written-out loop is a GRU's
    ("gru", lambda: DoubledScores(6), False),  # a subclass with a score of its own
])
def test_decoder_uses_the_loop_only_where_it_applies(rnn, attention, expected):
    decoder = make_decoder("bahdanau", attention(), rnn=rnn)
    assert fast_decoder._has_written_out_loop(decoder) is expected
    assert not fast_decoder._has_written_out_loop(make_decoder("luong"))


def test_float16_loop_runs_and_matches_float32():
    keras.utils.set_random_seed(0)
    decoder32, *inputs32 = decoder_and_inputs(False)
    keras.utils.set_random_seed(0)
    decoder16, target_in, encoder_outputs, h0 = decoder_and_inputs(False, dtype="float16")
    decoder16.set_weights(decoder32.get_weights())
    out16, att16 = written_out_loop(decoder16, target_in, encoder_outputs, h0)
    out32, att32 = written_out_loop(decoder32, *inputs32)
    assert out16.dtype == "float16"
    np.testing.assert_allclose(np.asarray(out16, "float32"), out32, atol=1e-2)
    np.testing.assert_allclose(np.asarray(att16, "float32"), att32, atol=1e-2)


# -- the GRU loop -----------------------------------------------------------------------------------


def gru_directions(dtype="float64", seed=3):
    """Two directions of different sizes (3 and 4 units) over t = 4, the second reversed."""
    rng = np.random.default_rng(seed)
    directions = []
    for units, reverse in ((3, False), (4, True)):
        weights = {"recurrent_kernel": tf.constant(rng.normal(size=(units, 3 * units)) * 0.5, dtype),
                   "recurrent_bias": tf.constant(rng.normal(size=3 * units), dtype)}
        gates_x = tf.constant(rng.normal(size=(BATCH, T_IN, 3 * units)), dtype)
        h0 = tf.constant(rng.normal(size=(BATCH, units)), dtype)
        directions.append((gates_x, h0, weights, reverse))
    return directions


def gru_loss(results, seed=4):
    """A non-uniform weighting of every output `(batch, t_in, units)` and final state `(batch, units)`
    of the two directions of `gru_directions` (sizes given, not read: a `tf.function` may not know them)."""
    rng = np.random.default_rng(seed)
    return sum(tf.reduce_sum(outputs * rng.normal(size=(BATCH, T_IN, units)))
               + tf.reduce_sum(state * rng.normal(size=(BATCH, units)))
               for (outputs, state), units in zip(results, (3, 4)))


# Padding between tokens too (sentence 1): a padding step keeps the state, as Keras' masking does.
GRU_MASK = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1]], bool)


def keras_gru(gates_x, h0, weights, reverse, mask):
    """The oracle for one direction: Keras' own `GRU` layer (reset_after, gates z, r, h) with the
    loop's recurrent weights, reading `gates_x` through an identity kernel and a zero input bias,
    so that its input share of the gates is `gates_x`. Padding as Keras masks it: the state is
    kept and the output is zero. Returns `(outputs (batch, t, units) in position order, final
    state, the layer)`."""
    units = h0.shape[-1]
    layer = keras.layers.GRU(units, return_sequences=True, return_state=True, go_backwards=reverse,
                             zero_output_for_mask=True, dtype="float64")
    layer.build((None, None, 3 * units))
    layer.cell.kernel.assign(np.eye(3 * units))
    layer.cell.recurrent_kernel.assign(weights["recurrent_kernel"])
    layer.cell.bias.assign(np.stack([np.zeros(3 * units), weights["recurrent_bias"]]))  # input, recurrent
    outputs, state = layer(gates_x, initial_state=[h0], mask=None if mask is None else tf.constant(mask))
    return (tf.reverse(outputs, [1]) if reverse else outputs), state, layer  # go_backwards: last position first


@pytest.mark.parametrize("mask", [GRU_MASK, None])
def test_gru_outputs_and_gradients_equal_the_keras_layer(mask):
    directions = gru_directions()
    constants = [x for g, h0, w, _ in directions for x in (g, h0, w["recurrent_kernel"], w["recurrent_bias"])]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(constants)
        ref = [keras_gru(g, h0, w, reverse, mask) for g, h0, w, reverse in directions]
        got = loops.gru(directions, None if mask is None else tf.constant(mask))
        ref_loss, loss = gru_loss([(o, s) for o, s, _ in ref]), gru_loss(got)
    for (o1, s1), (o2, s2, _) in zip(got, ref):
        np.testing.assert_allclose(o1, o2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(s1, s2, rtol=1e-12, atol=1e-12)
    # The Keras layers' sources: the same gates_x and h0, and their own recurrent kernel and bias.
    ref_sources = [x for (g, h0, _, _), (_, _, layer) in zip(directions, ref)
                   for x in (g, h0, layer.cell.recurrent_kernel, layer.cell.bias)]
    ref_grads = tape.gradient(ref_loss, ref_sources)
    ref_grads[3::4] = [np.asarray(b)[1] for b in ref_grads[3::4]]  # the recurrent bias' row
    for i, (g, r) in enumerate(zip(tape.gradient(loss, constants), ref_grads)):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12, err_msg=f"direction {i // 4}, source {i % 4}")


def test_gru_gradient_equals_finite_differences():
    directions = gru_directions(seed=5)
    mask = tf.constant(GRU_MASK)
    xs = [x for g, h0, w, _ in directions for x in (g, h0, w["recurrent_kernel"], w["recurrent_bias"])]

    def f(*xs):
        dirs = [(xs[4 * d], xs[4 * d + 1], {"recurrent_kernel": xs[4 * d + 2], "recurrent_bias": xs[4 * d + 3]},
                 directions[d][3]) for d in range(2)]
        return gru_loss(loops.gru(dirs, mask))

    theoretical, numerical = tf.test.compute_gradient(tf.function(f), xs, delta=1e-6)  # a graph: ~10x faster
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-7)


def test_gru_padding_step_by_hand():
    # Zero weights and gates: z = 1/2, n = 0, so a real step halves the state. Sentence 0 is
    # [real, padding]: s_1 = s_0 / 2, then s_2 = s_1 (kept), outputs [s_0 / 2, 0]. For the loss
    # sum(final state) the gradient reaching s_0 is 1/2 (z), through a padding step unchanged.
    # Sentence 1 is [real, real]: final s_0 / 4, gradient 1/4.
    s0 = tf.constant([[4.0], [8.0]])
    weights = {"recurrent_kernel": tf.zeros((1, 3)), "recurrent_bias": tf.zeros(3)}
    gates_x = tf.zeros((2, 2, 3))
    with tf.GradientTape() as tape:
        tape.watch(s0)
        [(outputs, final)] = loops.gru([(gates_x, s0, weights, False)], tf.constant([[True, False], [True, True]]))
        loss = tf.reduce_sum(final)
    np.testing.assert_allclose(outputs[..., 0], [[2.0, 0.0], [4.0, 2.0]])
    np.testing.assert_allclose(final, [[2.0], [2.0]])
    np.testing.assert_allclose(tape.gradient(loss, s0), [[0.5], [0.25]])


# -- where the loops run ----------------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    dict(attention="bahdanau"),
    dict(attention="bahdanau", normalize=True),
    dict(attention="luong", input_feeding=False),
    dict(attention="luong", input_feeding=True),  # only the encoder's loop applies
])
def test_a_model_trains_with_the_reference_tiers_gradients(config):
    """In training, the fast tier (`fast.forward(training=True)`: the written-out loops and
    gradients where they apply) gives the loss and every weight's gradient of the reference tier
    (`model(..., training=True)`: Keras layers, differentiated by TensorFlow). No dropout here."""
    import tfattn
    from tfattn.model import masked_loss

    model = tfattn.make_model(tfattn.ModelConfig(embedding_dim=4, units=6, **config), 9, 10)
    rng = np.random.default_rng(6)
    source = np.array([[3, 4, 5, 0], [2, 6, 7, 8], [5, 0, 0, 0]])
    target = rng.integers(1, 10, size=(3, 6))
    target[0, 4:] = 0
    model((source, target[:, :-1]))  # builds
    results = []
    for forward in (lambda: fast.forward(model, source, target[:, :-1], training=True),
                    lambda: model((source, target[:, :-1]), training=True)):
        with tf.GradientTape() as tape:
            logits, attention = forward()
            loss = masked_loss(target[:, 1:], logits)
        results.append((loss, attention, tape.gradient(loss, model.trainable_variables)))
    (loss, attention, grads), (ref_loss, ref_attention, ref_grads) = results
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(attention, ref_attention, atol=1e-6)
    for variable, g, ref in zip(model.trainable_variables, grads, ref_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(g), tf.convert_to_tensor(ref), rtol=1e-5, atol=1e-6,
                                   err_msg=variable.path)


@pytest.mark.parametrize("hidden", [True, False])
@pytest.mark.parametrize("masked", [True, False])
def test_output_layers_values_and_gradients_equal_autodiff(hidden, masked):
    """`loops.output_layers` against the plain layers, differentiated by TensorFlow, with a dropout
    mask of zeros and 2s (rate 0.5) or the scalar 1 (no dropout)."""
    rng = np.random.default_rng(7)
    n = 9 if hidden else UNITS  # the tanh layer's input; without it, x is already `units` wide
    x = tf.constant(rng.normal(size=(BATCH, T_OUT, n)), tf.float32)
    mask = rng.integers(0, 2, size=(BATCH, T_OUT, UNITS))
    mask[0, 0] = 0  # one step with every feature dropped
    keep = tf.constant(2.0 * mask, tf.float32) if masked else tf.constant(1.0)
    weights = {"logits_kernel": rng.normal(size=(UNITS, VOCAB)), "logits_bias": rng.normal(size=VOCAB),
               "hidden_kernel": rng.normal(size=(n, UNITS)), "hidden_bias": rng.normal(size=UNITS)}
    weights = {k: tf.constant(v, tf.float32) for k, v in weights.items()}
    upstream = tf.constant(rng.normal(size=(BATCH, T_OUT, VOCAB)), tf.float32)

    def plain(x, w):
        out = tf.tanh(tf.einsum("btn,nu->btu", x, w["hidden_kernel"]) + w["hidden_bias"]) if hidden else x
        return tf.einsum("btu,uv->btv", out * keep, w["logits_kernel"]) + w["logits_bias"]

    results = []
    for fn in (lambda x, w: loops.output_layers(x, keep, w, hidden), plain):
        with tf.GradientTape() as tape:
            tape.watch([x, weights])
            logits = fn(x, weights)
            objective = tf.reduce_sum(logits * upstream)
        results.append((logits, tape.gradient(objective, [x, weights])))
    (logits, (dx, dw)), (ref_logits, (ref_dx, ref_dw)) = results
    assert logits.shape == (BATCH, T_OUT, VOCAB)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-5, atol=1e-5)
    for k in ("logits_kernel", "logits_bias") + (("hidden_kernel", "hidden_bias") if hidden else ()):
        np.testing.assert_allclose(dw[k], ref_dw[k], rtol=1e-5, atol=1e-5, err_msg=k)
    if masked:  # nothing of step (0, 0) reaches the logits, so no gradient reaches its input
        assert np.all(np.asarray(dx)[0, 0] == 0) and np.any(np.asarray(dx)[0, 1] != 0)


@pytest.fixture
def output_layers_calls(monkeypatch):
    """The arguments of every `loops.output_layers` call from here on, as dicts."""
    calls = []
    real = loops.output_layers

    def spy(x, keep, weights, hidden):
        calls.append({"keep": keep, "hidden": hidden})
        return real(x, keep, weights, hidden)

    monkeypatch.setattr(loops, "output_layers", spy)
    return calls


def decoder_inputs(seed):
    """`(target_in, encoder_outputs, state, mask)` for a decoder call on random values."""
    rng = np.random.default_rng(seed)
    target_in = rng.integers(1, VOCAB, size=(BATCH, T_OUT))
    encoder_outputs = tf.constant(rng.normal(size=(BATCH, T_IN, UNITS)), tf.float32)
    return target_in, encoder_outputs, {"h": tf.zeros([BATCH, UNITS])}, MASK


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_decoder_output_layers_get_dropouts_mask_in_training_only(style, output_layers_calls):
    inputs = decoder_inputs(3)
    for dropout in (0.5, 0.0):
        decoder = make_decoder(style, dropout=dropout)
        decoder(*inputs, training=True)  # builds; the reference tier never calls the loops
        fast_decoder.teacher_forced(decoder, *inputs)  # inference: the plain layers
        assert output_layers_calls == []
        fast_decoder.teacher_forced(decoder, *inputs, training=True)
        (call,) = output_layers_calls
        output_layers_calls.clear()
        assert call["hidden"] == (style == "bahdanau")
        keep = np.asarray(call["keep"])
        if dropout:  # each feature kept and scaled by 1 / (1 - 0.5), or dropped
            assert keep.shape == (BATCH, T_OUT, UNITS) and set(np.unique(keep)) == {0.0, 2.0}
        else:
            assert keep.shape == () and float(keep) == 1.0
