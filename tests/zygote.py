"""`tfattn ARGS` as a process of its own, without paying TensorFlow's import each time.

A command run as `python -m tfattn.cli` spends its first seconds importing TensorFlow,
tensorflow-text, Keras and the package. The suite runs the command about fifty times, so each
pytest worker keeps one *zygote*: a process that has imported them (and run no TensorFlow op, so
that no thread pool exists yet) and forks a child per command. The child is a process like the
command's own: its own pid, working directory, standard streams (files), exit status and address
space limit, fresh TensorFlow state (`--threads` still works); only the imports are done already.

What the zygote cannot give, `run` gives by a real `python -m tfattn.cli`: an environment of the
test's own (variables such as TFATTN_ACCEL or KERAS_BACKEND are read at import), and whatever a
test marks `fresh=True` (the start-up lines of TensorFlow, what the command imports).
"""

import io
import json
import os
import subprocess
import sys
import tempfile

ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # the commands' environment, in the zygote and in a fresh process


def run(*args, stdin=None, cwd=None, env=None, text=True, cap=None, fresh=False, timeout=600):
    """`tfattn ARGS` run to its end: a `subprocess.CompletedProcess` (returncode, stdout, stderr).

    Args:
        stdin: str or bytes fed to the command. cwd: its working directory. env: variables added to
            the environment (a fresh process then). text: decode the outputs (as `subprocess.run`'s
            `text=True`). cap: bytes of address space (RLIMIT_AS). fresh: a real new process.
    """
    argv = [sys.executable, "-m", "tfattn.cli", *args]
    if fresh or env:
        limit = (lambda: _limit(cap)) if cap else None
        return subprocess.run(argv, input=stdin, capture_output=True, text=text, cwd=cwd, timeout=timeout,
                              env={**os.environ, **ENV, **(env or {})}, preexec_fn=limit)
    with tempfile.TemporaryDirectory() as folder:
        paths = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        with open(paths["stdin"], "wb") as f:
            f.write(data)
        argv_text = [os.fsdecode(a) for a in args]  # bytes as Python gives a process them: surrogate escapes
        returncode = _zygote().call({"argv": argv_text, "cwd": cwd or os.getcwd(), "cap": cap, **paths}, timeout)
        outputs = [open(paths[name], "rb").read() for name in ("stdout", "stderr")]
    if text:
        outputs = [io.TextIOWrapper(io.BytesIO(b), encoding="utf-8", errors="strict").read() for b in outputs]
    return subprocess.CompletedProcess(argv, returncode, *outputs)


def _limit(cap):
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


class _Zygote:
    """The test side: the zygote process and one request at a time (a JSON line each way)."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**os.environ, **ENV}, text=True)

    def call(self, request, timeout):
        self.process.stdin.write(json.dumps({**request, "timeout": timeout}) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the zygote of the tfattn command ended (status {self.process.poll()})")
        return json.loads(answer)["returncode"]


_one = None


def _zygote():
    global _one
    if _one is None or _one.process.poll() is not None:
        _one = _Zygote()
    return _one


# -- the zygote's side --------------------------------------------------------------------------------

def _serve():
    """Imports what the command imports, then forks one child per request line."""
    import tensorflow  # noqa: F401
    import tensorflow_text  # noqa: F401

    import tfattn.cli  # noqa: F401
    import tfattn.runs.train  # noqa: F401
    import tfattn.serving.translator  # noqa: F401

    requests, answers = sys.stdin.buffer, sys.stdout
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        answers.write(json.dumps({"returncode": _wait(pid, request["timeout"])}) + "\n")
        answers.flush()


def _child(request):
    """Becomes the command: streams, directory, limit, then `tfattn.cli`'s entry; exits with its status."""
    status = 1
    try:
        for fd, (path, mode) in enumerate([(request["stdin"], os.O_RDONLY),
                                           (request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                           (request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]):
            os.dup2(os.open(path, mode, 0o644), fd)
        sys.stdin = open(0, "r", closefd=False)  # new buffers: none of the zygote's requests
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
        os.chdir(request["cwd"])
        if request["cap"]:
            _limit(request["cap"])
        sys.argv = ["tfattn", *request["argv"]]
        if os.environ.get("TFATTN_TEST_GRAPPLER", "off") == "off":  # as the suite's workers (conftest.py)
            import tensorflow as tf

            tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        from tfattn import cli

        cli.run()  # what `python -m tfattn.cli` runs
        status = 0
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, (int, type(None))):
            print(done.code, file=sys.stderr)
    except BaseException:  # as Python itself would: the traceback on stderr, status 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


def _wait(pid, timeout):
    """The child's exit status (a negative signal number if a signal ended it), as `subprocess` gives it."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


if __name__ == "__main__":
    _serve()
