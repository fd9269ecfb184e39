"""Training runs: config, corpora splits, run directory, checkpoints, SIGKILL and resume, evaluate."""

import json
import os
import shutil
import signal

import pytest
import tensorflow as tf

from conftest import run_main, shared_data
from processes import TRAIN_FLAGS, events, tfattn, tfattn_stopping_after, wait_until_stopped, write_anki
from tfattn.cli import find_export
from tfattn.model import ModelConfig
from tfattn.runs.config import CorpusConfig, RunConfig, run_config_of
from tfattn.runs.corpus import load_splits
from tfattn.runs.directory import Run
from tfattn.runs.train import train_run
from tfattn.training.trainer import TrainConfig
from tfattn.serving.translator import CONFIG_FILE


def test_run_config_round_trips_through_json():
    config = RunConfig()
    config.model.attention, config.corpus.splits = "bahdanau", ("train", "val", "test_2016_flickr")
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config


@pytest.mark.parametrize("model, train, warmup", [
    (ModelConfig(attention="bahdanau"), TrainConfig(), 0),
    (ModelConfig(attention="luong", heads=4), TrainConfig(), 1000),  # multi-head cross-attention
    (ModelConfig(attention="bahdanau", encoder="transformer", heads=4), TrainConfig(), 1000),
    (ModelConfig(attention="transformer", heads=4), TrainConfig(), 1000),
    (ModelConfig(attention="transformer", heads=4), TrainConfig(warmup_steps=0), 0),  # a given value wins
    (ModelConfig(attention="bahdanau"), TrainConfig(warmup_steps=7), 7),
])
def test_a_run_warms_up_models_with_multihead_attention_unless_told(model, train, warmup):
    config = RunConfig(model=model, train=train)
    assert config.train.warmup_steps == warmup
    assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))).train.warmup_steps == warmup


def test_a_train_config_alone_has_no_warmup():
    from tfattn.training.schedules import learning_rate

    assert TrainConfig().warmup_steps is None
    assert learning_rate(TrainConfig(learning_rate=2e-3, schedule="constant")) == 2e-3  # no schedule: no warm-up
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 0 or None. Received: warmup_steps=-1"):
        TrainConfig(warmup_steps=-1)


def test_run_config_of_an_earlier_version_loads_without_its_retired_fields():
    old = RunConfig().to_dict()
    old["data"] = {**old["data"], "bucket_width": 2}  # written before sorted pools replaced length bins
    del old["data"]["pool_batches"]
    config = RunConfig.from_dict(old)
    assert config.data == RunConfig().data
    old["data"]["bucket_witdh"] = 2  # a field that never existed is still an error
    with pytest.raises(ValueError, match="unknown field data.bucket_witdh"):
        RunConfig.from_dict(old)


def test_an_earlier_run_with_a_schedule_its_time_budget_overrode_resumes_on_the_cosine_it_trained_on():
    """Before `decay_to_budget` refused other schedules, `--schedule inverse-sqrt --time-budget` trained
    on the cosine fitted to the budget: such a config.json loads with the schedule the run had."""
    old = RunConfig(train=TrainConfig(time_budget=60, decay_to_budget=True)).to_dict()
    old["train"]["schedule"] = "inverse_sqrt"
    config = RunConfig.from_dict(json.loads(json.dumps(old)))
    assert (config.train.schedule, config.train.decay_to_budget) == ("cosine", True)
    old["train"]["decay_to_budget"] = False  # not overridden: kept as written
    assert RunConfig.from_dict(old).train.schedule == "inverse_sqrt"


def test_load_splits_of_a_single_file(tmp_path):
    pairs = write_anki(tmp_path / "d.txt", 120)
    parts, summary = load_splits(CorpusConfig(corpus=str(tmp_path / "d.txt")))
    assert [len(parts[k]) for k in ("train", "validation", "test")] == [114, 3, 3]
    assert parts["test"] == [pairs[0], pairs[50], pairs[100]]  # (written date, ISO): other -> English
    assert summary.startswith("d.txt: 120 lines read, 0 skipped")
    small, _ = load_splits(CorpusConfig(corpus=str(tmp_path / "d.txt"), max_pairs=10))
    assert len(small["train"]) == 10 and len(small["test"]) == 3


def test_load_splits_of_parallel_files(tmp_path):
    for split, n in (("train", 5), ("val", 2), ("test_2016_flickr", 3)):
        (tmp_path / f"{split}.en").write_text("".join(f"en {split} {i}\n" for i in range(n)))
        (tmp_path / f"{split}.de").write_text("".join(f"de {split} {i}\n" for i in range(n)))
    config = CorpusConfig(corpus=str(tmp_path), format="parallel", source_lang="en", target_lang="de",
                          splits=("train", "val", "test_2016_flickr"))
    parts, _ = load_splits(config)
    assert [len(parts[k]) for k in ("train", "validation", "test")] == [5, 2, 3]
    assert parts["validation"][1] == ("en val 1", "de val 1")


@pytest.mark.long  # minutes of runs: make test-long
def test_sigkill_mid_epoch_then_resume(tmp_path):
    write_anki(tmp_path / "d.txt", 3000)  # 2,880 training pairs: 360 batches of 8 per epoch
    run = str(tmp_path / "run")
    flags = ["train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1", *TRAIN_FLAGS,
             "--learning-rate", "0.01"]
    proc = tfattn_stopping_after(55, *flags)  # killed at step 55, four steps after the checkpoint at 51
    wait_until_stopped(proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    before = events(run, "checkpoint")
    assert [r["step"] for r in before] == [1, 11, 21, 31, 41, 51]  # every 10 steps, the first one too
    last = before[-1]
    assert (last["epoch"], last["position"]) == (1, 51)  # mid-epoch: 51 of the epoch's 360 batches done
    # The files are intact: the latest checkpoint is the last one logged, and it reads back.
    latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    assert latest.endswith("ckpt-51")
    assert tf.train.load_checkpoint(latest).get_tensor("position/.ATTRIBUTES/VARIABLE_VALUE") == 51

    resumed = tfattn("train", "--out", run, "--resume", "--quiet")  # the run's own corpus and settings
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert "resumed from step 51 (epoch 1, batch 51)" in err  # steps 52 to 55 are done again
    after = events(run, "checkpoint")[len(before):]
    # The resumed session saves at its first step (a directory it cannot write stops it at once),
    # then every 10 steps after.
    assert [r["step"] for r in after[:3]] == [52, 62, 72]
    print("losses before the kill:", [r["loss"] for r in before], "after:", [r["loss"] for r in after])
    assert after[0]["loss"] < 0.7 * before[0]["loss"]  # goes on from a trained model, not from scratch
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["steps"] == 360  # the epoch was finished from the batch after the checkpoint
    assert os.path.exists(os.path.join(run, "export", "saved_model.pb"))


def test_run_directory_contents(small_run):
    run, summary = small_run
    for name in ("config.json", "tokenizers.json", "history.json", "log.jsonl", "summary.json"):
        assert os.path.isfile(os.path.join(run, name)), name
    assert tf.train.latest_checkpoint(os.path.join(run, "best")) is not None
    history = json.load(open(os.path.join(run, "history.json")))
    assert len(history["val_loss"]) == 2 and summary["best_val_loss"] == pytest.approx(min(history["val_loss"]))
    assert find_export(run) == os.path.join(run, "export")
    assert run_config_of(run).model.units == 32


def test_the_last_step_is_checkpointed(small_run):
    run, summary = small_run
    # 570 training pairs in batches of 8 make 72 steps an epoch, 144 in two. With --checkpoint-every
    # 10, saves come at steps 1, 11, ..., 71, at the epoch's end (72), then 82, ..., 142: only the
    # save at the second epoch's end holds the last 2 steps.
    assert summary["steps"] == 144
    steps = [r["step"] for r in events(run, "checkpoint")]
    assert steps == [*range(1, 72, 10), *range(82, 143, 10)]
    assert [r["step"] for r in events(run, "epoch")] == [72, 144]
    assert [r["step"] for r in events(run, "end")] == [144]
    assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints")).endswith("ckpt-144")
    # The best loss is saved with it: a resumed run compares its epochs with the real best.
    history = json.load(open(os.path.join(run, "history.json")))
    reader = tf.train.load_checkpoint(os.path.join(run, "checkpoints", "ckpt-144"))
    assert reader.get_tensor("best_val_loss/.ATTRIBUTES/VARIABLE_VALUE") == pytest.approx(min(history["val_loss"]))


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_resume_a_finished_run_for_more_epochs(small_run, tmp_path, capsys):
    run = str(tmp_path / "run")
    shutil.copytree(small_run[0], run)
    before = json.load(open(os.path.join(run, "history.json")))
    status, out, err = run_main(capsys, "train", "--out", run, "--resume", "--epochs", "3", "--quiet")
    assert status == 0, err
    assert "resumed from step 144 (epoch 3, batch 0)" in err  # two epochs done, none repeated
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["steps"] == 216 and summary["epochs"] == 3  # 72 more steps; the history goes on
    history = json.load(open(os.path.join(run, "history.json")))
    assert history["val_loss"][:2] == before["val_loss"] and len(history["val_loss"]) == 3
    assert history["seconds"] > before["seconds"]
    assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints")).endswith("ckpt-216")


def test_resume_keeps_the_runs_epochs_and_time_budget_unless_given(tmp_path):
    run = Run(tmp_path)
    config = RunConfig()
    config.train.epochs, config.train.time_budget = 4, 900.0
    run.write_json("config.json", config.to_dict())
    from tfattn.runs.train import _resumed_config

    kept = _resumed_config(run, None, None).train
    assert (kept.epochs, kept.time_budget) == (4, 900.0)  # this session gets the run's budget again
    given = _resumed_config(run, 6, 60.0).train
    assert (given.epochs, given.time_budget) == (6, 60.0)


def test_a_corpus_without_validation_pairs_writes_no_run(tmp_path):
    # Line i goes to validation when i % 50 == 1: blank lines 1 and 51 leave it empty.
    lines = ["" if i in (1, 51) else f"2019-01-{i % 28 + 1:02d}\t{i} jan 2019" for i in range(100)]
    (tmp_path / "d.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = RunConfig(corpus=CorpusConfig(corpus=str(tmp_path / "d.txt")))
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"The validation split of .*d\.txt has no sentence pairs \(.*2 skipped"):
        train_run(config, str(out), echo=lambda line: None)
    assert not out.exists()  # nothing half made: a corrected corpus can use the same --out


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_ctrl_c_saves_the_latest_state(tmp_path):
    write_anki(tmp_path / "d.txt", 3000)  # 360 steps an epoch
    run = str(tmp_path / "run")
    flags = [*TRAIN_FLAGS[:-3], "--checkpoint-every", "25", "--quiet"]
    # Ctrl-C at step 30, between the checkpoints of steps 26 and 51: only the interrupt saves step 30.
    proc = tfattn_stopping_after(30, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run,
                                 "--epochs", "1", *flags)
    wait_until_stopped(proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    logged = [json.loads(line) for line in open(os.path.join(run, "log.jsonl"), encoding="utf-8")]
    assert [(r["event"], r["step"]) for r in logged] == [("checkpoint", 1), ("checkpoint", 26), ("interrupted", 30)]
    assert (logged[-1]["epoch"], logged[-1]["position"]) == (1, 30)
    assert "interrupted at step 30; saved. Continue with: tfattn train --resume --out" in err
    latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    assert latest.endswith("ckpt-30")
    assert tf.train.load_checkpoint(latest).get_tensor("position/.ATTRIBUTES/VARIABLE_VALUE") == 30


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_refuses_to_overwrite_a_run(small_run, tmp_path):
    run, _ = small_run
    proc = tfattn("train", "--corpus", str(tmp_path / "x.txt"), "--out", run, "--quiet")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "already holds a run; pass --resume" in err and "Traceback" not in err


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_evaluate_translate_export_and_plot(small_run, tmp_path, capsys):
    # In this process (the subprocess path of each command is tested in tests/test_cli.py).
    run, _ = small_run
    status, out, err = run_main(capsys, "evaluate", "--model", run, "--split", "test",
                                "--output", str(tmp_path / "e.json"))
    assert status == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert {"bleu", "chrf", "n", "bleu_by_length"} <= set(result) and result["n"] == 12  # 600 lines: 12 test
    assert sum(b["n"] for b in result["bleu_by_length"].values()) == 12
    status, _, err = run_main(capsys, "plot", "--bleu-by-length", str(tmp_path / "e.json"),
                              "--out", str(tmp_path / "b.png"))
    assert status == 0 and (tmp_path / "b.png").stat().st_size > 0, err
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(tmp_path / "exp"))
    assert status == 0 and (tmp_path / "exp" / "saved_model.pb").exists(), err
    texts = ["5 march 2019", "tue 5 mar 2019", "1.2.03"]
    translations = []
    for model in (str(tmp_path / "exp"), run):  # the best checkpoint exported again, and the run's export
        status, out, err = run_main(capsys, "translate", "--model", model, *texts)
        assert status == 0 and len(out.splitlines()) == 3, err
        translations.append(out)
    assert translations[0] == translations[1]  # the weights came back from the checkpoint
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(tmp_path / "reference"), "--no-accel")
    assert status == 0, err
    assert json.load(open(tmp_path / "reference" / CONFIG_FILE))["accel"] is False
    status, out, err = run_main(capsys, "translate", "--model", str(tmp_path / "reference"), *texts)
    assert status == 0 and out == translations[0], err  # the reference tier decodes the same


@pytest.mark.data
@pytest.mark.parametrize("corpus, flags", [
    (("spa-eng", "spa.txt"), []),
    (("multi30k-en-de",), ["--format", "parallel", "--source-lang", "en", "--target-lang", "de",
                           "--splits", "train,val,test_2016_flickr"]),
])
@pytest.mark.long  # minutes of runs: make test-long
def test_train_then_evaluate_on_real_corpora(corpus, flags, tmp_path, capsys):
    path = str(shared_data(*corpus))
    run = str(tmp_path / "run")
    status, _, err = run_main(capsys, "train", "--corpus", path, *flags, "--out", run, "--max-pairs", "1500",
                              "--epochs", "1", "--units", "32", "--vocab-size", "2000", "--quiet")  # the default model
    assert status == 0, err
    status, out, err = run_main(capsys, "evaluate", "--model", run, "--split", "test", "--limit", "100")
    assert status == 0, err
    assert json.loads(out.strip().splitlines()[-1])["n"] == 100
