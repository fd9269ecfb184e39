"""Writing files so that a failure never leaves a half-written one in place.

Runs and exports are written by the rules below, so that a kill, a full disk or a directory that
turns read-only costs at most the file being written:

- A small file (JSON) is written beside its place and renamed over it (`write_json`).
- A directory (an export) is written whole into a hidden temporary directory beside its place and
  then swapped in (`replace_directory`): the place holds the old complete directory or the new one.
- A write that fails raises `WriteError`: one line that says what could not be written, where,
  why, and how much space is free there (`write_error`).
"""

import contextlib
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
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise write_error(os.path.basename(path), os.path.dirname(path) or ".", error) from None


def temporary_sibling(path, kind="tmp"):
    """A new hidden directory beside `path`, on the same file system (so renaming it is atomic)."""
    parent, name = os.path.split(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f".{name}.{kind}-", dir=parent)


def replace_directory(new, path):
    """Puts the complete directory `new` at `path`, replacing the directory there if any.

    The old directory is renamed aside before `new` is renamed into place and removed after, so
    `path` holds one complete directory or the other; only a kill between the two renames leaves
    `path` absent, with the old directory beside it as `.NAME.old-*`.
    """
    if not os.path.lexists(path):
        os.rename(new, path)
        return
    old = temporary_sibling(path, "old")
    os.rename(path, os.path.join(old, "previous"))
    os.rename(new, path)
    shutil.rmtree(old, ignore_errors=True)
