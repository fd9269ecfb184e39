"""Runs that never lose work or hide a failure, second round (issue 31): a moved or replaced corpus,
a diverged run, SIGTERM, an edited or foreign config.json, a half line in log.jsonl, a missing
tokenizers.json. Faults are injected while the child is stopped at a step it reported itself (see
tests/processes.py), never after a sleep."""

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import zygote
from conftest import made_once, run_main
from processes import TRAIN_FLAGS, events, tfattn_stopping_after, wait_until_stopped, write_anki
from tfattn.runs.directory import Run


def error_line(err):
    """The one `tfattn: error: ...` line of a command's stderr, which ends it; no traceback."""
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("tfattn: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    return errors[0]


def refuse_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def strict_load(text):
    """JSON as a strict parser reads it: NaN and Infinity refused."""
    value = json.loads(text, parse_constant=refuse_constant)
    json.dumps(value, allow_nan=False)
    return value


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished run of 1 epoch (24 steps) trained from its own folder on `d.txt`, given as typed
    (a relative path): `(folder, run directory)`."""
    def train(home):
        write_anki(home / "d.txt", 200)
        done = zygote.run("train", "--corpus", "d.txt", "--out", "run", "--epochs", "1", *TRAIN_FLAGS, cwd=str(home))
        assert done.returncode == 0, done.stderr

    home = made_once(tmp_path_factory, "tiny-run", train)
    return home, str(home / "run")


@pytest.fixture
def finished_run(small_run):
    """The session's finished run (conftest's `small_run`, shared with other modules) as `(folder, run
    directory)`: its corpus, `folder/d.txt`, was given as typed from that folder, as `tiny_run`'s was.
    The tests that train on (resume a run for another epoch) keep `tiny_run`, a run of 24 steps."""
    run = small_run[0]
    return Path(run).parent, run


def copy_run(finished, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(finished[1], run)
    return run


def config_of(run):
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def edit_config(run, change):
    config = config_of(run)
    change(config)
    with open(os.path.join(run, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)


# -- 2. the corpus: its absolute path and fingerprint ------------------------------------------------

def test_the_corpus_is_stored_absolute_with_its_fingerprint(finished_run):
    home, run = finished_run
    corpus = config_of(run)["corpus"]
    assert corpus["corpus"] == str(home / "d.txt")  # not "d.txt", relative to where training started
    assert corpus["fingerprint"]["size"] == os.path.getsize(home / "d.txt")
    assert corpus["fingerprint"]["mtime"] == os.path.getmtime(home / "d.txt")


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_resume_elsewhere_trains_on_the_run_s_file_not_one_of_the_same_name(tiny_run, tmp_path, capsys,
                                                                               monkeypatch):
    run = copy_run(tiny_run, tmp_path)
    write_anki(tmp_path / "d.txt", 60, seed=5)  # another d.txt where the resume starts
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(capsys, "train", "--resume", "--out", run, "--epochs", "2", "--quiet")
    assert status == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 48  # 24 steps again: the run's 200 lines


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_moved_corpus_is_named_then_given_with_corpus(tiny_run, tmp_path, capsys):
    home, _ = tiny_run
    run = copy_run(tiny_run, tmp_path)
    edit_config(run, lambda c: c["corpus"].update(corpus=str(tmp_path / "d.txt")))  # as if trained on this copy
    shutil.copy2(home / "d.txt", tmp_path / "moved.txt")  # then moved (same mtime)
    status, _, err = run_main(capsys, "train", "--resume", "--out", run, "--epochs", "2", "--quiet")
    assert status == 2
    size = os.path.getsize(home / "d.txt")
    assert error_line(err).startswith(f"tfattn: error: The run's corpus {tmp_path}/d.txt is gone (moved or deleted?); "
                                      f"pass --corpus with where it is now, which is checked to be the same file "
                                      f"({size:,} bytes, modified ")
    status, out, err = run_main(capsys, "train", "--resume", "--out", run, "--epochs", "2", "--quiet",
                                "--corpus", str(tmp_path / "moved.txt"))
    assert status == 0, err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 48
    assert config_of(run)["corpus"]["corpus"] == str(tmp_path / "moved.txt")


def test_another_file_at_the_corpus_path_is_refused_by_resume_and_evaluate(finished_run, tmp_path, capsys):
    home, _ = finished_run
    run = copy_run(finished_run, tmp_path)
    shutil.copy2(home / "d.txt", tmp_path / "d.txt")
    edit_config(run, lambda c: c["corpus"].update(corpus=str(tmp_path / "d.txt")))
    size = os.path.getsize(tmp_path / "d.txt")
    write_anki(tmp_path / "d.txt", 60, seed=5)  # another file in its place
    for args in (["train", "--resume", "--out", run, "--quiet"], ["evaluate", "--model", run]):
        status, out, err = run_main(capsys, *args)
        assert status == 2 and out == ""
        assert error_line(err).startswith(
            f"tfattn: error: {tmp_path}/d.txt is not the corpus this run trained on: it has "
            f"{os.path.getsize(tmp_path / 'd.txt'):,} bytes, the run's corpus had {size:,}; modified "), err
    with open(tmp_path / "d.txt", "wb") as f:  # the same size, other bytes
        f.write(b"x" * size)
    status, _, err = run_main(capsys, "evaluate", "--model", run)
    assert status == 2 and "is not the corpus this run trained on: it has the run's corpus's size but other " \
                           "content" in error_line(err)


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_run_without_a_fingerprint_still_resumes_and_gets_one(tiny_run, tmp_path, capsys):
    home, _ = tiny_run
    run = copy_run(tiny_run, tmp_path)
    edit_config(run, lambda c: c["corpus"].pop("fingerprint"))  # written by an earlier version
    status, _, err = run_main(capsys, "train", "--resume", "--out", run, "--epochs", "2", "--quiet")
    assert status == 0, err
    assert config_of(run)["corpus"]["fingerprint"]["size"] == os.path.getsize(home / "d.txt")


# -- 3. a diverged run --------------------------------------------------------------------------------

def diverging_at(monkeypatch, bad_step):
    """From training step `bad_step` on, the step's loss and the first weight are NaN, as when a
    learning rate too large for the data makes training diverge (3e38, the largest float32 allows,
    does not on the dates corpus)."""
    import tfattn.training.trainer as trainer

    real = trainer.train_step_on

    def train_step_on(model, optimizer, *args, **kwargs):
        step = real(model, optimizer, *args, **kwargs)

        def train_step(source, target):
            out = step(source, target)
            if int(optimizer.iterations) >= bad_step:
                weight = model.trainable_variables[0]
                weight.assign(tf.fill(weight.shape, float("nan")))
                out = {**out, "loss": tf.constant(float("nan"))}
            return out

        return train_step

    monkeypatch.setattr(trainer, "train_step_on", train_step_on)


@pytest.mark.parametrize("bad_step, every, kept", [(5, 10, 1), (15, 10, 11), (5, 500, 1)])
def test_a_diverged_run_stops_with_one_line_and_keeps_its_last_good_state(tmp_path, capsys, monkeypatch, bad_step,
                                                                           every, kept):
    """Found at the next step save, or (--checkpoint-every 500) at the epoch's end."""
    write_anki(tmp_path / "d.txt", 200)  # 24 steps an epoch
    run = str(tmp_path / "run")
    diverging_at(monkeypatch, bad_step)
    status, out, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "2",
                                *TRAIN_FLAGS, "--checkpoint-every", str(every))
    assert status == 2 and out == "", err
    line = error_line(err)
    assert f"the run diverged and stops; the last good state, step {kept}, is kept. Train a new run with a smaller " \
           "--learning-rate or --clip-norm. Received: learning_rate=0.003, clip_norm=5.0" in line, line
    assert not os.path.exists(os.path.join(run, "export")) and not os.path.exists(os.path.join(run, ".lock"))
    latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
    assert latest.endswith(f"ckpt-{kept}")
    reader = tf.train.load_checkpoint(latest)
    weights = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("weights/")]
    assert weights and all(np.isfinite(w).all() for w in weights)
    for name in os.listdir(run):  # every JSON file the run wrote is strict JSON
        if name.endswith(".json"):
            strict_load(open(os.path.join(run, name), encoding="utf-8").read())
    for line in open(os.path.join(run, "log.jsonl"), encoding="utf-8"):
        strict_load(line)


def test_the_summary_on_stdout_is_strict_json(tmp_path, capsys, monkeypatch):
    import tfattn.runs.train

    summary = {"run": "r", "best_val_loss": float("nan"), "steps": 3}  # a run without a validation loss
    monkeypatch.setattr(tfattn.runs.train, "train_run", lambda *args, **kwargs: summary)
    status, out, _ = run_main(capsys, "train", "--corpus", "c.txt", "--out", str(tmp_path / "r"))
    assert status == 0 and strict_load(out) == {"run": "r", "best_val_loss": None, "steps": 3}


# -- 4. SIGTERM ----------------------------------------------------------------------------------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_sigterm_saves_the_latest_state_as_ctrl_c_does(tmp_path):
    write_anki(tmp_path / "d.txt", 3000)  # 360 steps an epoch
    run = str(tmp_path / "run")
    flags = [*TRAIN_FLAGS[:-3], "--checkpoint-every", "25", "--quiet"]
    # SIGTERM at step 30, between the checkpoints of steps 26 and 51: only the signal saves step 30.
    proc = tfattn_stopping_after(30, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                                 *flags)
    wait_until_stopped(proc)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert [r["step"] for r in events(run, "terminated")] == [30]
    assert err.strip().splitlines()[-2:] == [
        f"terminated at step 30; saved. Continue with: tfattn train --resume --out {run}", "tfattn: terminated"]
    assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints")).endswith("ckpt-30")
    assert not os.path.exists(os.path.join(run, ".lock"))


# -- 6. config.json edited, damaged or foreign ------------------------------------------------------------

@pytest.mark.parametrize("damage, message", [
    (lambda c: c["model"].update(colour="red"), "unknown field model.colour"),
    (lambda c: c.update(notes="mine"), "unknown field notes"),
    (lambda c: c["model"].update(units="many"), "field model.units is 'many', not int"),
    (lambda c: c["train"].update(epochs=True), "field train.epochs is True, not int"),
    (lambda c: c["model"].update(attention="transformerish"), "model: attention must be one of"),
    (lambda c: c.pop("model"), "it has no field 'model'"),
    (lambda c: c.update(corpus=[]), "corpus is a JSON list, not an object"),
])
def test_an_edited_config_is_one_line_naming_the_file_and_field(finished_run, tmp_path, capsys, damage, message):
    run = copy_run(finished_run, tmp_path)
    edit_config(run, damage)
    status, _, err = run_main(capsys, "train", "--resume", "--out", run, "--quiet")
    assert status == 2
    line = error_line(err)
    assert line.startswith(f"tfattn: error: {run}/config.json is not a run's config.json that tfattn reads: ")
    assert message in line, line


@pytest.mark.parametrize("text, message", [
    ("[]", "the file is a JSON list, not an object"),
    ("not json", "is damaged, not JSON (Expecting value: line 1 column 1 (char 0))"),
])
def test_a_config_that_is_not_a_run_s_is_one_line(finished_run, tmp_path, capsys, text, message):
    run = copy_run(finished_run, tmp_path)
    with open(os.path.join(run, "config.json"), "w") as f:
        f.write(text)
    for args in (["train", "--resume", "--out", run, "--quiet"], ["evaluate", "--model", run]):
        status, _, err = run_main(capsys, *args)
        assert status == 2 and f"{run}/config.json" in error_line(err) and message in error_line(err)


@pytest.mark.parametrize("change, weight", [
    (lambda c: c["model"].update(units=48), "has shape"),
    (lambda c: c["model"].update(attention="luong"), "weight"),
])
def test_a_config_that_does_not_match_the_checkpoint_names_the_weight(finished_run, tmp_path, capsys, change, weight):
    run = copy_run(finished_run, tmp_path)
    edit_config(run, change)
    status, _, err = run_main(capsys, "train", "--resume", "--out", run, "--quiet")
    assert status == 2
    line = error_line(err)
    assert line.startswith(f"tfattn: error: {run}/config.json does not match the checkpoint {run}/"), line
    assert weight in line and "Put back the settings the run was trained with" in line
    assert "WARNING" not in err


def test_a_foreign_config_beside_an_export_is_not_read(finished_run, tmp_path, capsys):
    shutil.copytree(os.path.join(finished_run[1], "export"), tmp_path / "exp")
    (tmp_path / "config.json").write_text(json.dumps({"name": "my project"}))  # the project's own file
    status, _, err = run_main(capsys, "evaluate", "--model", str(tmp_path / "exp"))
    assert status == 2 and "No corpus: pass --corpus" in error_line(err)
    (tmp_path / "exp" / "config.json").write_text(json.dumps({"name": "my project"}))  # inside: read, refused
    status, _, err = run_main(capsys, "evaluate", "--model", str(tmp_path / "exp"))
    assert status == 2 and error_line(err).startswith(
        f"tfattn: error: {tmp_path}/exp/config.json is not a run's config.json that tfattn reads: unknown field name")


# -- 11. a half line in log.jsonl; 13. a missing tokenizers.json ------------------------------------------

def test_a_half_line_at_the_end_of_the_log_is_cut_before_appending(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "log.jsonl").write_text('{"event": "checkpoint", "step": 1}\n{"event": "checkpoint", "st')
    messages = []
    with Run(tmp_path).claim(resume=True, echo=messages.append) as run:
        run.log(event="resume", step=1)
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [strict_load(line)["event"] for line in lines] == ["checkpoint", "resume"]
    assert messages == [f"{tmp_path}/log.jsonl ended in half a line (a kill while it was written): cut it off"]


def test_a_missing_tokenizers_json_is_named(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    os.remove(os.path.join(run, "tokenizers.json"))
    status, _, err = run_main(capsys, "train", "--resume", "--out", run, "--quiet")
    assert status == 2
    assert error_line(err) == (f"tfattn: error: {run}/tokenizers.json is missing: it holds the run's two "
                               f"vocabularies, written when training started, and its checkpoints need them. Put it "
                               f"back, or train a new run. Received: out={run!r}")
