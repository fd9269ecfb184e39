"""Validation during training: the fixed BLEU sample, schedules, checkpoint averaging, the best
checkpoint by BLEU or loss, and early stopping."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from conftest import run_main
from processes import TRAIN_FLAGS, events, write_anki
from tfattn.training.schedules import WarmupSchedule, learning_rate
from tfattn.training.trainer import TrainConfig, weights_checkpoint
from tfattn.training.callbacks import fixed_sample
from tfattn.training.validation import ValidationConfig, average_weights, score_of


def test_the_bleu_sample_is_spread_evenly_and_fixed():
    pairs = [(str(i), str(i)) for i in range(10)]
    assert [s for s, _ in fixed_sample(pairs, 4)] == ["0", "2", "5", "7"]  # i * 10 // 4
    assert fixed_sample(pairs, 20) == pairs


@pytest.mark.parametrize("field, value, message", [
    ("best_by", "bleu4", "best_by must be one of ('loss', 'bleu'). Received: best_by='bleu4'"),
    ("early_stopping", 0, "early_stopping must be None or an int >= 1. Received: early_stopping=0"),
    ("sample", -1, "sample must be an int >= 0. Received: sample=-1"),
])
def test_validation_config_errors_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ValidationConfig(**{field: value})


def test_best_by_bleu_needs_a_sample():
    with pytest.raises(ValueError, match="best_by='bleu' needs a BLEU sample"):
        ValidationConfig(best_by="bleu", sample=0)


def test_scores_compare_higher_is_better():
    config = ValidationConfig(best_by="loss")
    assert config.better({"val_loss": 1.0}, score_of({"val_loss": 2.0}, "loss"))
    assert not config.better({"val_loss": 2.0}, score_of({"val_loss": 2.0}, "loss"))  # equal is no better
    assert ValidationConfig(best_by="bleu").better({"val_bleu": 30.0, "val_loss": 9.0}, 29.0)


@pytest.mark.parametrize("step, rate", [(0, 0.0), (50, 0.5e-3), (100, 1e-3), (400, 0.5e-3), (10000, 1e-4)])
def test_inverse_sqrt_after_a_linear_warmup(step, rate):
    # peak 1e-3, warm-up 100: step / 100 of the peak, then peak * sqrt(100 / step)
    assert float(WarmupSchedule(1e-3, 100, "inverse_sqrt")(step)) == pytest.approx(rate, rel=1e-6)


@pytest.mark.parametrize("step, rate", [(0, 0.0), (25, 0.25e-3), (100, 1e-3), (5000, 1e-3)])
def test_constant_after_a_linear_warmup(step, rate):
    schedule = learning_rate(TrainConfig(learning_rate=1e-3, warmup_steps=100, schedule="constant"))
    assert float(schedule(step)) == pytest.approx(rate, rel=1e-6)


@pytest.mark.parametrize("step, share", [(0, 0.0), (10, 0.5), (20, 1.0), (70, 0.01 + 0.99 * 0.5), (120, 0.01),
                                         (500, 0.01)])
def test_cosine_after_a_linear_warmup(step, share):
    # Keras' CosineDecay: 20 steps up to 2e-3, then a cosine over 100 steps down to 1% of it.
    schedule = learning_rate(TrainConfig(learning_rate=2e-3, warmup_steps=20, decay_steps=100))
    assert float(schedule(step)) == pytest.approx(2e-3 * share, rel=1e-5)


def test_without_a_warmup_or_decay_the_rate_is_the_flag():
    assert learning_rate(TrainConfig(learning_rate=3e-3)) == 3e-3


def test_average_weights_is_the_mean_of_the_checkpoints(tmp_path):
    model = tfattn.make_model(tfattn.ModelConfig(embedding_dim=4, units=8), 12, 12)
    tfattn.model.ensure_built(model)
    saved, paths = [], []
    for i in range(3):
        keras.utils.set_random_seed(i)
        for variable in model.variables:
            if "float" in variable.dtype:
                variable.assign(np.random.default_rng(i).normal(size=variable.shape).astype("float32"))
        saved.append([v.numpy().copy() for v in model.variables])
        paths.append(weights_checkpoint(model).write(str(tmp_path / f"ckpt-{i}")))
    average_weights(model, paths[1:])  # the last two
    for i, variable in enumerate(model.variables):
        np.testing.assert_allclose(variable.numpy(), (saved[1][i] + saved[2][i]) / 2, rtol=1e-6)


def train(tmp_path, capsys, *flags, lines=100):
    write_anki(tmp_path / "d.txt", lines)
    run = str(tmp_path / "run")
    status, out, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, *TRAIN_FLAGS,
                                "--no-tensorboard", *flags)
    assert status == 0, err
    return run, json.loads(out), err


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_early_stopping_after_k_validations_without_a_better_loss(tmp_path, capsys):
    # A learning rate of 1e-30 leaves the weights as they are: the first validation sets the best loss,
    # the next two are no better (equal), so --early-stopping 2 stops the run after the third, at step 6.
    run, summary, err = train(tmp_path, capsys, "--epochs", "3", "--learning-rate", "1e-30", "--validate-every", "2",
                              "--early-stopping", "2", "--bleu-sample", "0")
    assert "early stopping at step 6: no better validation loss in 2 validations (--early-stopping 2)" in err
    assert summary["steps"] == 6 and summary["early_stopped"] is True
    assert [r["step"] for r in events(run, "validation")] == [2, 4, 6]
    assert [r["step"] for r in events(run, "early_stopping")] == [6]
    assert tf.train.latest_checkpoint(os.path.join(run, "best")).endswith("ckpt-2")
    assert os.path.isfile(os.path.join(run, "export", "saved_model.pb"))


@pytest.mark.long  # minutes of runs: make test-long
def test_the_best_checkpoint_by_bleu_is_the_validation_with_the_highest_bleu(tmp_path, capsys):
    run, summary, _ = train(tmp_path, capsys, "--epochs", "1", "--learning-rate", "0.01", "--validate-every", "3",
                            "--best-by", "bleu", "--bleu-sample", "6", "--max-pairs", "96")
    validations = events(run, "validation")
    assert [r["step"] for r in validations] == [3, 6, 9, 12]
    best = max(validations, key=lambda r: r["val_bleu"])  # the first of equals
    assert summary["best_val_bleu"] == pytest.approx(best["val_bleu"])
    assert tf.train.latest_checkpoint(os.path.join(run, "best")).endswith(f"ckpt-{best['step']}")


@pytest.mark.long  # minutes of runs: make test-long
def test_average_checkpoints_scores_the_mean_of_the_last_k_and_says_which_is_exported(tmp_path, capsys):
    run, summary, err = train(tmp_path, capsys, "--epochs", "1", "--learning-rate", "0.01", "--checkpoint-every",
                              "3", "--average-checkpoints", "3", "--bleu-sample", "4")
    averaged = summary["averaged"]
    assert averaged["steps"] == [12, 10, 7]  # the latest three: the end's, and every 3 steps from the first
    readers = [tf.train.load_checkpoint(os.path.join(run, "checkpoints", f"ckpt-{s}")) for s in averaged["steps"]]
    key = "weights/0/.ATTRIBUTES/VARIABLE_VALUE"
    mean = sum(r.get_tensor(key) for r in readers) / 3
    if averaged["exported"]:
        assert averaged["val_loss_average"] < averaged["val_loss_best"]
        assert "validates better" in err and "it is exported" in err
        kept = tf.train.load_checkpoint(os.path.join(run, "averaged", "ckpt")).get_tensor(key)
        np.testing.assert_allclose(kept, mean, rtol=1e-6)
    else:
        assert averaged["val_loss_average"] >= averaged["val_loss_best"]
        assert "does not validate better" in err and not os.path.exists(os.path.join(run, "averaged"))
    assert [r["exported"] for r in events(run, "average")] == [averaged["exported"]]


class ScriptedValidator:
    """Returns the given validation losses in turn (the held weights first, then the average)."""

    def __init__(self, *losses):
        self.losses = list(losses)

    def __call__(self, trainer=None):
        return {"val_loss": self.losses.pop(0)}


@pytest.mark.parametrize("losses, kept", [((2.0, 1.5), "average"), ((2.0, 2.5), "held")])
def test_the_average_is_kept_only_when_it_validates_better(tmp_path, losses, kept):
    from tfattn.runs.directory import Run
    from tfattn.runs.finish import _average

    model = tfattn.make_model(tfattn.ModelConfig(embedding_dim=4, units=8), 12, 12)
    tfattn.model.ensure_built(model)
    first = model.variables[0]
    steps = {4: 1.0, 8: 2.0, 12: 6.0}  # every float weight of checkpoint `step` is this value
    for step, value in steps.items():
        for variable in model.variables:
            if "float" in variable.dtype:
                variable.assign(tf.fill(variable.shape, value))
        weights_checkpoint(model).write(str(tmp_path / "checkpoints" / f"ckpt-{step}"))
    first.assign(tf.fill(first.shape, 9.0))  # the weights held (the best checkpoint's)
    lines = []
    what = _average(Run(str(tmp_path)), ValidationConfig(average_checkpoints=2), model, ScriptedValidator(*losses),
                    lines.append)
    assert what["steps"] == [12, 8] and what["exported"] == (kept == "average")
    np.testing.assert_array_equal(first.numpy(), 4.0 if kept == "average" else 9.0)  # (6 + 2) / 2, or as held
    assert os.path.exists(tmp_path / "averaged") == (kept == "average")
    assert lines == ["the average of the checkpoints of steps [12, 8] " + (
        f"validates better (loss 1.5000 against 2.0000): it is exported (and kept in {tmp_path / 'averaged'})"
        if kept == "average" else "does not validate better (loss 2.5000 against 2.0000): the best checkpoint is "
                                  "exported")]


def test_the_validator_scores_greedy_translations_with_sacrebleu(dates_data):
    import sacrebleu

    from tfattn.training.step import make_eval_step
    from tfattn.training.validation import Validator

    train, test, source, target = dates_data
    model = tfattn.make_model(tfattn.ModelConfig(embedding_dim=8, units=16), source.vocab_size, target.vocab_size)
    pairs = test[:40]
    data = tfattn.make_dataset(pairs, source, target, tfattn.DataConfig(batch_size=16, bucket=False), shuffle=False)
    decode = tfattn.DecodeConfig(max_length=14)
    validator = Validator(model, make_eval_step(model), data, pairs, (source, target), decode, sample=8, batch_size=3)
    logs = validator()
    sample = [pairs[i * 5] for i in range(8)]  # evenly spaced: 40 / 8
    assert validator.last["sources"] == [s for s, _ in sample]
    translated = tfattn.Translator(model, source, target, decode)([s for s, _ in sample])
    assert validator.last["hypotheses"] == [t.decode("utf-8") for t in translated["text"]]
    references = [t for _, t in sample]
    hypotheses = validator.last["hypotheses"]
    assert logs["val_chrf"] == pytest.approx(sacrebleu.CHRF(lowercase=True).corpus_score(hypotheses, [references]).score)
    assert logs["val_bleu"] == pytest.approx(sacrebleu.BLEU(lowercase=True).corpus_score(hypotheses, [references]).score)
    assert logs["val_loss"] == pytest.approx(math.log(target.vocab_size), rel=0.2)  # untrained
