"""A step whose loss is not finite is skipped and counted; `max_nonfinite` of them in a row stop the run."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from conftest import run_main
from processes import TRAIN_FLAGS, events, write_anki
from tfattn.training import step as step_module
from tfattn.training.trainer import DivergedError, TrainConfig, Trainer


def poison(monkeypatch, bad):
    """Training steps (the n-th call of the train step's forward pass, from 1) in `bad` get a NaN loss."""
    calls = tf.Variable(0, dtype=tf.int64)
    bad = tf.constant(sorted(bad), tf.int64)
    real = step_module.forward_and_loss

    def forward_and_loss(model, source, target, training, accel=None, **options):
        logits, loss = real(model, source, target, training, accel, **options)
        if not training:
            return logits, loss
        n = calls.assign_add(1)
        return logits, tf.where(tf.reduce_any(tf.equal(bad, n)), tf.constant(np.nan, tf.float32), loss)

    monkeypatch.setattr(step_module, "forward_and_loss", forward_and_loss)


def equal_batches(dates_data, n=8):
    """`n` batches of 8 dates each: every batch has 8 x 11 labels, so the epoch's loss is the plain mean."""
    train, _, source, target = dates_data
    return tfattn.make_dataset(train[: 8 * n], source, target, tfattn.DataConfig(batch_size=8, bucket=False),
                               shuffle=False)


def tiny(dates_data):
    _, _, source, target = dates_data
    return tfattn.make_model(tfattn.ModelConfig(embedding_dim=8, units=16), source.vocab_size, target.vocab_size)


@pytest.mark.parametrize("accel", [True, False])
def test_a_skipped_step_changes_no_weight_and_counts_nowhere(dates_data, monkeypatch, accel):
    poison(monkeypatch, {3, 4})
    trainer = Trainer(tiny(dates_data), TrainConfig(learning_rate=1e-2, epochs=1, accel=accel), quiet=True)
    seen = []

    def record(trainer, logs):
        seen.append((float(logs["step_loss"]), trainer.step, [v.numpy().copy() for v in trainer.model.variables]))

    history = trainer.fit(equal_batches(dates_data), on_step=record)
    losses = [loss for loss, _, _ in seen]
    assert np.isnan(losses[2]) and np.isnan(losses[3]) and np.isfinite(losses).sum() == 6
    assert [step for _, step, _ in seen] == [1, 2, 2, 2, 3, 4, 5, 6]  # a skipped step is no update
    for before, after in ((1, 2), (2, 3)):  # batches 3 and 4 left the weights as batch 2 did
        for a, b in zip(seen[before][2], seen[after][2]):
            np.testing.assert_array_equal(a, b)
    assert trainer.nonfinite_steps == 2
    finite = [loss for loss in losses if np.isfinite(loss)]
    assert history["loss"] == [pytest.approx(np.mean(finite), rel=1e-5)]  # the 6 updates only


def test_max_nonfinite_in_a_row_stop_the_run(dates_data, monkeypatch):
    poison(monkeypatch, {2, 4, 5, 6})  # one, then three in a row
    trainer = Trainer(tiny(dates_data), TrainConfig(learning_rate=1e-2, epochs=1, max_nonfinite=3, log_every=1),
                      quiet=True)
    steps = []
    with pytest.raises(DivergedError, match=r"^3 training steps in a row had a non-finite loss \(NaN or infinity; "
                                            r"--max-nonfinite 3\), the last one after step 2$"):
        trainer.fit(equal_batches(dates_data), on_step=lambda t, logs: steps.append(t.step))
    assert steps == [1, 1, 2, 2, 2] and trainer.nonfinite_steps == 4  # stopped at the 6th batch, before on_step
    assert all(np.isfinite(v.numpy()).all() for v in trainer.model.variables if "float" in v.dtype)


def test_steps_apart_do_not_stop_the_run(dates_data, monkeypatch):
    poison(monkeypatch, {2, 4, 6, 8})  # four, never two in a row
    trainer = Trainer(tiny(dates_data), TrainConfig(learning_rate=1e-2, epochs=1, max_nonfinite=2, log_every=1),
                      quiet=True)
    history = trainer.fit(equal_batches(dates_data))
    assert trainer.nonfinite_steps == 4 and trainer.step == 4 and np.isfinite(history["loss"][0])


def test_a_run_counts_skipped_steps_in_its_log_tensorboard_and_summary(tmp_path, capsys, monkeypatch, no_export):
    poison(monkeypatch, {3, 4})
    write_anki(tmp_path / "d.txt", 100)  # 12 steps
    run = str(tmp_path / "run")
    status, out, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                                *TRAIN_FLAGS, "--bleu-sample", "0", "--log-every", "5")
    assert status == 0, err
    assert json.loads(out)["nonfinite_steps"] == 2
    assert "skipped 2 step(s) with a non-finite loss before step 3 (2 in all)" in err
    assert [(r["step"], r["skipped"], r["total"]) for r in events(run, "nonfinite")] == [(3, 2, 2)]
    assert json.load(open(os.path.join(run, "summary.json")))["nonfinite_steps"] == 2
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    board = event_accumulator.EventAccumulator(os.path.join(run, "tensorboard"), {event_accumulator.TENSORS: 0})
    board.Reload()
    counts = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in board.Tensors("train/nonfinite_steps")]
    assert sum(counts) == 2 and counts[0] == 2


def test_a_run_stops_after_max_nonfinite_in_a_row_and_keeps_its_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    poison(monkeypatch, set(range(6, 100)))  # from the 6th step on
    write_anki(tmp_path / "d.txt", 100)
    run = str(tmp_path / "run")
    flags = [*TRAIN_FLAGS, "--checkpoint-every", "2", "--bleu-sample", "0", "--max-nonfinite", "3", "--log-every", "1"]
    status, out, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                                *flags)
    assert status == 2 and out == "", err
    line = err.strip().splitlines()[-1]
    assert line == ("tfattn: error: 3 training steps in a row had a non-finite loss (NaN or infinity; --max-nonfinite "
                    "3), the last one after step 5: the run diverged and stops; the last good state, step 5, is "
                    "kept. Train a new run with a smaller --learning-rate or --clip-norm. Received: "
                    "learning_rate=0.003, clip_norm=5.0"), line
    latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    assert latest.endswith("ckpt-5")
    reader = tf.train.load_checkpoint(latest)
    weights = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("weights/")]
    assert weights and all(np.isfinite(w).all() for w in weights)
    assert not os.path.exists(os.path.join(run, "export")) and not os.path.exists(os.path.join(run, ".lock"))
