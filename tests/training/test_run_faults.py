"""Runs that never lose or mix work, on a machine that misbehaves: two processes on one run, kills,
damaged checkpoints and exports, a full or read-only disk. Every fault is injected while the child
process is stopped at a step it reported itself (see tests/processes.py), never after a sleep."""

import contextlib
import fcntl
import glob
import json
import math
import os
import shutil
import signal
import socket
import subprocess

import pytest
import tensorflow as tf

from conftest import run_main
from processes import TRAIN_FLAGS, events, tfattn, tfattn_stopping_at, wait_until_stopped, write_anki
from tfattn import files
from tfattn.runs import directory, export, saving
from tfattn.runs.directory import Run, RunInUseError, damage_of


def litter(directory):
    """What an interrupted write leaves: checkpoint shards `*_temp`, `*.tmp*` files, hidden export dirs."""
    found = []
    for root, dirs, names in os.walk(directory):
        found += [os.path.relpath(os.path.join(root, name), directory) for name in dirs + names
                  if "_temp" in name or ".tmp" in name or ".old-" in name]
    return found


def error_line(err):
    """The one `tfattn: error: ...` line of a command's stderr, which ends it; no traceback."""
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("tfattn: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    return errors[0]


def copy_run(small_run, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(small_run[0], run)
    return run


def cut_in_half(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


# -- one process per run directory ------------------------------------------------------------------

def test_a_run_directory_has_one_holder_at_a_time(tmp_path):
    out, messages = tmp_path / "run", []
    with Run(out).claim(echo=messages.append):
        assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()
        with pytest.raises(RunInUseError, match=rf"run is in use by pid {os.getpid()} on {socket.gethostname()} "):
            with Run(out).claim(echo=messages.append):
                pass  # a second claim, even from this process, waits for the first to let go
    assert not out.exists()  # the claim made it and left it empty: removed
    assert messages == []


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    out, messages = tmp_path / "run", []
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": 4242, "host": "elsewhere", "since": "2026-01-01T00:00:00"}))
    with Run(out).claim(echo=messages.append):  # nobody holds its flock: the holder died
        assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()
    assert messages == ["taking over the lock of pid 4242 on elsewhere (since 2026-01-01T00:00:00), "
                        "which no longer holds it"]
    assert out.is_dir() and not (out / ".lock").exists()  # released; the directory was there before


def test_a_probe_of_the_lock_lets_another_probe_pass(tmp_path):
    # Each claim first probes the lock with a shared flock (which NFS grants on a read-only file):
    # two processes probing a stale lock at once must not refuse each other.
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": 4242, "host": "elsewhere", "since": "2026-01-01T00:00:00"}))
    fd = os.open(out / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # the other process's probe, held
        directory._Lock(str(out / ".lock")).refuse_if_held(str(out))  # passes
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live holder
        with pytest.raises(RunInUseError, match="in use by pid 4242 on elsewhere"):
            directory._Lock(str(out / ".lock")).refuse_if_held(str(out))
    finally:
        os.close(fd)


def test_a_run_directory_that_cannot_be_written_is_one_line(tmp_path, capsys):
    write_anki(tmp_path / "d.txt", 600)
    out = tmp_path / "run"
    out.mkdir()
    with read_only(out):
        status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", str(out),
                                  "--epochs", "1", *TRAIN_FLAGS)
    reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    assert status == 1 and error_line(err).startswith(f"tfattn: error: could not write the run's lock to {out}/.lock: "
                                                      f"{reason}; ")


@pytest.mark.long  # minutes of runs: make test-long
def test_a_second_training_on_the_same_out_is_refused(tmp_path):
    write_anki(tmp_path / "d.txt", 600)
    run = str(tmp_path / "run")
    first = tfattn_stopping_at("step:5", "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                               *TRAIN_FLAGS, then="go")
    wait_until_stopped(first)  # it holds the run, stopped after its step 5
    try:
        for args in (["--corpus", str(tmp_path / "d.txt"), "--units", "48"], ["--resume"]):
            second = tfattn("train", "--out", run, "--quiet", *args)
            _, err = second.communicate(timeout=300)
            assert second.returncode == 2, err
            assert f"is in use by pid {first.pid} on {socket.gethostname()}" in error_line(err)
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert json.load(open(os.path.join(run, "config.json")))["model"]["units"] == 32  # the first run's, whole
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 72
    assert not os.path.exists(os.path.join(run, ".lock"))  # released at its end


# -- kills -------------------------------------------------------------------------------------------


@pytest.mark.long  # minutes of runs: make test-long
def test_a_kill_after_two_epochs_loses_no_epoch(tmp_path):
    write_anki(tmp_path / "d.txt", 600)  # 576 training pairs in batches of 8: 72 steps an epoch
    run = str(tmp_path / "run")
    # Checkpoints every 500 steps, more than an epoch: only the epoch ends save the state in between.
    proc = tfattn_stopping_at("log:epoch:144", "train", "--corpus", str(tmp_path / "d.txt"), "--out", run,
                              "--epochs", "3", *TRAIN_FLAGS, "--checkpoint-every", "500")
    wait_until_stopped(proc)  # the second epoch's line is in log.jsonl
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert [r["step"] for r in events(run, "checkpoint")] == [1]
    before = json.load(open(os.path.join(run, "history.json")))
    assert len(before["loss"]) == 2

    resumed = tfattn("train", "--out", run, "--resume", "--quiet")
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert f"taking over the lock of pid {proc.pid} on {socket.gethostname()}" in err
    assert "resumed from step 144 (epoch 3, batch 0)" in err  # not from step 1
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["steps"], summary["epochs"]) == (216, 3)  # 72 steps more, and 3 epochs, not 5
    history = json.load(open(os.path.join(run, "history.json")))
    assert history["loss"][:2] == before["loss"] and len(history["loss"]) == 3


def epoch_and_position(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return tuple(int(reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")) for name in ("epoch", "position"))


@pytest.mark.long  # minutes of runs: make test-long
def test_a_step_save_on_an_epoch_s_last_batch_resumes_into_the_next_epoch(tmp_path, capsys):
    """72 batches an epoch and --checkpoint-every 71: the save of step 72 falls on the epoch's last
    batch, before its validation, and is not saved again at the epoch's end; best/ holds step 72
    after the epoch's end. A resume goes on from best/; without it (a kill during the validation),
    from the last batch: no batch of epoch 1 again, its validation again, then epoch 2."""
    write_anki(tmp_path / "d.txt", 600)
    run = str(tmp_path / "run")
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                              *TRAIN_FLAGS, "--checkpoint-every", "71")
    assert status == 0, err
    first = json.load(open(os.path.join(run, "history.json")))
    assert readable_checkpoints(run) == [1, 72]
    assert epoch_and_position(os.path.join(run, "checkpoints", "ckpt-72")) == (1, 72)
    assert epoch_and_position(os.path.join(run, "best", "ckpt-72")) == (2, 0)
    twin = copy_run((run, None), tmp_path / "twin")
    status, out, err = run_main(capsys, "train", "--out", twin, "--resume", "--epochs", "2", "--quiet")
    assert status == 0 and f"resumed from step 72 (epoch 2, batch 0), the state in {twin}/best/ckpt-72" in err, err

    shutil.rmtree(os.path.join(run, "best"))
    status, out, err = run_main(capsys, "train", "--out", run, "--resume", "--epochs", "2", "--quiet")
    assert status == 0 and "resumed from step 72 (epoch 1, batch 72)\n" in err, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["steps"], summary["epochs"]) == (144, 2)
    history = json.load(open(os.path.join(run, "history.json")))
    assert history["loss"][0] == pytest.approx(first["loss"][0], rel=1e-6)  # the restored sums of epoch 1
    assert history["val_loss"][0] == pytest.approx(first["val_loss"][0], rel=1e-5)
    assert all(map(math.isfinite, history["loss"])) and len(history["val_loss"]) == 2


def test_a_checkpoint_without_a_history_cuts_history_json_to_its_epoch(tmp_path):
    run = Run(tmp_path)
    run.write_json("history.json", {"loss": [3.0, 2.0, 1.0], "val_loss": [3.5, 2.5, 1.5], "seconds": 9.0})
    # Written by an earlier version, the checkpoint holds no history; it was saved in epoch 2.
    assert saving._history_at(run, "", epoch=2) == {"loss": [3.0], "val_loss": [3.5], "seconds": 9.0}
    assert saving._history_at(run, json.dumps({"loss": [1.0]}), epoch=2) == {"loss": [1.0]}


# -- what --out may be -------------------------------------------------------------------------------

def test_out_must_be_new_or_empty_and_is_checked_first(exported_dates, tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(exported_dates, export)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    (tmp_path / "file").write_text("x")
    missing = str(tmp_path / "missing.txt")  # never read: --out is refused before the corpus loads
    for out, message in ((export, "holds a SavedModel export, not a run"),
                         (tmp_path / "notes", "is not empty and is not a run (it holds todo.txt)"),
                         (tmp_path / "file", "is a file; a run directory is expected")):
        for args in (["--corpus", missing], ["--resume"]):
            status, _, err = run_main(capsys, "train", "--out", str(out), "--quiet", *args)
            assert status == 2 and "missing.txt" not in err, err
            assert message in error_line(err) or (args == ["--resume"] and "No run to resume in" in err), err
    assert sorted(os.listdir(export)) == sorted(os.listdir(exported_dates))  # untouched


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_an_export_replaces_only_an_export(dates_translator, tmp_path):
    from tfattn.serving.translator import export

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"is not empty and is not an export \(it holds todo.txt\)"):
        export(dates_translator, str(tmp_path / "notes"))
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]
    path = export(dates_translator, str(tmp_path / "e"))
    assert export(dates_translator, path) == path  # over an export: replaced
    assert sorted(os.listdir(tmp_path)) == ["e", "notes"]


# -- damaged checkpoints and exports -----------------------------------------------------------------

def test_a_damaged_latest_checkpoint_is_skipped_and_named(small_run, tmp_path, capsys, no_export):
    run = copy_run(small_run, tmp_path)
    history = json.load(open(os.path.join(run, "history.json")))
    assert history["val_loss"][1] < history["val_loss"][0]  # so best/ holds the state of step 144 too
    # The run kept checkpoints/ckpt-132, 142 and 144 and best/ckpt-144: damage both of step 144.
    cut_in_half(glob.glob(os.path.join(run, "checkpoints", "ckpt-144.data-*"))[0])
    with open(os.path.join(run, "best", "ckpt-144.index"), "r+b") as f:
        f.write(b"\0" * os.path.getsize(f.name))
    status, out, err = run_main(capsys, "train", "--out", run, "--resume", "--epochs", "3", "--quiet")
    assert status == 0, err
    for folder in ("checkpoints", "best"):
        assert f"skipping the checkpoint {os.path.join(run, folder, 'ckpt-144')}: it does not read back (" in err
    assert "resumed from step 142 (epoch 2, batch 70)" in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["steps"], summary["epochs"]) == (216, 3)  # 2 steps of epoch 2 again, then epoch 3
    resumed = json.load(open(os.path.join(run, "history.json")))
    # Epoch 2's loss is over its 72 batches (70 restored with the checkpoint, 2 done again), as before.
    assert resumed["loss"][1] == pytest.approx(history["loss"][1], rel=1e-4) and len(resumed["loss"]) == 3


def test_no_readable_checkpoint_is_error_line(small_run, tmp_path, capsys):
    run = copy_run(small_run, tmp_path)
    for path in glob.glob(os.path.join(run, "*", "ckpt-*.data-*")):
        cut_in_half(path)
    assert all(damage_of(p[: -len(".index")]) for p in glob.glob(os.path.join(run, "*", "ckpt-*.index")))
    status, _, err = run_main(capsys, "train", "--out", run, "--resume", "--quiet")
    line = error_line(err)
    assert status == 2 and line.startswith("tfattn: error: No checkpoint reads back whole (the 4 named above); "
                                           "train the run again into a new --out.")
    assert err.count("skipping the checkpoint ") == 4


def test_a_damaged_best_checkpoint_points_to_the_intact_latest(small_run, tmp_path, capsys):
    run = copy_run(small_run, tmp_path)
    for path in glob.glob(os.path.join(run, "best", "ckpt-*.data-*")):
        cut_in_half(path)
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(tmp_path / "e"))
    line = error_line(err)
    assert status == 2 and line.startswith("tfattn: error: No best checkpoint reads back whole (the 1 named above); "
                                           "the latest checkpoints are intact: export one with --checkpoint latest")
    assert not (tmp_path / "e").exists()
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(tmp_path / "e"), "--checkpoint", "latest")
    assert status == 0 and f"exported step 144 of {run}" in err, err
    for path in glob.glob(os.path.join(run, "checkpoints", "ckpt-*.data-*")):  # now none is intact
        cut_in_half(path)
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(tmp_path / "f"))
    assert status == 2 and "; train the run again into a new --out." in error_line(err)


@pytest.mark.parametrize("damage, message", [
    ("variables", "does not load as a SavedModel ("),
    ("empty graph", "saved_model.pb is empty (0 bytes): the export was cut short"),
])
def test_a_damaged_export_is_error_line(exported_dates, tmp_path, capsys, damage, message):
    export = tmp_path / "export"
    shutil.copytree(exported_dates, export)
    if damage == "variables":
        cut_in_half(glob.glob(str(export / "variables" / "variables.data-*"))[0])
    else:
        (export / "saved_model.pb").write_bytes(b"")
    (tmp_path / "pairs.tsv").write_text("5 march 2019\t2019-03-05\n" * 3, encoding="utf-8")
    for args in (["translate", "--model", str(export), "5 march 2019"],
                 ["evaluate", "--model", str(export), "--corpus", str(tmp_path / "pairs.tsv"), "--split", "train"]):
        status, _, err = run_main(capsys, *args)
        assert status == 2 and message in error_line(err), err


# -- a full or read-only disk ------------------------------------------------------------------------

@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of `size` mounted at `path`, or the test skipped where this process may not mount one."""
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the fault-injecting tests cover the same handling")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(directory):
    """Writes a file in `directory` until its file system is full."""
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:  # unbuffered: nothing left to flush
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)


@contextlib.contextmanager
def read_only(path):
    """`path` read-only for this process's children: a read-only bind mount for root (whom
    permissions do not stop), the mode bits otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
            yield
        finally:
            subprocess.run(["umount", "-l", str(path)], check=True)
    else:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)


def readable_checkpoints(run):
    return sorted(int(os.path.basename(p)[5:-6]) for p in glob.glob(os.path.join(run, "checkpoints", "*.index"))
                  if not damage_of(p[: -len(".index")]))


@contextlib.contextmanager
def full(directory):
    """`directory`'s file system full while the block runs."""
    fill(directory)
    try:
        yield
    finally:
        os.remove(os.path.join(directory, "filler"))


def train_until_the_fault(tmp_path, run, fault):
    """Trains in a child stopped after step 11 (checkpoints at 1 and 11), injects `fault()` (a
    context manager), lets the child go on to its failing save at step 21; returns its error line."""
    write_anki(tmp_path / "d.txt", 600)
    proc = tfattn_stopping_at("step:11", "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                              *TRAIN_FLAGS, then="go")
    wait_until_stopped(proc)
    with fault():
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, err
    return error_line(err)


@pytest.mark.long  # minutes of runs: make test-long
def test_a_full_disk_stops_with_one_line_and_no_litter(tmp_path):
    with tmpfs(tmp_path / "disk", "8M") as disk:  # a run and its export fit in 5 MB
        run = str(disk / "run")
        line = train_until_the_fault(tmp_path, run, lambda: full(disk))
        assert f"could not write the checkpoint of step 21 to {run}/checkpoints: No space left on device; " in line
        assert "once there is room, continue with: tfattn train --resume --out" in line
        assert litter(run) == [] and readable_checkpoints(run) == [1, 11]
        resumed = tfattn("train", "--out", run, "--resume", "--quiet")
        _, err = resumed.communicate(timeout=600)
        assert resumed.returncode == 0 and "resumed from step 11" in err, err
        assert litter(run) == []


@pytest.mark.long  # minutes of runs: make test-long
def test_a_read_only_checkpoints_directory_stops_with_error_line(tmp_path):
    run = str(tmp_path / "run")
    line = train_until_the_fault(tmp_path, run, lambda: read_only(os.path.join(run, "checkpoints")))
    reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    assert f"could not write the checkpoint of step 21 to {run}/checkpoints: {reason}; " in line
    assert "once it is writable, continue with: tfattn train --resume --out" in line
    assert litter(run) == [] and readable_checkpoints(run) == [1, 11]
    with read_only(os.path.join(run, "checkpoints")):  # still read-only: the resume stops at its first step
        again = tfattn("train", "--out", run, "--resume", "--quiet")
        _, err = again.communicate(timeout=600)
    assert again.returncode == 1 and "could not write the checkpoint of step 12 " in error_line(err)
    assert litter(run) == [] and readable_checkpoints(run) == [1, 11]
    resumed = tfattn("train", "--out", run, "--resume", "--quiet")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and "resumed from step 11" in err, err


def test_a_failing_checkpoint_write_is_one_line_and_cleaned_up(tmp_path, capsys, monkeypatch):
    """The fault injected in this process (works without mounting): TensorFlow's save of step 21
    leaves its temporary shard behind and fails as on a full disk."""
    save = tf.train.CheckpointManager.save

    def failing_save(manager, *args, checkpoint_number=None, **kwargs):
        if checkpoint_number == 21:
            os.makedirs(os.path.join(manager.directory, "ckpt-21_temp"))
            open(os.path.join(manager.directory, "ckpt-21_temp", "part-00000-of-00001.data"), "wb").close()
            raise tf.errors.ResourceExhaustedError(None, None, "ckpt-21_temp/part; No space left on device")
        return save(manager, *args, checkpoint_number=checkpoint_number, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", failing_save)
    write_anki(tmp_path / "d.txt", 600)
    run = str(tmp_path / "run")
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                              *TRAIN_FLAGS)
    assert status == 1
    line = error_line(err)
    assert f"could not write the checkpoint of step 21 to {run}/checkpoints: No space left on device; " in line
    assert litter(run) == [] and readable_checkpoints(run) == [1, 11]
    assert not os.path.exists(os.path.join(run, ".lock"))


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_failing_export_keeps_the_export_before(dates_translator, tmp_path, monkeypatch):
    from tfattn.serving.translator import export, load

    path = export(dates_translator, str(tmp_path / "e"))
    before = load(path).signatures["translate"](text=tf.constant(["5 march 2019"]))["text"].numpy().tolist()
    real_save = tf.saved_model.save

    def failing_save(obj, directory, **kwargs):
        open(os.path.join(directory, "saved_model.pb"), "wb").close()  # half written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(files.WriteError, match=rf"could not write the export to {path}: No space left on device; "):
        export(dates_translator, path)
    monkeypatch.setattr(tf.saved_model, "save", real_save)
    assert os.listdir(tmp_path) == ["e"]  # no temporary directory left
    assert load(path).signatures["translate"](text=tf.constant(["5 march 2019"]))["text"].numpy().tolist() == before


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_an_export_to_a_full_disk_keeps_the_export_before(dates_translator, tmp_path):
    from tfattn.serving.translator import export, load

    with tmpfs(tmp_path / "disk", "16M") as disk:
        path = export(dates_translator, str(disk / "e"))
        fill(disk)
        with pytest.raises(files.WriteError, match=rf"could not write the export to {path}: No space left on device"):
            export(dates_translator, path)
        assert sorted(os.listdir(disk)) == ["e", "filler"]
        assert load(path).signatures["translate"](text=tf.constant(["5 march 2019"]))["length"].numpy()[0] > 0


def test_export_of_the_latest_state_takes_best_when_it_is_newer(small_run, tmp_path, monkeypatch):
    run = copy_run(small_run, tmp_path)
    for path in glob.glob(os.path.join(run, "checkpoints", "ckpt-144.*")):
        os.remove(path)  # as when the epoch-end save of step 144 failed after best/ was saved
    used = []
    monkeypatch.setattr(export, "restore_weights", lambda model, path: used.append(path))
    monkeypatch.setattr(export, "export", lambda translator, out, **options: out)
    export.export_run(run, str(tmp_path / "e"), checkpoint="latest", echo=used.append)
    export.export_run(run, str(tmp_path / "e"), checkpoint="best", echo=used.append)
    best = os.path.join(run, "best", "ckpt-144")
    assert used == [best, f"exported step 144 of {run} ({best})"] * 2  # restored, then said
