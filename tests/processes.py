"""`tfattn` in child processes that stop at a point of their run the test names, and read their logs.

A fault (a signal, a full disk, a read-only directory) is injected while the child is stopped at a
step it reported itself, never after a sleep, so a test does not depend on how fast the machine is.
"""

import json
import os
import subprocess
import sys
import time

import pytest

# No BLEU validation (a later --bleu-sample N turns it on): the tests of validation ask for it.
# Bahdanau, the smallest model, rather than the default recipe (4-head Luong whose 1,000 warm-up
# steps would leave a test's few steps at a rate near 0); a later --attention replaces it.
TRAIN_FLAGS = ["--attention", "bahdanau", "--units", "32", "--embedding-dim", "16", "--batch-size", "8",
               "--no-bucket", "--tokenizer", "char", "--max-length", "40", "--learning-rate", "0.003",
               "--checkpoint-every", "10", "--quiet", "--bleu-sample", "0"]


def write_anki(path, n, seed=0):
    """An Anki-format file: English (here the ISO date) <TAB> other language (the written date)."""
    from tfattn.data import dates

    pairs = dates.generate(n, seed=seed)
    path.write_text("".join(f"{iso}\t{text}\n" for text, iso in pairs), encoding="utf-8")
    return pairs


def tfattn(*args, **kwargs):
    """`tfattn ARGS` in a child process (text stdout and stderr piped)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-m", "tfattn.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kwargs)


def events(run, kind):
    """The records of `kind` ("checkpoint", "epoch", "end", ...) in `run`'s log.jsonl."""
    path = os.path.join(run, "log.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == kind]


# The child stops itself (SIGSTOP) at the point given as `step:STEP` (right after training step STEP
# and its checkpoint, if one was due), `save:STEP` (right after a checkpoint of step STEP is saved,
# by either checkpoint manager), `log:EVENT:STEP` (right after the line of EVENT at STEP is
# written to log.jsonl), or in the setup, before the first step, `setup:corpus` (right after the
# corpus is read) or `setup:config` (right after config.json is written). Continued (SIGCONT), it goes on with `then=go`; with
# `then=signal` it waits for the test's signal: SIGKILL ends it there, and a SIGINT sent before
# SIGCONT is pending when it goes on, so its KeyboardInterrupt comes before anything else.
STOPPING_CHILD = """
import os, signal, sys, time
# As `tfattn` starts from a shell, whatever signal state the test runner's process left to inherit
# (an ignored or blocked SIGINT would never raise KeyboardInterrupt here).
inherited = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
signal.signal(signal.SIGINT, signal.default_int_handler)
import tensorflow as tf
from tfattn import cli
from tfattn.runs import directory, saving, train

where, then, stopped = sys.argv.pop(1).split(":"), sys.argv.pop(1), []

def stop():
    stopped.append(where)
    os.kill(os.getpid(), signal.SIGSTOP)
    if then == "signal":
        for _ in range(6000):  # continued: the test's signal arrives here (at most 60 s)
            time.sleep(0.01)
        sys.exit(f"continued at {where} without a signal (inherited SIGINT state: {inherited})")

after_step, save, log = saving.Saver.after_step, tf.train.CheckpointManager.save, directory.Run.log
load_splits, write_json = train.load_splits, directory.Run.write_json

def corpus_then_stop(*args, **kwargs):
    found = load_splits(*args, **kwargs)
    if where == ["setup", "corpus"] and not stopped:
        stop()
    return found

def write_then_stop(run, name, obj):
    write_json(run, name, obj)
    if where == ["setup", "config"] and name == "config.json" and not stopped:
        stop()

def step_then_stop(saver, *args):
    after_step(saver, *args)
    if where == ["step", str(saver.trainer.step)] and not stopped:
        stop()

def save_then_stop(manager, *args, **kwargs):
    path = save(manager, *args, **kwargs)
    if where == ["save", str(kwargs.get("checkpoint_number"))] and not stopped:
        stop()
    return path

def log_then_stop(run, **record):
    log(run, **record)
    if where == ["log", record["event"], str(record["step"])] and not stopped:
        stop()

saving.Saver.after_step, tf.train.CheckpointManager.save, directory.Run.log = (step_then_stop, save_then_stop,
                                                                       log_then_stop)
train.load_splits, directory.Run.write_json = corpus_then_stop, write_then_stop
sys.exit(cli.main())
"""


def tfattn_stopping_at(where, *args, then="signal"):
    """`tfattn ARGS` in a child that stops at `where`: `"step:STEP"`, `"save:STEP"`, `"log:EVENT:STEP"`,
    `"setup:corpus"` or `"setup:config"`."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-c", STOPPING_CHILD, where, then, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def tfattn_stopping_after(step, *args):
    """`tfattn ARGS` in a child that stops right after training step `step`, for the test's signal."""
    return tfattn_stopping_at(f"step:{step}", *args)


def wait_until_stopped(proc, timeout=900):
    """Returns once the child has stopped itself; fails with its stderr if it exits instead. The
    timeout only guards against a hang: the child waits for the test, never the other way round."""
    deadline = time.monotonic() + timeout
    while True:
        # WNOWAIT leaves the child's state to be collected again by `proc.wait()` later.
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the child did not stop within {timeout} s: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    if info.si_code != os.CLD_STOPPED:
        pytest.fail(f"the child ended before its step: {proc.communicate()[1][-2000:]}")
