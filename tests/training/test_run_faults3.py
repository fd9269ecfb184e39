"""Runs whose every wait is bounded and answered, and whose stored paths are checked first (issue 43,
defects 1-3): a TensorBoard path that cannot be written, a multiworker worker that never comes,
more mirrored replicas than devices or rows, Ctrl-C and SIGTERM during the setup. Signals are sent
while the child is stopped at a point it reported itself (tests/processes.py), never after a sleep."""

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import run_main
from processes import TRAIN_FLAGS, tfattn, tfattn_stopping_at, wait_until_stopped, write_anki
from tfattn.runs.config import CorpusConfig, RunConfig
from tfattn.runs.directory import SETUP_FILES, Run


def error_line(err):
    """The one `tfattn: error: ...` line of a command's stderr, which ends it; no traceback."""
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("tfattn: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    return errors[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "d.txt"
    write_anki(path, 200)
    return str(path)


# -- 1. a TensorBoard path that cannot be written ---------------------------------------------------

@pytest.mark.parametrize("where", ["file", "under a file"])
def test_a_tensorboard_path_that_cannot_be_written_leaves_no_run(corpus, tmp_path, capsys, where):
    (tmp_path / "F").write_text("a file")
    board = tmp_path / "F" if where == "file" else tmp_path / "F" / "sub"
    run = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(run), "--tensorboard", str(board),
                              *TRAIN_FLAGS)
    line = error_line(err)
    assert status == 2 and line.startswith(f"tfattn: error: --tensorboard {board} cannot be written: ")
    assert line.endswith(f"pass a directory this process can write, or --no-tensorboard. Received: --tensorboard "
                         f"{str(board)!r}")
    assert not run.exists() and (tmp_path / "F").read_text() == "a file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_a_tensorboard_folder_without_write_permission_leaves_no_run(corpus, tmp_path, capsys):
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(tmp_path / "run"), "--tensorboard",
                              str(folder / "tb"), *TRAIN_FLAGS)
    assert status == 2 and "Permission denied" in error_line(err) and not (tmp_path / "run").exists()


def test_a_good_tensorboard_path_is_checked_without_leaving_anything(tmp_path):
    from tfattn.runs.train import check_tensorboard

    check_tensorboard(str(tmp_path / "a" / "b"))  # made, written in, removed again
    assert os.listdir(tmp_path) == []


def stored_run(tmp_path, tensorboard):
    """A run directory holding only the config.json of a run whose summaries go to `tensorboard` (no
    tokenizers.json: a resume that gets past the TensorBoard check stops there)."""
    run = Run(str(tmp_path / "run"))
    os.makedirs(run.out)
    corpus = CorpusConfig(corpus=str(tmp_path / "gone.txt"))
    run.write_json("config.json", RunConfig(corpus=corpus, tensorboard=str(tensorboard)).to_dict())
    return run


def test_resume_of_a_run_whose_tensorboard_path_broke_says_how_to_replace_it(tmp_path, capsys):
    board = tmp_path / "board"
    board.write_text("a file where the directory was")
    run = stored_run(tmp_path, board)
    before = sorted(os.listdir(run.out))
    status, _, err = run_main(capsys, "train", "--resume", "--out", run.out)
    assert status == 2 and error_line(err) == (
        f"tfattn: error: The run's TensorBoard directory {board} (in its config.json) cannot be written: it is a file. "
        f"Resume with --tensorboard DIR to write its summaries there instead, or with --no-tensorboard. Received: "
        f"tensorboard={str(board)!r}")
    assert sorted(os.listdir(run.out)) == before
    # Either flag replaces it: the resume goes past the check, to the tokenizers.json this one lacks.
    for flags in (["--no-tensorboard"], ["--tensorboard", str(tmp_path / "elsewhere")]):
        status, _, err = run_main(capsys, "train", "--resume", "--out", run.out, *flags)
        assert status == 2 and "tokenizers.json is missing" in error_line(err) and "TensorBoard" not in err, err


def test_tensorboard_and_no_tensorboard_together_are_refused(corpus, tmp_path, capsys):
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(tmp_path / "run"), "--tensorboard",
                              str(tmp_path / "tb"), "--no-tensorboard", *TRAIN_FLAGS)
    assert status == 2 and "contradict each other" in error_line(err)


@pytest.mark.long  # two short runs, 40-80 s: make test-long
def test_a_resumed_run_writes_its_summaries_where_resume_tells_it(corpus, tmp_path):
    run, board, elsewhere = str(tmp_path / "run"), tmp_path / "board", tmp_path / "elsewhere"
    first = tfattn("train", "--corpus", corpus, "--out", run, "--epochs", "1", "--tensorboard", str(board),
                   *TRAIN_FLAGS)
    assert first.wait(timeout=900) == 0, first.stderr.read()
    os.rename(board, tmp_path / "old-board")
    board.write_text("a file")
    second = tfattn("train", "--resume", "--out", run, "--epochs", "2", "--tensorboard", str(elsewhere))
    assert second.wait(timeout=900) == 0, second.stderr.read()
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["tensorboard"] == str(elsewhere)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(elsewhere))


# -- 3. mirrored replicas bounded by the batch and the devices --------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--replicas", "1000", "--batch-size", "64"], "--replicas 1000 is more than --batch-size 64: each replica trains "
                                                   "on its share of the global batch, so there can be at most 64."),
    (["--replicas", "64", "--batch-size", "64"], "--replicas 64 asks for more devices than this machine has: "),
])
def test_more_mirrored_replicas_than_rows_or_devices_are_refused_first(corpus, tmp_path, capsys, flags, message):
    if flags[1] == "64" and (os.cpu_count() or 1) >= 64:
        pytest.skip("this machine has 64 cores")
    run = tmp_path / "run"
    train_flags = [flag for flag in TRAIN_FLAGS if flag != "--batch-size"]
    train_flags.remove("8")  # (--batch-size 8's value)
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(run), "--strategy", "mirrored",
                              *flags, *train_flags)
    assert status == 2 and message in error_line(err) and not run.exists()


# -- 2. a multiworker worker that never comes, and signals in any phase --------------------------------

def lone_worker(index, corpus, run, timeout):
    """`tfattn train --strategy multiworker` as worker `index` of two, the other never started."""
    from tfattn.training.distributed import local_cluster

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": local_cluster(2)[index]}
    return subprocess.Popen([sys.executable, "-m", "tfattn.cli", "train", "--corpus", corpus, "--out", run,
                             "--strategy", "multiworker", "--worker-timeout", timeout, *TRAIN_FLAGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
@pytest.mark.parametrize("index", [0, 1])  # the chief, which writes the run, and the other worker
def test_a_worker_that_never_comes_is_named_within_the_timeout(corpus, tmp_path, index):
    run = str(tmp_path / "run")
    proc = lone_worker(index, corpus, run, "3s")
    _, err = proc.communicate(timeout=600)  # a guard against a hang only: the worker stops by itself
    other = 1 - index
    line = error_line(err)
    assert proc.returncode == 2, err
    assert f"waiting up to 3 s for worker {other} (127.0.0.1:" in err
    assert line.startswith(f"tfattn: error: worker {other} (127.0.0.1:") and " did not start within 3 s: " in line
    assert line.endswith("or wait longer with --worker-timeout. Received: worker_timeout=3"), line
    assert not os.path.exists(run), "nothing of the run is left"


def stderr_until(proc, fragment):
    """Reads the child's stderr until a line holding `fragment` (what it reports); the lines read."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if fragment in line:
            return lines
    pytest.fail(f"the child ended without reporting {fragment!r}: {''.join(lines)[-2000:]}")


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
@pytest.mark.parametrize("index", [0, 1])
def test_sigterm_ends_the_wait_for_the_other_workers(corpus, tmp_path, index):
    run = str(tmp_path / "run")
    proc = lone_worker(index, corpus, run, "10m")
    stderr_until(proc, "waiting up to 600 s for worker")  # the child says it waits: the signal comes now
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "tfattn: terminated", err
    assert "Traceback" not in err and not os.path.exists(run)


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
@pytest.mark.parametrize("where, left", [("setup:corpus", None), ("setup:config", {"config.json", "tokenizers.json"})])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_setup_ends_it_and_leaves_a_run_that_resumes(corpus, tmp_path, where, left, signum):
    run = str(tmp_path / "run")
    proc = tfattn_stopping_at(where, "train", "--corpus", corpus, "--out", run, *TRAIN_FLAGS)
    wait_until_stopped(proc)
    os.kill(proc.pid, signum)  # pending until the child goes on
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=600)
    how, status = ("terminated", 143) if signum == signal.SIGTERM else ("interrupted", 130)
    assert proc.returncode == status and err.strip().splitlines()[-1] == f"tfattn: {how}", err
    assert "Traceback" not in err
    if left is None:  # before config.json: nothing is left, the same command starts it again
        assert not os.path.exists(run) or set(os.listdir(run)) <= SETUP_FILES
        assert f"{how} while setting up, before the first step; nothing was trained. To train, start it again " \
               f"with the same command" in err
    else:  # after it: a run without a checkpoint yet, which --resume trains from the start
        assert set(os.listdir(run)) == left
        assert f"To train, continue with: tfattn train --resume --out {run}" in err
