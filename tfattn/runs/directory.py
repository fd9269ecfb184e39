"""The run directory: its files, who may write them, and checkpoints that may be damaged.

    RUN/
      .lock             while a process trains the run: its pid, host and start time
      config.json       the final RunConfig (flags applied; the corpus's absolute path and fingerprint)
      tokenizers.json   both tokenizers, vocabularies included (a resumed run reuses them)
      checkpoints/      the latest states: every `checkpoint_every` steps, at every epoch's end, at
                        the end and on Ctrl-C or SIGTERM (model, optimizer, epoch, data position, epoch sums, history)
      best/             the state with the lowest validation loss
      log.jsonl         one JSON line per checkpoint and per epoch
      history.json      per-epoch loss, accuracy, validation loss and accuracy, tokens/s
      export/           the SavedModel of the best state, written at the end

One process at a time: `Run.claim` takes `RUN/.lock` (an exclusive `flock`, which the system
releases when the process dies however it dies) before anything is read or written, and a second
process is refused with the holder's pid and host. A lock left by a dead process is taken over, and
said so. A new run needs a new or empty directory; a resumed one needs a run.

Checkpoints are read back by `Run.checkpoint_files` and `damage_of`: a resumed run goes on from the
newest state that reads back whole, in `checkpoints/` or `best/`, and names any newer one it skips.
"""

import contextlib
import datetime
import fcntl
import glob
import json
import os
import re
import socket
import time

from tfattn import files

LOCK = ".lock"
# Files a run writes before its config.json: a directory holding only these is a run that never
# started (killed while it tokenized), and a new run may use it.
SETUP_FILES = {LOCK, "tokenizers.json", "tokenizers.json.tmp", "config.json.tmp"}


class RunInUseError(FileExistsError):
    """Another process holds the run directory's lock."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a run trained (docker stop, systemd, `timeout`, SLURM): the run saves its
    state as on Ctrl-C, and the command line exits with status 143."""


class Run:
    """A run directory: paths, its JSON files, its lock and its checkpoint files."""

    def __init__(self, out):
        self.out = os.fspath(out)

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def exists(self):
        return os.path.exists(self.path("config.json"))

    def write_json(self, name, obj):
        files.write_json(self.path(name), obj)

    def read_json(self, name):
        try:
            with open(self.path(name), encoding="utf-8") as f:
                return json.load(f)
        except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"{self.path(name)} is damaged, not JSON ({error}). Received: out={self.out!r}") from None

    def log(self, **record):
        files.append_line(self.path("log.jsonl"), files.strict_json(record), "the run's log")

    def tokenizers(self):
        """The run's source and target tokenizers, from `tokenizers.json`; one clear error if it is
        missing or is not what the run wrote."""
        from tfattn.data.text import Tokenizer

        path = self.path("tokenizers.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} is missing: it holds the run's two vocabularies, written when training "
                                    f"started, and its checkpoints need them. Put it back, or train a new run. "
                                    f"Received: out={self.out!r}")
        d = self.read_json("tokenizers.json")
        try:
            return Tokenizer.from_config(d["source"]), Tokenizer.from_config(d["target"])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{path} is not the run's tokenizers (its source and target vocabularies): "
                             f"{type(error).__name__}: {error}. Received: out={self.out!r}") from None

    @contextlib.contextmanager
    def claim(self, resume=False, echo=print):
        """Holds the run's lock while the block runs; refuses a directory that is not what is asked.

        A new run (`resume=False`) needs `out` absent or empty; `resume=True` needs a run in it.
        A directory this call creates is removed again if the block leaves it empty.

        Raises:
            RunInUseError: another live process holds the lock (the message names it).
            FileExistsError, FileNotFoundError, NotADirectoryError: `out` is not what is asked.
        """
        _Lock(self.path(LOCK)).refuse_if_held(self.out)  # a run in progress says so first
        self._check(resume)  # a clear error before anything is created
        created = not os.path.exists(self.out)
        try:
            os.makedirs(self.out, exist_ok=True)
        except OSError as error:
            raise files.write_error("the run directory", self.out, error) from None
        lock = _Lock(self.path(LOCK))
        try:
            lock.acquire(self.out, echo)
            self._check(resume)  # again, now that no other process can change it
            if resume:
                self.remove_litter()
                cut_partial_line(self.path("log.jsonl"), echo)
            yield self
        finally:
            lock.release()
            if created:
                with contextlib.suppress(OSError):
                    os.rmdir(self.out)  # only if the block left it empty

    def _check(self, resume):
        out = self.out
        if os.path.lexists(out) and not os.path.isdir(out):
            raise NotADirectoryError(f"--out {out} is a file; a run directory is expected. Received: out={out!r}")
        entries = set(os.listdir(out)) if os.path.isdir(out) else set()
        if "saved_model.pb" in entries:
            raise FileExistsError(f"{out} holds a SavedModel export, not a run; training into it would leave the "
                                  f"old model where `translate` finds it. Choose a new --out. Received: out={out!r}")
        if resume and "config.json" not in entries:
            raise FileNotFoundError(f"No run to resume in {out} (no config.json). Received: out={out!r}")
        if not resume and "config.json" in entries:
            raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another "
                                  f"--out. Received: out={out!r}")
        if not resume and entries - SETUP_FILES:
            raise FileExistsError(f"{out} is not empty and is not a run (it holds {files.listing(entries)}); a new "
                                  f"run needs a new or empty directory. Received: out={out!r}")

    def remove_litter(self):
        """Removes what an interrupted write left: `*_temp` checkpoint shards, `*.tmp*` files, and
        the hidden `.export.tmp-*` / `.export.old-*` directories of an export (after putting back
        an export that a kill left aside)."""
        files.recover_directory(self.path("export"))
        patterns = ("*.tmp", ".*.tmp-*", ".*.old-*", "*/*_temp*", "*/*.tmp*", "*/checkpoint.tmp*")
        files.remove_all({p for pattern in patterns for p in glob.glob(self.path(pattern))})

    def checkpoint_files(self):
        """Every checkpoint of the run as `(step, path)`, newest first (`best/` before `checkpoints/`
        at the same step: `best/` is saved at an epoch's end, `checkpoints/` may hold the same step
        saved after the epoch's last batch, before validation)."""
        found = []
        for rank, folder in enumerate(("best", "checkpoints")):
            for index in glob.glob(self.path(folder, "ckpt-*.index")):
                match = re.fullmatch(r"ckpt-(\d+)\.index", os.path.basename(index))
                if match:
                    found.append((-int(match[1]), rank, index[: -len(".index")]))
        return [(-step, path) for step, _, path in sorted(found)]


def cut_partial_line(path, echo=print):
    """Cuts the half line a kill in mid-write left at the end of `path` (a JSON-lines log), so that
    the next line appended starts a line of its own; says so through `echo`."""
    try:
        with open(path, "rb+") as f:
            data = f.read()  # a line per checkpoint and per epoch: small
            if not data or data.endswith(b"\n"):
                return
            f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        return
    except OSError as error:
        raise files.write_error("the run's log", path, error) from None
    echo(f"{path} ended in half a line (a kill while it was written): cut it off")


def remove_failed_save(directory, step):
    """Removes what a failed save of `ckpt-STEP` wrote: its temporary files, and its checkpoint files
    unless they read back whole (the save can fail after writing them, on the manager's own
    `checkpoint` file)."""
    prefix = os.path.join(directory, f"ckpt-{step}")
    complete = os.path.exists(prefix + ".index") and damage_of(prefix) is None
    files.remove_all(glob.glob(glob.escape(prefix) + ("_*" if complete else "[._]*")))
    files.remove_all(glob.glob(os.path.join(glob.escape(directory), "checkpoint.tmp*")))


def damage_of(path):
    """Why the checkpoint at `path` cannot be read back whole (every tensor is read, so truncated
    or overwritten files show up here); None if it can."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError, OSError) as error:
        return files.reason_of(error)
    return None


def newest_readable(paths, echo=print):
    """The first of `paths` (checkpoint prefixes, newest first) that reads back whole, naming each
    one skipped and why through `echo`; None if `paths` is empty.

    Raises:
        ValueError: if none of them reads back.
    """
    for path in paths:
        problem = damage_of(path)
        if problem is None:
            return path
        echo(f"skipping the checkpoint {path}: it does not read back ({problem})")
    if paths:
        raise ValueError(f"No checkpoint reads back whole (the {len(paths)} named above); train the run again "
                         f"into a new --out. Received: newest={paths[0]!r}")
    return None


def checkpoint_present(path):
    """Whether the checkpoint `path` (`.../ckpt-N`) still has its index and data files."""
    return os.path.exists(path + ".index") and bool(glob.glob(glob.escape(path) + ".data-*"))


def step_of(path):
    """The step a checkpoint path names: `"1200"` for `.../ckpt-1200`."""
    return os.path.basename(path).removeprefix("ckpt-")


class _Lock:
    """An exclusive `flock` on a file that records its holder."""

    def __init__(self, path):
        self.path, self.fd = path, None

    def acquire(self, out, echo):
        while self.fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:  # a directory this process may not write
                raise files.write_error("the run's lock", self.path, error) from None
            try:
                _lock_or_refuse(fd, out, tries=20)
            except RunInUseError:
                os.close(fd)
                raise
            if _same_file(fd, self.path):  # else the holder removed it between our open and flock
                self.fd = fd
            else:
                os.close(fd)
        previous = _holder(self.fd)
        if previous:
            echo(f"taking over the lock of {_describe(previous)}, which no longer holds it")
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.datetime.now().isoformat(timespec="seconds")}
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(me).encode(), 0)

    def refuse_if_held(self, out):
        """Raises `RunInUseError` if a live process holds the lock; creates nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # no lock file (or none readable): nobody holds it
            return
        try:
            _lock_or_refuse(fd, out, shared=True)  # a shared lock: other probes pass, and NFS allows it read-only
        finally:
            os.close(fd)  # lets go of the lock too

    def release(self):
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.remove(self.path)  # removed while held, so nobody takes a lock being let go
            os.close(self.fd)
            self.fd = None


def _lock_or_refuse(fd, out, shared=False, tries=1):
    """Takes the lock on `fd` (exclusive unless `shared`), or raises `RunInUseError` naming the live
    process that holds it. `tries` > 1 waits out another process's probe, which holds a shared lock
    for a moment."""
    for attempt in range(tries):
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(0.01)
        except OSError as error:  # e.g. ENOLCK on a network file system without locks
            raise OSError(f"cannot lock {out} ({error.strerror}): its file system does not take locks; choose an "
                          f"--out on a local disk. Received: out={out!r}") from None
    raise RunInUseError(f"{out} is in use by {_describe(_holder(fd))}; wait for it to end, or choose another "
                        f"--out. Received: out={out!r}")


def _holder(fd):
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"null")
    except ValueError:
        return {}


def _describe(holder):
    if not holder:
        return "another process (which has not written its pid yet)"
    return f"pid {holder.get('pid')} on {holder.get('host')} (since {holder.get('since')})"


def _same_file(fd, path):
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False
