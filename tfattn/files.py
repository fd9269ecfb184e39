"""Writing files so that a failure never leaves a half-written one in place.

Runs and exports are written by the rules below, so that a kill, a full disk or a directory that
turns read-only costs at most the file being written:

- A small file (JSON) is written beside its place and renamed over it (`write_json`); a line is
  appended whole or not at all (`append_line`).
- A directory (an export) is written whole into a hidden temporary directory beside its place and
  then swapped in (`replace_directory`): the place holds the old complete directory or the new one.
- A write that fails raises `WriteError`: one line that says what could not be written, where,
  why, and how much space is free there (`write_error`).
"""

import contextlib
import errno
import glob
import json
import os
import shutil
import tempfile


class WriteError(OSError):
    """A file or directory could not be written (disk full, read-only, no permission).

    The message is one line for a person; the command line prints it and exits with status 1.
    """


def free_space(path):
    """Free bytes on the file system holding `path` (or its nearest existing parent); None if unknown."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def human_bytes(n):
    """`1536` -> `"1.5 KB"`: bytes in the largest unit that keeps the number at least 1."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def reason_of(error):
    """The part of an `OSError` or TensorFlow error message a person needs, on one line."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    message = str(getattr(error, "message", None) or error).strip().splitlines()
    message = message[0] if message else type(error).__name__
    for known in ("No space left on device", "Permission denied", "Read-only file system", "Disk quota exceeded"):
        if known in message:
            return known
    return message if len(message) <= 200 else message[:200] + "..."


def once_fixed(error):
    """When a failed write can be tried again: "once there is room" or "once it is writable"."""
    full = reason_of(error) in ("No space left on device", "Disk quota exceeded")
    return "once there is room" if full else "once it is writable"


def write_error(what, where, error, advice=""):
    """A `WriteError` for `what` (e.g. "the checkpoint of step 61") that could not go to `where`."""
    free = free_space(where)
    space = f"; {human_bytes(free)} free there" if free is not None else ""
    return WriteError(f"could not write {what} to {where}: {reason_of(error)}{space}.{' ' + advice if advice else ''}")


def write_json(path, obj):
    """Writes `obj` as JSON to `path` through a temporary file renamed over it (never half a file)."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename, so that a power cut leaves one or the other
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise write_error(os.path.basename(path), os.path.dirname(path) or ".", error) from None


def append_line(path, text, what):
    """Appends `text` and a newline to `path` in one write, on disk when it returns; a failed write
    is cut off again, so that the file never ends in half a line."""
    line = (text + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as error:
        raise write_error(what, path, error) from None
    try:
        size = os.fstat(fd).st_size
        if os.write(fd, line) != len(line):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise write_error(what, path, error) from None
    finally:
        os.close(fd)


def remove_all(paths):
    """Removes each of `paths`, file or directory tree, ignoring those already gone."""
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)


def listing(names, most=5):
    """`"a, b, c, ..."`: the first `most` of `names`, sorted, for a message."""
    names = sorted(names)
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def temporary_sibling(path, kind="tmp"):
    """A new hidden directory beside `path`, on the same file system (so renaming it is atomic),
    with the mode a new directory gets (not `mkdtemp`'s 0700, which would stay with it)."""
    parent, name = os.path.split(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    directory = tempfile.mkdtemp(prefix=f".{name}.{kind}-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    return directory


def replace_directory(new, path):
    """Puts the complete directory `new` at `path`, replacing the directory there if any.

    The old directory is renamed aside before `new` is renamed into place and removed after, so
    `path` holds one complete directory or the other. A rename that fails puts the old directory
    back; only a kill between the two renames leaves `path` absent, with the old directory beside
    it as `.NAME.old-*/previous`, which `recover_directory` puts back.
    """
    if not os.path.lexists(path):
        os.rename(new, path)
        return
    old = temporary_sibling(path, "old")
    try:
        os.rename(path, os.path.join(old, "previous"))
    except OSError:
        os.rmdir(old)
        raise
    try:
        os.rename(new, path)
    except OSError:
        os.rename(os.path.join(old, "previous"), path)
        os.rmdir(old)
        raise
    shutil.rmtree(old, ignore_errors=True)


def recover_directory(path):
    """Puts back the directory that a kill inside `replace_directory` left aside, if `path` is
    absent; returns True if it did."""
    parent, name = os.path.split(os.path.abspath(path))
    aside = glob.glob(os.path.join(glob.escape(parent), f".{glob.escape(name)}.old-*", "previous"))
    if os.path.lexists(path) or not aside:
        return False
    os.rename(aside[0], path)
    return True
