"""tfattn.files: writes that fail whole, never half, and directories swapped in place."""

import contextlib
import errno
import json
import os
import stat
import subprocess

import pytest

from tfattn import files


def test_a_line_that_fails_to_append_is_cut_off_again(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    files.append_line(log, '{"step": 1}', "the log")
    real_write = os.write

    def half_then_full(fd, data):  # the disk fills after half the line
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(files.WriteError, match=r"could not write the log to .*log\.jsonl: No space left on device"):
        files.append_line(log, '{"step": 2}', "the log")
    assert log.read_text() == '{"step": 1}\n'  # no half line for a reader to choke on


def test_a_short_write_counts_as_a_full_disk(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setattr(os, "write", lambda fd, data: 3)  # wrote 3 bytes of 8 and gave up
    with pytest.raises(files.WriteError, match="No space left on device"):
        files.append_line(log, "abcdefg", "the log")
    assert log.read_text() == ""


def test_a_swapped_in_directory_gets_the_mode_of_a_new_directory(tmp_path):
    old_umask = os.umask(0o022)
    try:
        new = files.temporary_sibling(tmp_path / "export")
        os.mkdir(tmp_path / "plain")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o755 == stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
    assert os.path.basename(new).startswith(".export.tmp-")


def make_dir(path, text):
    os.makedirs(path)
    (path / "file").write_text(text)


def test_replace_directory_swaps_a_complete_directory_in(tmp_path):
    make_dir(tmp_path / "export", "old")
    make_dir(tmp_path / "new", "new")
    files.replace_directory(str(tmp_path / "new"), str(tmp_path / "export"))
    assert (tmp_path / "export" / "file").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["export"]  # nothing aside, nothing left over


def test_a_failed_rename_puts_the_old_directory_back(tmp_path, monkeypatch):
    make_dir(tmp_path / "export", "old")
    make_dir(tmp_path / "new", "new")
    real_rename, calls = os.rename, []

    def second_fails(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the new directory into place
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(OSError, match="Invalid cross-device link"):
        files.replace_directory(str(tmp_path / "new"), str(tmp_path / "export"))
    assert (tmp_path / "export" / "file").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["export", "new"]  # no hidden directory left


def test_a_directory_left_aside_by_a_kill_is_put_back(tmp_path):
    # What a kill between replace_directory's two renames leaves: no export, the old one aside.
    make_dir(tmp_path / ".export.old-abc123" / "previous", "old")
    assert files.recover_directory(str(tmp_path / "export"))
    assert (tmp_path / "export" / "file").read_text() == "old"
    assert not files.recover_directory(str(tmp_path / "export"))  # there already: nothing to do


def test_once_fixed_names_what_must_change():
    assert files.once_fixed(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) == "once there is room"
    assert files.once_fixed(OSError(errno.EROFS, os.strerror(errno.EROFS))) == "once it is writable"
    assert files.human_bytes(1536) == "1.5 KB" and files.human_bytes(512) == "512 bytes"


def test_listing_shows_the_first_names_sorted():
    assert files.listing({"c", "a", "b"}) == "a, b, c"
    assert files.listing([str(i) for i in range(7)]) == "0, 1, 2, 3, 4, ..."


# -- write_json: a write that fails leaves no file, no temporary ----------------------------------

class FailingFile:
    """A real file whose writes stop with `error` once `budget` characters are in it: a disk that
    fills midway through the JSON."""

    def __init__(self, f, budget, error):
        self.f, self.budget, self.error = f, budget, error

    def write(self, text):
        if len(text) > self.budget:
            self.f.write(text[: self.budget])
            self.f.flush()  # the half really reaches the temporary file
            raise self.error
        self.budget -= len(text)
        return self.f.write(text)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


OBJ = {"loss": [3.0, 2.5, 2.0], "run": "a run", "steps": 144}
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_midway(monkeypatch):
    """`open` in tfattn.files gives a file that fills up after 20 characters."""
    real_open = open
    monkeypatch.setattr(files, "open", lambda *a, **k: FailingFile(real_open(*a, **k), 20, ENOSPC), raising=False)


def fail_fsync(monkeypatch):
    def fsync(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)


def fail_rename(monkeypatch):
    def replace(src, dst):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("fault, reason", [(fail_midway, "No space left on device"),
                                           (fail_fsync, "Input/output error"),
                                           (fail_rename, "Invalid cross-device link")])
@pytest.mark.parametrize("before", [None, '{"old": true}'])
def test_a_json_write_that_fails_leaves_no_file_and_no_temporary(tmp_path, monkeypatch, fault, reason, before):
    path = tmp_path / "history.json"
    if before is not None:
        path.write_text(before, encoding="utf-8")
    fault(monkeypatch)
    with pytest.raises(files.WriteError) as raised:
        files.write_json(path, OBJ)
    assert str(raised.value).startswith(f"could not write history.json to {tmp_path}: {reason}; ")
    assert str(raised.value).endswith(" free there.")
    if before is None:
        assert os.listdir(tmp_path) == []  # no file, no history.json.tmp
    else:
        assert os.listdir(tmp_path) == ["history.json"] and path.read_text(encoding="utf-8") == before
    monkeypatch.undo()
    files.write_json(path, OBJ)  # and the same write succeeds once the fault is gone
    assert json.loads(path.read_text(encoding="utf-8")) == OBJ and os.listdir(tmp_path) == ["history.json"]


def test_a_json_write_to_a_full_file_system_leaves_no_file_and_no_temporary(tmp_path):
    """The real thing, where this process may mount a 64 KB tmpfs (root); skipped elsewhere."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the monkeypatched faults above cover the same code")
    try:
        big = {"loss": [0.123456789] * 20_000}  # some 340 KB of JSON
        with pytest.raises(files.WriteError, match=r"could not write big\.json to .*: No space left on device"):
            files.write_json(disk / "big.json", big)
        assert os.listdir(disk) == []
        files.write_json(disk / "small.json", OBJ)  # the space the failed write took is free again
        assert json.loads((disk / "small.json").read_text(encoding="utf-8")) == OBJ
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_an_unserializable_object_leaves_no_temporary(tmp_path):
    with pytest.raises(TypeError, match="not JSON serializable"):
        files.write_json(tmp_path / "history.json", {"loss": 1.0, "model": object()})
    assert os.listdir(tmp_path) == []


def refuse_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def test_a_value_that_is_not_finite_is_written_as_null(tmp_path):
    obj = {"loss": [1.5, float("nan")], "best": float("inf"), "low": -float("inf"), "n": 3, "x": (0.5,)}
    files.write_json(tmp_path / "h.json", obj)
    text = (tmp_path / "h.json").read_text()
    assert json.loads(text, parse_constant=refuse_constant) == {"loss": [1.5, None], "best": None, "low": None,
                                                                "n": 3, "x": [0.5]}
    assert json.loads(files.strict_json(obj), parse_constant=refuse_constant)["best"] is None
    json.dumps(json.loads(text), allow_nan=False)  # what a strict writer accepts


# -- an export's entries swapped into a directory that holds other files too ------------------------

def workspace_with(target, entries, dead=False):
    """What `export_workspace` and an export make: a complete new directory in a locked workspace
    (`dead`: in an unlocked one, as a killed export leaves it)."""
    context = files.export_workspace(str(target)) if not dead else contextlib.nullcontext()
    if dead:
        work, real = str(target / (files.EXPORT_WORK + "killed")), str(target)
    else:
        work, real = context.__enter__()
    new = os.path.join(work, "new")
    os.makedirs(os.path.join(new, "variables"))
    for name, text in entries.items():
        with open(os.path.join(new, name), "w") as f:
            f.write(text)
    return context, work, real, new


def make_export(path, text):
    os.makedirs(path / "variables", exist_ok=True)
    for name in ("saved_model.pb", "fingerprint.pb", "variables/v"):
        (path / name).write_text(text)


def test_a_swap_keeps_the_files_it_does_not_write(tmp_path):
    make_export(tmp_path / "proj", "old")
    (tmp_path / "proj" / "NOTES.md").write_text("notes")
    context, work, real, new = workspace_with(tmp_path / "proj", {"saved_model.pb": "new", "variables/v": "new"})
    files.swap_in(work, real, new, retire=("saved_model.pb", "variables", "fingerprint.pb"))
    context.__exit__(None, None, None)
    proj = tmp_path / "proj"
    assert sorted(os.listdir(proj)) == ["NOTES.md", "saved_model.pb", "variables"]  # the old fingerprint retired
    assert (proj / "saved_model.pb").read_text() == "new" == (proj / "variables" / "v").read_text()
    assert (proj / "NOTES.md").read_text() == "notes"


def test_a_symlinked_directory_is_written_through(tmp_path):
    make_export(tmp_path / "v3", "old")
    os.symlink("v3", tmp_path / "current")
    context, work, real, new = workspace_with(tmp_path / "current", {"saved_model.pb": "new"})
    assert real == str(tmp_path / "v3")
    files.swap_in(work, real, new)
    context.__exit__(None, None, None)
    assert os.readlink(tmp_path / "current") == "v3" and (tmp_path / "v3" / "saved_model.pb").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["current", "v3"]


@pytest.mark.parametrize("renames", range(5))  # of the 5: fingerprint.pb out, 2 for each entry
def test_a_swap_cut_by_a_kill_is_finished_by_recover_export(tmp_path, monkeypatch, renames):
    # A kill after `renames` renames of the swap: the journal says what is left to do.
    make_export(tmp_path / "e", "old")
    (tmp_path / "e" / "notes").write_text("mine")
    _, work, real, new = workspace_with(tmp_path / "e", {"saved_model.pb": "new", "variables/v": "new"}, dead=True)
    real_rename, done = os.rename, []

    def killed_after(src, dst):
        if len(done) == renames:
            raise KeyboardInterrupt  # stands for the kill: nothing after it runs
        done.append(dst)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", killed_after)
    with pytest.raises(KeyboardInterrupt):
        files.swap_in(work, real, new, retire=("fingerprint.pb",))
    monkeypatch.undo()
    assert files.recover_export(str(tmp_path / "e")).startswith("finished the export")
    e = tmp_path / "e"
    assert sorted(os.listdir(e)) == ["notes", "saved_model.pb", "variables"]  # no workspace left
    assert (e / "saved_model.pb").read_text() == "new" == (e / "variables" / "v").read_text()


def test_recover_export_removes_dead_workspaces_and_leaves_live_ones(tmp_path):
    make_export(tmp_path / "e", "old")
    dead = tmp_path / "e" / (files.EXPORT_WORK + "dead")
    os.makedirs(dead / "vocabulary")
    (dead / "vocabulary" / "source_vocab.txt").write_text("a\n")  # what a kill while writing leaves
    live = files.export_workspace(str(tmp_path / "e"))
    work, _ = live.__enter__()
    assert files.recover_export(str(tmp_path / "e")) == "removed 1 workspace of killed exports"
    assert sorted(os.listdir(tmp_path / "e")) == sorted(["fingerprint.pb", "saved_model.pb", "variables",
                                                         os.path.basename(work)])  # the live one stays
    live.__exit__(None, None, None)
    assert sorted(os.listdir(tmp_path / "e")) == ["fingerprint.pb", "saved_model.pb", "variables"]
    assert files.recover_export(str(tmp_path / "e")) == ""


def test_an_export_left_aside_by_an_earlier_version_is_put_back_whole(tmp_path):
    make_dir(tmp_path / ".export.old-abc123" / "previous", "old")
    assert files.recover_export(str(tmp_path / "export")).startswith("put back the export")
    assert sorted(os.listdir(tmp_path)) == ["export"]  # the emptied .export.old-* too
