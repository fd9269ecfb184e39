"""Exports that never lose a user's files or hide a failure: a folder holding other files, a symlink,
a run that trains meanwhile, a kill, a diverged model. Kills are injected while the child process is
stopped at a point it reported itself (as in tests/processes.py), never after a sleep."""

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_main
from processes import wait_until_stopped
from tfattn import files
from tfattn.serving.translator import export, load
from tfattn.runs import export as runs_export
from tfattn.runs.directory import Run


def error_line(err):
    """The one `tfattn: error: ...` line of a command's stderr, which ends it; no traceback."""
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("tfattn: error: ") and "Traceback" not in err, err
    return lines[-1]


def translation(path):
    return load(path).signatures["translate"](text=tf.constant(["5 march 2019"]))["text"].numpy()[0]


def workspaces(directory):
    return [name for name in os.listdir(directory) if name.startswith(files.EXPORT_WORK)]


@pytest.fixture
def project(small_run, tmp_path):
    """A copy of the run (`tmp_path/run`) and `tmp_path/proj`: a copy of its export with the user's
    own files in it, as the issue's reproduction has it."""
    run = str(tmp_path / "run")
    shutil.copytree(small_run[0], run)
    proj = tmp_path / "proj"
    shutil.copytree(os.path.join(run, "export"), proj)
    (proj / "NOTES.md").write_text("notes")
    (proj / "mydata").mkdir()
    (proj / "mydata" / "important.csv").write_text("x")
    (proj / "attention.png").write_bytes(b"\x89PNG")  # as the demo keeps in its export folder
    return run, proj


def assert_users_files_kept(proj):
    assert (proj / "NOTES.md").read_text() == "notes" and (proj / "mydata" / "important.csv").read_text() == "x"
    assert (proj / "attention.png").read_bytes() == b"\x89PNG"


# -- defect 1: the files an export did not write stay, a symlink is written through ------------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_an_export_keeps_the_files_it_did_not_write(project, capsys):
    run, proj = project
    os.remove(proj / "fingerprint.pb")  # and an entry of its own that it writes again
    status, out, err = run_main(capsys, "export", "--model", run, "--out", str(proj))
    assert status == 0 and out.strip() == str(proj), err
    assert_users_files_kept(proj)
    assert (proj / "fingerprint.pb").exists() and workspaces(proj) == []
    assert translation(str(proj))
    assert sorted(os.listdir(proj.parent)) == ["proj", "run"]  # nothing beside it either


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_symlinked_out_is_written_through(project, capsys):
    run, proj = project
    os.rename(proj, proj.parent / "v3")
    os.symlink("v3", proj)  # current -> v3, as a user keeps versions
    before = os.stat(proj.parent / "v3" / "saved_model.pb").st_ino
    status, _, err = run_main(capsys, "export", "--model", run, "--out", str(proj))
    assert status == 0, err
    assert os.readlink(proj) == "v3" and os.stat(proj.parent / "v3" / "saved_model.pb").st_ino != before
    assert_users_files_kept(proj)
    assert sorted(os.listdir(proj.parent)) == ["proj", "run", "v3"] and translation(str(proj))


# -- defect 5: a checkpoint that training rotates away between the check and the restore -------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_checkpoint_removed_before_its_restore_is_passed_over(project, capsys, monkeypatch):
    run, _ = project
    real_restore, removed = runs_export.restore_weights, []

    def rotated_away_first(model, path):  # the training process's manager deletes it right then
        if not removed:
            removed.append(path)
            for name in os.listdir(os.path.dirname(path)):
                if name.startswith(os.path.basename(path) + "."):
                    os.remove(os.path.join(os.path.dirname(path), name))
        return real_restore(model, path)

    monkeypatch.setattr(runs_export, "restore_weights", rotated_away_first)
    out = str(project[1].parent / "e")
    status, _, err = run_main(capsys, "export", "--model", run, "--out", out, "--checkpoint", "latest")
    assert status == 0 and removed == [os.path.join(run, "best", "ckpt-144")], err
    # the same step, saved in checkpoints/ after the epoch's last batch, is the newest then
    assert f"exported step 144 of {run} ({os.path.join(run, 'checkpoints', 'ckpt-144')})" in err.splitlines()
    assert "skipping" not in err and translation(out)  # a rotated checkpoint is not a damaged one


# -- defect 3: a model with a weight that is not finite is not exported -------------------------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_diverged_checkpoint_is_not_exported(project, capsys, monkeypatch):
    run, proj = project
    real_restore = runs_export.restore_weights

    def diverged(model, path):
        real_restore(model, path)
        model.variables[0].assign(tf.fill(model.variables[0].shape, np.nan))

    monkeypatch.setattr(runs_export, "restore_weights", diverged)
    before = sorted(os.listdir(proj))
    for out in (proj, proj.parent / "new"):
        status, _, err = run_main(capsys, "export", "--model", run, "--out", str(out))
        line = error_line(err)
        assert status == 2 and f"Not exporting {run}/best/ckpt-144: its weight " in line and "is not finite" in line
    assert sorted(os.listdir(proj)) == before and not (proj.parent / "new").exists()


def test_export_refuses_a_model_with_a_weight_that_is_not_finite(dates_translator, tmp_path):
    variable = dates_translator.model.variables[0]
    saved = variable.numpy()
    variable.assign(tf.where(tf.range(tf.size(saved))[:1] == 0, np.inf, saved.ravel()[:1]).numpy().reshape(-1)[0]
                    * np.ones_like(saved))
    try:
        with pytest.raises(ValueError, match=rf"Not exporting to {tmp_path}/e: the weight .* is not finite"):
            export(dates_translator, str(tmp_path / "e"))
    finally:
        variable.assign(saved)
    assert os.listdir(tmp_path) == []


# -- defect 8: a killed export leaves nothing the next command does not finish or remove -------------

KILLED_EXPORT = """
import os, signal, sys, time
from tfattn import cli, files

where = sys.argv.pop(1)
swap_in, rename = files.swap_in, os.rename

def stop():
    os.kill(os.getpid(), signal.SIGSTOP)
    for _ in range(6000):  # continued: the test's SIGKILL arrives here (at most 60 s)
        time.sleep(0.01)
    sys.exit(f"continued at {where} without a signal")

def written_then_swap(work, target, new, retire=()):
    if where == "written":  # the export is whole in its workspace, the vocabularies beside it
        stop()
    return swap_in(work, target, new, retire)

def rename_then_stop(src, dst):
    rename(src, dst)
    if where == "mid-swap" and dst.endswith(os.sep + os.path.join("old", "saved_model.pb")):
        stop()  # the old graph moved out, the new one not in yet: no saved_model.pb in the export

files.swap_in, os.rename = written_then_swap, rename_then_stop
sys.exit(cli.main())
"""


@pytest.mark.long  # minutes of runs: make test-long
@pytest.mark.parametrize("where, then", [("written", "export"), ("mid-swap", "export"), ("mid-swap", "translate")])
def test_what_a_killed_export_leaves_is_finished_or_removed(project, tmp_path, capsys, where, then):
    run, proj = project
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(system_tmp)}
    child = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, where, "export", "--model", run, "--out",
                              str(proj)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_until_stopped(child)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    # The vocabulary files were written inside the workspace, not here. (TensorFlow's own autograph
    # files, which it removes at exit, stay after any kill: they are not the export's.)
    assert [name for name in os.listdir(system_tmp) if not name.startswith("__autograph_generated_file")] == []
    assert len(workspaces(proj)) == 1 and ((proj / "saved_model.pb").exists() == (where == "written"))
    if then == "export":
        status, out, err = run_main(capsys, "export", "--model", run, "--out", str(proj))
        assert status == 0 and out.strip() == str(proj), err
    else:
        status, out, err = run_main(capsys, "translate", "--model", str(proj), "5 march 2019")
        assert status == 0 and len(out.splitlines()) == 1, err
    done = "removed 1 workspace of killed exports" if where == "written" else "finished the export that a killed"
    assert f"{proj}: {done}" in err, err
    assert workspaces(proj) == [] and translation(str(proj))
    assert_users_files_kept(proj)


# -- defect 13: translate with a run in progress that has no export yet ------------------------------

def test_translate_with_a_run_in_progress_says_how_to_export_it(project, capsys):
    run, _ = project
    shutil.rmtree(os.path.join(run, "export"))
    with Run(run).claim(resume=True):  # as the training process holds it
        status, _, err = run_main(capsys, "translate", "--model", run, "5 march 2019")
    line = error_line(err)
    assert status == 2 and f"{run} is a run in progress (pid {os.getpid()} on " in line, err
    assert f"export its latest checkpoint: tfattn export --model {run} --out EXPORT --checkpoint latest" in line
    status, _, err = run_main(capsys, "translate", "--model", run, "5 march 2019")  # ended: stopped early
    assert status == 2 and f"{run} is a run without an export" in error_line(err)


# -- issue 43, defect 4: a reader never loads half of an export being replaced ----------------------

# A writer that puts the export at argv[1] in place of the one at argv[2] as `tfattn export` does
# (`files.export_workspace`, `files.swap_in`), and stops itself (SIGSTOP) right after the new
# saved_model.pb is in place, before the new variables: the old graph's variables, the new graph.
# With argv[3] = "loop", it swaps argv[1] and argv[4] in turn, without stopping, until the file
# argv[5] exists (the reader's last load is done), and prints how many times it swapped.
SWAPPING_WRITER = """
import os, shutil, signal, sys
from tfattn import files
ENTRIES = ("saved_model.pb", "saved_model.pbtxt", "variables", "assets", "assets.extra", "fingerprint.pb",
           "tfattn_config.json")
rename, target_path = os.rename, os.path.realpath(sys.argv[2])

def rename_then_stop(a, b):
    rename(a, b)
    if os.path.realpath(b) == os.path.join(target_path, "saved_model.pb"):
        os.kill(os.getpid(), signal.SIGSTOP)

def replace(source, stop):
    with files.export_workspace(sys.argv[2]) as (work, target):
        new = os.path.join(work, "new")
        shutil.copytree(source, new)
        os.rename = rename_then_stop if stop else rename
        try:
            files.swap_in(work, target, new, retire=ENTRIES)
        finally:
            os.rename = rename

if sys.argv[3] == "loop":
    swaps = 0
    while not os.path.exists(sys.argv[5]):
        replace(sys.argv[1] if swaps % 2 else sys.argv[4], stop=False)
        swaps += 1
    print(swaps)
else:
    replace(sys.argv[1], stop=True)
    print("replaced")
"""

# A reader: loads the export at argv[1] as `tfattn translate` does and prints its translation; with
# argv[2] = N, N times, printing one line per load ("ok" or the error), then makes the file argv[3].
READER = """
import sys
import tensorflow as tf
from tfattn.serving.translator import load
def translation():
    loaded = load(sys.argv[1])
    return loaded.signatures["translate"](text=tf.constant(["5 march 2019"]))["text"].numpy()[0].decode()
if len(sys.argv) == 2:
    print(translation())
else:
    for _ in range(int(sys.argv[2])):
        try:
            translation()
            print("ok", flush=True)
        except Exception as error:
            print(f"failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
    open(sys.argv[3], "w").close()
"""


def child(script, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def waits_on_a_lock(pid):
    """Whether the process `pid` is blocked waiting for a file lock (a `->` line of /proc/locks)."""
    with open("/proc/locks", encoding="ascii") as f:
        return any("->" in line and f" {pid} " in line for line in f)


@pytest.fixture
def two_exports(exported_dates, exported_bahdanau, tmp_path):
    """`(path, other)`: copies of the session's Luong export, and of its Bahdanau export (other weights,
    another graph) to put in its place."""
    path, other = tmp_path / "proj", tmp_path / "other"
    shutil.copytree(exported_dates, path)
    shutil.copytree(exported_bahdanau, other)
    return str(path), str(other)


@pytest.mark.long  # two TensorFlow processes of their own (15-20 s): make test-long
def test_a_reader_never_loads_an_export_half_replaced(two_exports):
    path, other = two_exports
    writer = child(SWAPPING_WRITER, other, path, "stop")
    wait_until_stopped(writer)  # the new graph in place, the old variables still there
    reader = child(READER, path)
    deadline = time.monotonic() + 600  # a guard against a hang only: the reader waits for the lock
    while reader.poll() is None and not waits_on_a_lock(reader.pid):
        assert time.monotonic() < deadline, "the reader neither finished nor waited for the export's lock"
        time.sleep(0.05)
    assert reader.poll() is None, f"the reader loaded the half-replaced export: {reader.communicate()}"
    os.kill(writer.pid, signal.SIGCONT)
    assert writer.wait(timeout=600) == 0 and writer.stdout.read().strip() == "replaced", writer.stderr.read()
    out, err = reader.communicate(timeout=600)
    assert reader.returncode == 0, err
    assert out.strip() == translation(other).decode(), "the reader waited and loaded the new export whole"


@pytest.mark.long  # two processes loading and replacing, a minute or two: make test-long
def test_exports_replaced_in_a_loop_while_another_process_loads_them(two_exports, tmp_path):
    # The writer swaps the two exports in turn for as long as the reader loads: every load meets swaps.
    path, other = two_exports
    original, done = str(tmp_path / "original"), tmp_path / "reader-done"
    shutil.copytree(path, original)
    writer = child(SWAPPING_WRITER, other, path, "loop", original, done)
    reader = child(READER, path, 20, done)
    out, err = reader.communicate(timeout=1800)
    writes, writer_err = writer.communicate(timeout=600)
    assert writer.returncode == 0 and int(writes) > 20, writer_err[-2000:]
    loads = out.splitlines()
    assert len(loads) == 20 and all(line == "ok" for line in loads), (loads, err[-2000:])
    assert "WARNING:tensorflow" not in err, err[-2000:]  # (TensorFlow's own warnings of a bad restore)
