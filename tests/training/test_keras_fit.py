"""`Seq2Seq.train_step` / `test_step`: Keras' `fit`, `evaluate` and callbacks run tfattn's own step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.accel.optimizer import FusedAdam
from tfattn.training.trainer import TrainConfig, Trainer, evaluate_loss

STEPS = 20


def dates_batches(dates_data, n=STEPS * 8):
    """`n` dates pairs in a fixed order (no shuffling), batches of 8."""
    train, _, source, target = dates_data
    config = tfattn.DataConfig(batch_size=8, bucket=False)
    return tfattn.make_dataset(train[:n], source, target, config, shuffle=False)


def new_model(dates_data):
    _, _, source, target = dates_data
    keras.utils.set_random_seed(0)  # both models start from the same weights
    return tfattn.make_model(tfattn.ModelConfig(embedding_dim=8, units=16), source.vocab_size, target.vocab_size)


@pytest.mark.parametrize("accel", [False, True])
def test_fit_trains_the_same_losses_as_tfattns_loop(dates_data, accel):
    data = dates_batches(dates_data)
    with tfattn.tier.accel_scope(accel):
        loop_losses = []
        trainer = Trainer(new_model(dates_data), TrainConfig(learning_rate=1e-2, epochs=1), quiet=True)
        trainer.fit(data, on_step=lambda t, logs: loop_losses.append(float(logs["step_loss"])))

        model = new_model(dates_data)
        model.compile(optimizer=(FusedAdam if accel else keras.optimizers.Adam)(learning_rate=1e-2))
        history = model.fit(data.repeat(), epochs=STEPS, steps_per_epoch=1, verbose=0)  # one step an epoch
    assert len(loop_losses) == STEPS and loop_losses[-1] < loop_losses[0]
    np.testing.assert_allclose(history.history["loss"], loop_losses, rtol=1e-5)
    for a, b in zip(model.variables, trainer.model.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_evaluate_reports_the_token_weighted_mean_of_tfattns_eval_step(dates_data):
    data = dates_batches(dates_data, n=50)  # 7 batches, the last one of 2 pairs: the weights matter
    model = new_model(dates_data)
    model.compile(optimizer="adam")
    got = model.evaluate(data, verbose=0, return_dict=True)
    want = evaluate_loss(tfattn.training.step.make_eval_step(model), data)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert got["accuracy"] == pytest.approx(want["accuracy"], rel=1e-5)
    assert got["loss"] == pytest.approx(np.log(model.decoder.vocab_size), rel=0.2)  # untrained: about ln(vocab)


@pytest.mark.long  # minutes of runs: make test-long
def test_keras_callbacks_run_on_the_model(dates_data, tmp_path):
    data = dates_batches(dates_data, n=32)
    model = new_model(dates_data)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=10.0)  # never improves by 10
    best = keras.callbacks.ModelCheckpoint(str(tmp_path / "best.weights.h5"), monitor="val_loss",
                                           save_best_only=True, save_weights_only=True)
    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    history = model.fit(data, validation_data=data, epochs=5, verbose=0, callbacks=[stop, best, board])
    assert len(history.history["loss"]) == 2  # the first epoch sets the mark, the second misses it: stop
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert (tmp_path / "best.weights.h5").exists() and list((tmp_path / "tb").rglob("events.out.tfevents.*"))


def test_fit_skips_a_batch_whose_loss_is_not_finite(dates_data, monkeypatch):
    """A batch poisoned to a NaN loss leaves the weights as they were and counts nowhere."""
    from tfattn.training import step

    poisoned = tf.Variable(True)
    real = step.forward_and_loss

    def forward_and_loss(*args, **kwargs):
        logits, loss = real(*args, **kwargs)
        return logits, tf.where(poisoned, tf.constant(np.nan, tf.float32), loss)

    monkeypatch.setattr(step, "forward_and_loss", forward_and_loss)
    model = new_model(dates_data)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(dates_batches(dates_data, n=16), epochs=1, verbose=0)
    for a, b in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(a.numpy(), b)
    assert history.history["loss"] == [0.0]  # no batch counted: the mean of nothing
    assert int(model.optimizer.iterations) == 0
