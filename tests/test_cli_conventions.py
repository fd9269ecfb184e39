"""The command line's conventions: `--version`, `python -m tfattn`, the exit statuses that `--help`
lists, and the progress line of `evaluate` and `translate` on a (fake) terminal."""

import importlib.metadata
import io
import json
import re
import subprocess
import sys

import pytest

from conftest import run_main
from processes import write_anki
from test_progress import FakeTerminal


def python_m_tfattn(*args, flags=()):
    return subprocess.run([sys.executable, *flags, "-m", "tfattn", *args], capture_output=True, text=True,
                          timeout=300)


def test_version_is_the_installed_packages():
    result = python_m_tfattn("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"tfattn {importlib.metadata.version('tfattn')}\n"


def test_python_m_tfattn_is_the_command_and_starts_without_tensorflow():
    # -X importtime lists every module imported, on stderr: --help needs neither TensorFlow nor Keras.
    result = python_m_tfattn("--help", flags=("-X", "importtime"))
    assert result.returncode == 0
    assert "usage: tfattn" in result.stdout and "translate" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "tfattn.cli" in imported
    assert not {"tensorflow", "keras"} & imported


def help_exit_statuses():
    """{status: meaning} from the `exit status:` section of `tfattn --help`."""
    from tfattn.cli import build_parser

    text = build_parser().format_help().split("exit status:\n", 1)[1]
    statuses = {}
    for line in text.splitlines():
        match = re.match(r"\s+(\d+)\s+(.*)", line)
        if match:
            statuses[int(match.group(1))] = match.group(2)
        elif statuses and line.strip():
            last = max(statuses, key=lambda k: list(statuses).index(k))
            statuses[last] += " " + line.strip()
    return statuses


def test_help_lists_the_exit_statuses():
    assert sorted(help_exit_statuses()) == [0, 1, 2, 130, 143]


def raising(error):
    def command(args):
        raise error
    return command


def failure(kind):
    from tfattn.files import WriteError
    from tfattn.runs.directory import Terminated
    from tfattn.training.trainer import DivergedError

    return {"write": WriteError("x"), "memory": MemoryError("x"), "pipe": BrokenPipeError(),
            "missing": FileNotFoundError("x"), "value": ValueError("x"), "diverged": DivergedError("x"),
            "interrupt": KeyboardInterrupt(), "terminated": Terminated()}[kind]


# Each failure, the status `main` returns for it, and a word of that status' line in --help.
@pytest.mark.parametrize("kind, status, word", [
    ("write", 1, "written"), ("memory", 1, "memory"), ("pipe", 1, "pipe"), ("missing", 2, "missing"),
    ("value", 2, "value"), ("diverged", 2, "diverged"), ("interrupt", 130, "Ctrl-C"), ("terminated", 143, "SIGTERM"),
])
def test_each_failure_exits_with_the_status_help_lists(kind, status, word, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("tfattn.cli._plot", raising(failure(kind)))
    if kind == "pipe":  # main points stdout at /dev/null then: a copy of it, not the test's own
        monkeypatch.setattr(sys, "stdout", open(tmp_path / "out", "w"))
    got, _, _ = run_main(capsys, "plot", "--history", "h.json", "--out", "x.png")
    assert got == status
    assert word in help_exit_statuses()[status]


def test_success_is_zero(capsys):
    assert run_main(capsys, "translate", "--help")[0] == 0


def on_a_terminal(monkeypatch):
    """stderr a fake terminal, stdout a file (not a terminal); returns the stderr stream. (Set in the
    test itself: pytest sets its own capturing streams again between a fixture and the test.)"""
    err = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    return err


def progress_line(err):
    return "".join(re.findall(r"\r?\d+(?:/\d+)? sentences\n?", err.getvalue()))


def test_translate_of_stdin_shows_a_count_on_a_terminal(exported_dates, monkeypatch):
    from tfattn.cli import main

    terminal = on_a_terminal(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"5 march 2019\n" * 5)))
    assert main(["translate", "--model", exported_dates, "--batch-size", "2"]) == 0
    assert progress_line(terminal) == "2 sentences\r4 sentences\r5 sentences\n"
    assert len(sys.stdout.getvalue().splitlines()) == 5


@pytest.mark.parametrize("flags", [["--quiet"], ["--quiet", "--progress"]])
def test_quiet_shows_no_progress(exported_dates, monkeypatch, flags):
    from tfattn.cli import main

    terminal = on_a_terminal(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"5 march 2019\n" * 3)))
    assert main(["translate", "--model", exported_dates, *flags]) == 0
    assert "sentences" not in terminal.getvalue()


@pytest.mark.parametrize("asked", [False, True])
def test_evaluate_shows_done_of_total_on_a_terminal_or_when_asked(exported_dates, tmp_path, monkeypatch, asked):
    from tfattn.cli import main

    write_anki(tmp_path / "d.txt", 200)
    err = on_a_terminal(monkeypatch)
    if asked:  # shown on a file too
        monkeypatch.setattr(sys, "stderr", err := io.StringIO())
    flags = ["--progress"] if asked else []
    assert main(["evaluate", "--model", exported_dates, "--corpus", str(tmp_path / "d.txt"), "--split", "train",
                 "--limit", "5", "--batch-size", "2", *flags]) == 0
    assert progress_line(err) == "2/5 sentences\r4/5 sentences\r5/5 sentences\n"


def test_evaluate_into_a_file_shows_no_progress(exported_dates, tmp_path, monkeypatch, capsys):
    write_anki(tmp_path / "d.txt", 200)
    status, out, err = run_main(capsys, "evaluate", "--model", exported_dates, "--corpus", str(tmp_path / "d.txt"),
                                "--split", "train", "--limit", "3")
    assert status == 0 and '"n": 3' in out
    assert "sentences" not in err
    signature = json.loads(out)["signature"]  # sacrebleu's, so that the scores compare with others'
    assert signature["bleu"].startswith("nrefs:1|case:lc|") and "tok:13a" in signature["bleu"]
    assert signature["chrf"].startswith("nrefs:1|case:lc|") and "nc:6" in signature["chrf"]
