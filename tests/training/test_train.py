"""The teacher-forced train step and the loop around it."""

import io

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.training.step import make_train_step
from tfattn.training.trainer import Progress, TrainConfig, Trainer, fit, restore_weights


def tiny_model(attention="luong", vocab=12):
    return tfattn.make_model(tfattn.ModelConfig(attention=attention, embedding_dim=8, units=8), vocab, vocab)


def batch(rows):
    width = max(len(r) for r in rows)
    return tf.constant([r + [0] * (width - len(r)) for r in rows], tf.int32)


@pytest.mark.parametrize("accel", [True, False])
def test_step_does_not_retrace_for_new_lengths_or_batch_sizes(accel):
    model = tiny_model()
    step = make_train_step(model, keras.optimizers.Adam(1e-3), accel=accel)
    for b, t_in, t_out in [(2, 3, 4), (5, 7, 2), (1, 11, 9), (3, 2, 13)]:
        source = tf.ones([b, t_in], tf.int32) * 4
        target = tf.concat([tf.fill([b, 1], 2), tf.ones([b, t_out - 2], tf.int32) * 5, tf.fill([b, 1], 3)], 1)
        step(source, target)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("attention", ["luong", "bahdanau"])
def test_step_overfits_one_batch(attention):
    keras.utils.set_random_seed(0)
    model = tiny_model(attention)
    step = make_train_step(model, keras.optimizers.Adam(0.05))
    source = batch([[2, 4, 5, 3], [2, 6, 3]])
    target = batch([[2, 7, 8, 3], [2, 9, 10, 11, 3]])
    first = float(step(source, target)["loss"])
    assert first == pytest.approx(np.log(12), rel=0.15)  # untrained: about ln(vocab)
    for _ in range(150):
        out = step(source, target)
    assert float(out["loss"]) < 0.05
    assert float(out["accuracy"]) == 1.0
    assert int(out["tokens"]) == 3 + 4  # labels are target[:, 1:] without padding


@pytest.mark.parametrize("accel", [True, False])
def test_teacher_forcing_shifts_the_target(accel):
    """The step's loss equals the masked loss of the model fed target[:, :-1] against target[:, 1:]."""
    model = tiny_model()
    step = make_train_step(model, keras.optimizers.SGD(0.0), accel=accel)  # learning rate 0: weights stay put
    source, target = batch([[2, 4, 3]]), batch([[2, 7, 8, 3, 0]])
    logits, _ = model((source, target[:, :-1]))
    expected = tfattn.masked_loss(target[:, 1:], logits)
    assert float(step(source, target)["loss"]) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("accel", [True, False])
def test_gradients_are_clipped_by_global_norm(accel):
    model = tiny_model()
    step = make_train_step(model, keras.optimizers.SGD(1.0), clip_norm=1e-3, accel=accel)
    before = [v.numpy().copy() for v in model.trainable_variables]
    out = step(batch([[2, 4, 5, 3]]), batch([[2, 7, 8, 3]]))
    change = np.sqrt(sum(np.sum((v.numpy() - b) ** 2) for v, b in zip(model.trainable_variables, before)))
    assert float(out["grad_norm"]) > 1e-3  # the raw norm is larger than the clip ...
    assert change == pytest.approx(1e-3, rel=1e-3)  # ... so an SGD(1.0) step moves exactly clip_norm


def dataset(n=40):
    rows = [([2, 4 + i % 5, 3], [2, 4 + i % 5, 5, 3]) for i in range(n)]
    return tf.data.Dataset.from_generator(
        lambda: iter(rows), output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32))
    ).padded_batch(8)


@pytest.mark.parametrize("accel", [True, False])
def test_fit_history_and_validation(accel):
    history = fit(tiny_model(), dataset(), TrainConfig(epochs=3, learning_rate=0.01, accel=accel),
                  validation=dataset(16), quiet=True)
    assert set(history) == {"loss", "accuracy", "padding_fraction", "val_loss", "val_accuracy", "tokens_per_s",
                            "seconds"}
    assert len(history["loss"]) == 3 and history["loss"][-1] < history["loss"][0]


def test_fit_reports_the_padding_share_of_label_positions():
    source = tf.constant([[2, 4, 3], [2, 5, 3]])
    target = batch([[2, 5, 3], [2, 5, 6, 7, 3]])  # labels: 2 and 4 real tokens in 2 x 4 slots
    data = tf.data.Dataset.from_tensors((source, target))
    history = fit(tiny_model(), data, TrainConfig(epochs=1), quiet=True)
    assert history["padding_fraction"] == [pytest.approx(0.25)]


def test_fit_time_budget_stops_after_the_first_step():
    history = fit(tiny_model(), dataset(), TrainConfig(epochs=50, time_budget=0.0), quiet=True)
    assert len(history["loss"]) == 1


def test_fit_stops_at_max_steps_mid_epoch_and_across_a_second_fit():
    # 40 rows in batches of 8: 5 steps an epoch. max_steps 7 stops 2 steps into the second epoch,
    # whatever `epochs` allows; a second `fit` with the same config takes no step.
    trainer = Trainer(tiny_model(), TrainConfig(epochs=10, max_steps=7), quiet=True)
    history = trainer.fit(dataset())
    assert trainer.step == 7 and len(history["loss"]) == 2
    assert int(trainer.epoch) == 2 and int(trainer.position) == 2  # the second epoch, 2 batches in
    trainer.fit(dataset())
    assert trainer.step == 7
    trainer.config.max_steps = 10  # raised: the run goes on from where it stopped, to step 10, which
    trainer.fit(dataset())  # ends the second epoch: stopped there, as a time budget stops (position 5)
    assert trainer.step == 10 and int(trainer.epoch) == 2 and int(trainer.position) == 5


@pytest.mark.parametrize("bad", [0, -3, 2.5, "7"])
def test_max_steps_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=f"max_steps must be an int >= 1 or None. Received: max_steps={bad!r}"):
        TrainConfig(max_steps=bad)


def test_progress_is_read_every_log_every_steps():
    # 40 rows in batches of 8: 5 steps; with log_every 2 the progress line is updated after steps 2 and 4.
    trainer = Trainer(tiny_model(), TrainConfig(epochs=1, learning_rate=0.01, log_every=2), quiet=True)
    updates, losses = [], []
    trainer.progress.update = lambda epoch, step, logs, tokens_per_s: updates.append((epoch, step, logs))
    trainer.fit(dataset(), on_step=lambda trainer, logs: losses.append(float(logs["step_loss"])))
    assert [(epoch, step) for epoch, step, _ in updates] == [(1, 2), (1, 4)]
    assert losses[0] == pytest.approx(np.log(12), rel=0.15)  # untrained: about ln(vocab)
    # Every batch holds 8 targets of 3 labels, so the epoch's loss so far is the plain mean of its steps'.
    for _, step, logs in updates:
        assert logs["loss"] == pytest.approx(np.mean(losses[:step]), rel=1e-5)
        assert 0 <= logs["accuracy"] <= 1


def test_fit_is_silent_when_quiet(capsys):
    fit(tiny_model(), dataset(8), TrainConfig(epochs=1), quiet=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_prints_one_line_per_epoch_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream=stream)
    progress.update(1, 1, {"loss": 1.0, "accuracy": 0.5}, 100.0)  # not a tty: no redraw
    progress.end_epoch(1, {"loss": 1.0, "accuracy": 0.5}, 100.0)
    assert stream.getvalue() == "epoch 1: loss 1.0000 accuracy 0.5000 100 tok/s\n"


@pytest.mark.parametrize("field, value", [("learning_rate", 0.0), ("epochs", 0)])
def test_train_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        TrainConfig(**{field: value})


def test_a_trainer_checkpoint_restores_the_weights_into_a_new_model(tmp_path):
    trainer = Trainer(tiny_model(), TrainConfig(learning_rate=0.1), quiet=True)
    trainer.train_step(batch([[2, 4, 3]]), batch([[2, 5, 6, 3]]))
    path = trainer.checkpoint().save(str(tmp_path / "ckpt"))
    fresh = tiny_model()  # other random weights
    restored = restore_weights(fresh, path)
    for trained, loaded in zip(trainer.model.variables, restored.variables):
        np.testing.assert_array_equal(loaded.numpy(), trained.numpy())


@pytest.mark.parametrize("stop_after", [2, 5])
def test_an_epoch_resumed_from_a_checkpoint_reports_all_its_batches(tmp_path, stop_after):
    # 5 batches of 8 rows with 3 labels each: every step weighs the same, so the epoch's loss is the
    # plain mean of its 5 step losses, whether it was stopped after step 2 (mid-epoch) or after
    # step 5 (the last batch, before the epoch's end) and finished from a checkpoint.
    losses = []

    def record(trainer, logs):
        losses.append(float(logs["step_loss"]))
        if trainer.step == stop_after and len(losses) == stop_after:
            raise KeyboardInterrupt

    config = TrainConfig(epochs=1, learning_rate=0.01)
    first = Trainer(tiny_model(), config, quiet=True)
    with pytest.raises(KeyboardInterrupt):
        first.fit(dataset(), on_step=record)
    path = first.checkpoint().write(str(tmp_path / "ckpt"))
    second = Trainer(tiny_model(), config, quiet=True)
    second.checkpoint().read(path).assert_existing_objects_matched()
    assert (int(second.epoch), int(second.position)) == (1, stop_after)
    history = second.fit(dataset(), validation=dataset(16), on_step=record)
    assert len(losses) == 5
    assert history["loss"] == [pytest.approx(sum(losses) / 5, rel=1e-5)]
    assert history["padding_fraction"] == [0.0] and history["tokens_per_s"][0] > 0
    assert (int(second.epoch), int(second.position)) == (2, 0)


@pytest.mark.parametrize("accel", [True, False])
def test_a_trainer_trains_on_the_smoothed_loss_and_validates_on_the_plain_one(accel):
    from tfattn.core import masked_loss

    keras.utils.set_random_seed(0)
    model = tiny_model()
    source, target = batch([[2, 4, 5, 3], [2, 6, 3]]), batch([[2, 7, 8, 3], [2, 9, 3]])
    model((source, target[:, :-1]))
    kernel = model.decoder.logits_dense.kernel
    kernel.assign(kernel * 30.0)  # far from uniform, where the two losses would be about equal
    logits, _ = model((source, target[:, :-1]))
    smoothed = float(masked_loss(target[:, 1:], logits, label_smoothing=0.1))
    plain = float(masked_loss(target[:, 1:], logits))
    trainer = Trainer(model, TrainConfig(label_smoothing=0.1, accel=accel), quiet=True)
    assert float(trainer.eval_step(source, target)["loss"]) == pytest.approx(plain, rel=1e-5)  # val_loss: plain NLL
    assert float(trainer.train_step(source, target)["loss"]) == pytest.approx(smoothed, rel=1e-5)  # before the update
    assert abs(smoothed - plain) > 1e-3
