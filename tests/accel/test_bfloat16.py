"""The fast tier under `mixed_bfloat16` equals the reference tier under the same policy, within
bfloat16's rounding: logits, loss and gradients, a few training steps, and decoding.

bfloat16 keeps 8 significant bits (a relative step of 2^-8 = 0.4%), and the two tiers add and
multiply in different orders, so each figure is compared with a tolerance of that order rather than
float32's (`LOGITS`, `LOSS`, `GRADIENT`), well below what a real slip (a weight or a term dropped)
makes: tens of percent. The weights are float32 in both (Keras'
mixed policy), the loss is float32, and FusedAdam updates the float32 variables.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import seq2seq as fast
from tfattn.model import ModelConfig, make_model
from tfattn.search import beam_search, greedy
from tfattn.training.precision import precision_scope
from tfattn.training.step import forward_and_loss, make_optimizer, make_train_step
from tfattn.training.trainer import TrainConfig

SOURCE_VOCAB, TARGET_VOCAB = 11, 13
SOURCE = np.array([[2, 5, 6, 3, 0, 0], [2, 7, 8, 9, 10, 3]], np.int32)
TARGET = np.array([[2, 4, 9, 3, 0], [2, 12, 5, 7, 3]], np.int32)
KINDS = {
    "bahdanau-gru": dict(attention="bahdanau"),  # the written-out loop and its backward pass
    "bahdanau-lstm": dict(attention="bahdanau", rnn="lstm"),
    "luong-feed-gru": dict(attention="luong"),
    "luong-nofeed-gru": dict(attention="luong", input_feeding=False),  # loops.gru
    "luong-tied": dict(attention="luong", tie_embeddings=True, embedding_dim=6),
}
# The tolerances, relative; the differences found between the tiers on an AVX-512 CPU (oneDNN) are in
# brackets, and are of the size of bfloat16's own rounding (the same model computed in float32
# differs from either by as much or more).
LOGITS = 0.02  # the largest difference over the largest logit (0.008)
LOSS = 0.002  # (0.0008)
GRADIENT = 0.1  # each weight's gradient: the norm of the difference over the norm (0.057)
ALL_GRADIENTS = 0.05  # every gradient as one vector (0.03)


def model_of(kind, seed=0, precision="mixed_bfloat16"):
    keras.utils.set_random_seed(seed)
    with precision_scope(precision):
        model = make_model(ModelConfig(**{"embedding_dim": 4, "units": 6, **KINDS[kind]}), SOURCE_VOCAB,
                           TARGET_VOCAB)
    model((SOURCE, TARGET[:, :-1]))
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(variable.dtype))
    return model


def loss_and_gradients(model, accel):
    with tf.GradientTape() as tape:
        logits, loss = forward_and_loss(model, tf.constant(SOURCE), tf.constant(TARGET), True, accel)
    assert logits.dtype == tf.bfloat16 and loss.dtype == tf.float32  # computed in bfloat16, the loss in float32
    gradients = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]
    return tf.cast(logits, tf.float32).numpy(), float(loss), gradients


def relative(got, want, norm=False):
    if norm:
        return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-6)
    return np.abs(got - want).max() / max(np.abs(want).max(), 1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_logits_loss_and_gradients_equal_the_reference_in_bfloat16(kind):
    model = model_of(kind)
    assert model.decoder.compute_dtype == "bfloat16" and fast.choose(True, model, "mixed_bfloat16")
    ref, got = loss_and_gradients(model, False), loss_and_gradients(model, True)
    assert relative(got[0], ref[0]) <= LOGITS
    assert got[1] == pytest.approx(ref[1], rel=LOSS)
    for variable, g, r in zip(model.trainable_variables, got[2], ref[2]):
        assert g.dtype == np.float32, variable.path  # gradients of the float32 weights
        assert relative(g, r, norm=True) <= GRADIENT, (variable.path, relative(g, r, norm=True))
    flat = lambda grads: np.concatenate([g.ravel() for g in grads])  # noqa: E731
    assert relative(flat(got[2]), flat(ref[2]), norm=True) <= ALL_GRADIENTS


@pytest.mark.parametrize("kind", ["bahdanau-gru", "luong-nofeed-gru"])
def test_a_few_training_steps_give_the_same_losses_in_bfloat16(kind):
    config = TrainConfig(learning_rate=1e-2, precision="mixed_bfloat16")
    losses, weights = {}, {}
    for accel in (False, True):
        model = model_of(kind, seed=3)
        step = make_train_step(model, make_optimizer(config, accel), accel=accel)
        losses[accel] = [float(step(SOURCE, TARGET)["loss"]) for _ in range(8)]
        weights[accel] = [v.numpy() for v in model.trainable_variables]
        assert all(w.dtype == np.float32 for w in weights[accel])  # FusedAdam keeps float32 variables
    np.testing.assert_allclose(losses[True], losses[False], rtol=10 * LOSS)  # (0.4% after 8 updates)
    assert losses[True][-1] < 0.8 * losses[True][0]  # it trained
    for got, want in zip(weights[True], weights[False]):
        assert relative(got, want) <= LOGITS


@pytest.mark.parametrize("kind", ["bahdanau-gru", "luong-feed-gru", "luong-tied"])
def test_decoding_in_bfloat16_gives_the_reference_outputs(kind):
    """Greedy ids and the best beam's ids equal, attention within bfloat16's rounding. The logits'
    kernel is scaled up so that the best token leads the next by far more than bfloat16's rounding
    (with random weights two tokens can tie within it, and either tier may then pick either); the
    beam's lower hypotheses, whose scores can still tie, are not compared."""
    model = model_of(kind, seed=1)
    kernel = model.decoder.embedding.embeddings if model.decoder.tie_embeddings else model.decoder.logits_dense.kernel
    kernel.assign(kernel * 8.0)
    for name, decode in (("greedy", greedy), ("beam", lambda m, s, accel: beam_search(m, s, 3, accel=accel))):
        reference, got = decode(model, SOURCE, accel=False), decode(model, SOURCE, accel=True)
        best = (lambda x: x[:, 0]) if name == "beam" else (lambda x: x)  # noqa: E731
        np.testing.assert_array_equal(best(got["ids"]), best(reference["ids"]), err_msg=name)
        np.testing.assert_array_equal(best(got["length"]), best(reference["length"]), err_msg=name)
        attention = [tf.cast(best(out["attention"]), tf.float32).numpy() for out in (got, reference)]
        assert relative(*attention) <= LOGITS, name
