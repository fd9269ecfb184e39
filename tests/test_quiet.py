"""The `tfattn` command keeps TensorFlow's native start-up lines off standard error (`tfattn.quiet`),
and nothing else: tfattn's own lines, errors and other native lines still reach it."""

import os
import subprocess
import sys

import pytest

from tfattn.quiet import NOISE

# Lines as TensorFlow 2.20-2.21 print them on a CPU machine before its logging is set up.
STARTUP = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1795646628.653548    6715 port.cc:153] oneDNN custom operations are on. You may see "
    b"slightly different numerical results due to floating-point round-off errors.\n",
    b"I0000 00:00:1795646628.653909    6715 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    b"GPU will not be used.\n",
    b"E0000 00:00:1795646632.455883    6715 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n",
    b"E0000 00:00:1795646634.010658    6715 util.cc:131] oneDNN supports DT_BOOL only on platforms with "
    b"AVX-512. Falling back to the default Eigen-based implementation if present.\n",
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with "
    b"the appropriate compiler flags.\n",
]
KEPT = [
    b"E0000 00:00:1795646634.010658    6715 op_kernel.cc:1857] OP_REQUIRES failed at save_restore_v2_ops.cc\n",
    b"tfattn: error: --units must be a positive int\n",
    b"Traceback (most recent call last):\n",
    b"epoch 1: loss 6.4095 accuracy 0.0499\n",
]


@pytest.mark.parametrize("line", STARTUP, ids=range(len(STARTUP)))
def test_the_start_up_lines_are_noise(line):
    assert NOISE.search(line)


@pytest.mark.parametrize("line", KEPT, ids=range(len(KEPT)))
def test_other_lines_are_kept(line):
    assert not NOISE.search(line)


def run_tfattn(tmp_path, *args, native_logs=False):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TFATTN_NATIVE_LOGS")}
    if native_logs:
        env["TFATTN_NATIVE_LOGS"] = "1"
    return subprocess.run([sys.executable, "-m", "tfattn.cli", *args], capture_output=True, env=env,
                          cwd=tmp_path, timeout=300)


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_the_command_shows_its_own_lines_and_errors_but_not_the_start_up_lines(tmp_path):
    """`tfattn export` of a directory that is no run imports TensorFlow (which prints its start-up
    lines), then fails with its own one-line error; with `TFATTN_NATIVE_LOGS=1` the start-up lines show."""
    (tmp_path / "nowhere").mkdir()
    args = ("export", "--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    raw = run_tfattn(tmp_path, *args, native_logs=True)
    if not any(NOISE.search(line + b"\n") for line in raw.stderr.splitlines()):
        pytest.skip("this TensorFlow build prints no start-up line to filter")
    quiet = run_tfattn(tmp_path, *args)
    assert quiet.returncode == raw.returncode == 2
    assert [line for line in quiet.stderr.splitlines() if NOISE.search(line + b"\n")] == []
    errors = [line for line in quiet.stderr.splitlines() if line.startswith(b"tfattn: error:")]
    assert len(errors) == 1 and b"nowhere" in errors[0], quiet.stderr.decode(errors="replace")
