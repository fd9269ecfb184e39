"""tfattn.files: writes that fail whole, never half, and directories swapped in place."""

import errno
import os
import stat

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
