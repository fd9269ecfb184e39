"""`jit_compile`: the train step compiled by XLA gives the updates of the step without it, on both
tiers; `DataConfig.pad_to_multiple` keeps the batch shapes XLA compiles for few."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.data.pipeline import DataConfig, make_dataset
from tfattn.data.text import Tokenizer
from tfattn.training.step import make_optimizer, make_train_step
from tfattn.training.trainer import TrainConfig

# Two batches of different lengths: source ids, target ids ([START]=2 ... [END]=3, padding 0).
BATCHES = [
    (np.array([[4, 5, 6, 0], [7, 8, 9, 10]], "int32"), np.array([[2, 5, 6, 3, 0], [2, 7, 8, 9, 3]], "int32")),
    (np.array([[4, 4, 0], [9, 10, 11]], "int32"), np.array([[2, 11, 3], [2, 6, 3]], "int32")),
]


def losses_and_weights(attention, accel, jit_compile, steps=3):
    keras.utils.set_random_seed(0)
    model = tfattn.make_model(tfattn.ModelConfig(attention=attention, embedding_dim=8, units=8), 12, 12)
    step = make_train_step(model, make_optimizer(TrainConfig(learning_rate=0.01), accel), accel=accel,
                           jit_compile=jit_compile)
    losses = [float(step(*BATCHES[i % 2])["loss"]) for i in range(steps)]
    return losses, [w.numpy() for w in model.weights], step.experimental_get_tracing_count()


@pytest.mark.parametrize("accel", [True, pytest.param(False, marks=pytest.mark.long)], ids=["fast", "reference"])
def test_the_compiled_step_makes_the_updates_of_the_plain_one(accel):
    plain_losses, plain_weights, _ = losses_and_weights("bahdanau", accel, jit_compile=False)
    xla_losses, xla_weights, traces = losses_and_weights("bahdanau", accel, jit_compile=True)
    assert traces == 2  # traced (and compiled) once per batch shape: the third batch has the first's
    assert plain_losses[0] == pytest.approx(np.log(12), abs=0.05)  # near-uniform logits over 12 ids at start
    assert plain_losses[2] < plain_losses[0]  # the updates do something
    np.testing.assert_allclose(xla_losses, plain_losses, rtol=1e-4)
    for xla, plain in zip(xla_weights, plain_weights):
        np.testing.assert_allclose(xla, plain, rtol=1e-3, atol=1e-5)


PAIRS = [("ab", "x"), ("abcdefghij", "xyzxyzxyzx"), ("abc", "xy"), ("abcdefghijklmnopq", "xy")]


def batch_shapes(multiple, max_length=40):
    source = Tokenizer.adapt([s for s, _ in PAIRS], level="char", max_length=max_length)
    target = Tokenizer.adapt([t for _, t in PAIRS], level="char", max_length=max_length)
    config = DataConfig(batch_size=2, pad_to_multiple=multiple)
    return [(s.numpy(), t.numpy()) for s, t in make_dataset(PAIRS, source, target, config, shuffle=False)]


def test_batches_are_padded_to_a_multiple_with_zeros_and_nothing_else_changes():
    plain, padded = batch_shapes(1), batch_shapes(8)
    # Characters plus [START] and [END]: sources of 12 and 19 ids, targets of 12 and 4.
    assert [(s.shape[1], t.shape[1]) for s, t in plain] == [(12, 12), (19, 4)]
    assert [(s.shape[1], t.shape[1]) for s, t in padded] == [(16, 16), (24, 8)]
    for (s, t), (ps, pt) in zip(plain, padded):
        np.testing.assert_array_equal(ps[:, : s.shape[1]], s)
        np.testing.assert_array_equal(pt[:, : t.shape[1]], t)
        assert not ps[:, s.shape[1]:].any() and not pt[:, t.shape[1]:].any()


def test_padding_to_a_multiple_stops_at_the_tokenizers_max_length():
    padded = batch_shapes(8, max_length=21)  # 19 ids round up to 24, over the limit of 21
    assert [(s.shape[1], t.shape[1]) for s, t in padded] == [(16, 16), (21, 8)]


@pytest.mark.parametrize("value", [0, -8, 2.5, True])
def test_pad_to_multiple_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match="pad_to_multiple must be a positive int"):
        DataConfig(pad_to_multiple=value)


def test_xla_does_not_combine_with_a_strategy():
    from tfattn.training.trainer import Trainer

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = tfattn.make_model(tfattn.ModelConfig(attention="luong", embedding_dim=8, units=8), 12, 12)
    with pytest.raises(ValueError, match=r"jit_compile \(--jit-compile\) trains on one device"):
        Trainer(model, TrainConfig(jit_compile=True), quiet=True, strategy=strategy)
