"""Writing files so that a failure never leaves a half-written one in place.

Runs and exports are written by the rules below, so that a kill, a full disk or a directory that
turns read-only costs at most the file being written:

- A small file (JSON) is written beside its place and renamed over it (`write_json`); a line is
  appended whole or not at all (`append_line`).
- A directory (an export) is written whole into a hidden temporary directory beside its place and
  then swapped in (`replace_directory`): the place holds the old complete directory or the new one.
  An export into a directory that may hold other files is written whole into a locked workspace
  inside it and its entries then swapped in by a journal (`export_workspace`, `swap_in`), so that
  the other files stay; a kill leaves what `recover_export` finishes or removes. The swap holds the
  directory's exclusive lock and a reader its shared one (`reading_export`), so a reader loads the
  old export or the new one, never half of each.
- A write that fails raises `WriteError`: one line that says what could not be written, where,
  why, and how much space is free there (`write_error`).
"""

import contextlib
import errno
import fcntl
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


def strict_json(obj, **kwargs):
    """`json.dumps` of `obj` as strict JSON: a float that is not finite (NaN, infinity) becomes `null`."""
    return json.dumps(_finite_or_null(obj), allow_nan=False, **kwargs)


def _finite_or_null(obj):
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, dict):
        return {key: _finite_or_null(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(value) for value in obj]
    return obj


def write_json(path, obj):
    """Writes `obj` as strict JSON (`strict_json`) to `path` through a temporary file renamed over it
    (never half a file). An object that is not JSON raises `TypeError` before anything is written."""
    write_text(path, strict_json(obj, indent=2, ensure_ascii=False))


def write_text(path, text, what=None):
    """Writes `text` as UTF-8 to `path` through a temporary file renamed over it (never half a file);
    a failed write raises `WriteError` naming `what` (default: the file's name)."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename, so that a power cut leaves one or the other
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise write_error(what or os.path.basename(path), os.path.dirname(path) or ".", error) from None


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
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(aside[0]))  # the `.NAME.old-*` it was in, empty now
    return True


# -- an export written into a directory that may hold other files -----------------------------------
#
# `export_workspace` makes a private directory `.tfattn-export.tmp-*` inside the export directory
# (so that renames out of it stay on one file system), locked by its maker (`flock`, which the
# system lets go when the process dies, however it dies). The export is written whole there;
# `swap_in` then writes a journal naming the entries to put in place and renames each old entry of
# those names into the workspace, each new one into the directory. Files of other names are kept.
# `recover_export` finishes a journaled swap whose maker died and removes a dead workspace: its
# lock, free, proves that no process writes it.

EXPORT_WORK = ".tfattn-export.tmp-"
JOURNAL = "swap.json"
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # file systems without flock (some NFS)


def _lock(directory, block=True):
    """An fd of `directory` holding an exclusive `flock` on it; None if another process holds it
    (`block=False`) or, without `block`, if its file system takes no locks (nothing is proved)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except OSError as error:
        if block and error.errno in NO_LOCKS:
            return fd  # unlocked: the export goes on, and nothing else ever removes its workspace
        os.close(fd)
        if isinstance(error, BlockingIOError) or error.errno in NO_LOCKS:
            return None
        raise
    return fd


@contextlib.contextmanager
def reading_export(path):
    """Holds a shared lock on the export directory `path` (through a symlink) while the block reads
    it: `swap_in` puts a new export's entries in place under the exclusive lock, so a reader never
    sees the old graph with the new variables; readers do not wait for one another. Where the file
    system takes no locks, or `path` is not a directory, nothing is held."""
    try:
        fd = os.open(os.path.realpath(path), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError as error:
            if error.errno not in NO_LOCKS:
                raise
        yield
    finally:
        os.close(fd)  # lets go of the lock too


def export_identity(path):
    """What changes when an export at `path` is replaced: its graph's and its variables' index files'
    (inode, size, modification time); None where one is missing."""
    found = []
    for name in ("saved_model.pb", os.path.join("variables", "variables.index")):
        try:
            info = os.stat(os.path.join(path, name))
            found.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            found.append(None)
    return tuple(found)


def _unlock(fd):
    if fd is not None:
        os.close(fd)  # lets go of the flock too


@contextlib.contextmanager
def export_workspace(path):
    """A new workspace for writing an export to `path`: yields `(work, target)`, `target` the
    directory written (`path`, or the directory a symlink `path` points to, which is updated in
    place), `work` a locked private directory inside it, removed at the end with whatever it holds.
    A `target` this call creates is removed again if the block leaves it empty (a failed export)."""
    target = os.path.realpath(path)
    created = not os.path.isdir(target)
    os.makedirs(target, exist_ok=True)
    held, mine = _lock(target), None
    try:
        work = tempfile.mkdtemp(prefix=EXPORT_WORK, dir=target)
        mine = _lock(work)  # under the directory's lock: `recover_export` never sees it unlocked
    finally:
        _unlock(held)
    try:
        yield work, target
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _unlock(mine)
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(target)  # only if the export failed and left it empty


def swap_in(work, target, new, retire=()):
    """Puts each entry of the complete directory `new` (inside `work`) in `target`, in place of the
    entry of that name, and moves the entries named in `retire` out of `target`; other entries of
    `target` stay. The journal written first lets `recover_export` finish a swap that a kill cut."""
    names = sorted(os.listdir(new))
    journal = {"new": os.path.relpath(new, work), "install": names, "retire": sorted(set(retire) - set(names))}
    held = _lock(target)  # readers (`recover_export`) wait the swap out
    try:
        write_json(os.path.join(work, JOURNAL), journal)
        _roll_forward(work, target, journal)
        os.remove(os.path.join(work, JOURNAL))
    finally:
        _unlock(held)


def _roll_forward(work, target, journal):
    """Does what is left of a journaled swap; each step is one rename, so it may be cut and done again."""
    new, old = os.path.join(work, journal["new"]), os.path.join(work, "old")
    os.makedirs(old, exist_ok=True)
    for name in journal["retire"] + journal["install"]:
        here, incoming = os.path.join(target, name), os.path.join(new, name)
        if name in journal["install"] and not os.path.lexists(incoming):
            continue  # in place already
        if os.path.lexists(here):
            os.rename(here, os.path.join(old, name))
        if name in journal["install"]:
            os.rename(incoming, here)


def recover_export(path):
    """Finishes or removes what killed exports left at `path` (through a symlink): puts back an
    export that an earlier version left aside (`recover_directory`), finishes a swap that a kill
    cut (`swap_in`) and removes the workspaces of dead exports. Returns what it did, as a phrase
    for a message ("" if nothing); waits for a live export's swap, leaves its workspace alone."""
    done = ["put back the export that a killed export had moved aside"] if recover_directory(path) else []
    target = os.path.realpath(path)
    works = glob.glob(os.path.join(glob.escape(target), EXPORT_WORK + "*"))
    if not works:
        return "; ".join(done)
    held = _lock(target)
    try:
        for work in works:
            mine = _lock(work, block=False)
            if mine is None:
                continue  # a live export's, or unprovable
            try:
                if os.path.exists(os.path.join(work, JOURNAL)):
                    with open(os.path.join(work, JOURNAL), encoding="utf-8") as f:
                        _roll_forward(work, target, json.load(f))
                    done.append("finished the export that a killed export had begun to put in place")
                shutil.rmtree(work, ignore_errors=True)
            finally:
                _unlock(mine)
        removed = len([w for w in works if not os.path.exists(w)])
        done += [f"removed {removed} workspace{'s' * (removed > 1)} of killed exports"] if removed else []
    finally:
        _unlock(held)
    return "; ".join(done)
