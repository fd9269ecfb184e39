"""Keeps TensorFlow's native start-up lines off the `tfattn` command's terminal.

TensorFlow's C++ libraries write some lines to the process's standard error before its logging is
set up, so `TF_CPP_MIN_LOG_LEVEL` cannot hide them: that oneDNN is on, that no CUDA driver was
found, which CPU instructions the binary was not built for, that a oneDNN kernel falls back to
Eigen. `drop_native_noise()` passes file descriptor 2 through a filter that drops exactly those
lines (`NOISE`) and forwards every other one, while Python's `sys.stderr` keeps writing to the
terminal directly, so no message of tfattn's, no traceback and no other native line is held back.
`TFATTN_NATIVE_LOGS=1` leaves standard error untouched.
"""

import atexit
import os
import re
import sys
import threading

NOISE = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|^[IWE]\d{4} [\d:. ]+\d+ (port\.cc|cudart_stub\.cc|cuda_platform\.cc|cuda_executor\.cc|cuda_diagnostics\.cc"
    rb"|cpu_feature_guard\.cc|util\.cc):\d+\] "
    rb"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"
)


def drop_native_noise():
    """Filters `NOISE` out of the native writes to standard error, for the rest of the process.

    Call it before TensorFlow loads. Returns False (and changes nothing) when `TFATTN_NATIVE_LOGS`
    is set or it ran already."""
    if os.environ.get("TFATTN_NATIVE_LOGS") or getattr(drop_native_noise, "installed", False):
        return False
    drop_native_noise.installed = True
    sys.stderr.flush()
    terminal = os.dup(2)
    sys.stderr = open(terminal, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                      errors="backslashreplace", closefd=False)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    forwarder = threading.Thread(target=_forward, args=(read, terminal), name="tfattn-stderr", daemon=True)
    forwarder.start()

    def finish():  # the pipe's last writer goes: the forwarder reads to its end and stops
        os.dup2(terminal, 2)
        forwarder.join(timeout=2.0)

    atexit.register(finish)
    return True


def _forward(read, terminal):
    with open(read, "rb") as pipe:
        for line in iter(pipe.readline, b""):
            if not NOISE.search(line):
                os.write(terminal, line)
