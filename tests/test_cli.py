"""The `tfattn` command line, run as a user would: a subprocess, its output and exit status."""

import json
import os
import subprocess
import sys

import pytest


def tfattn(*args, stdin=None, cwd=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "tfattn.cli", *args], input=stdin, capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)


def test_help_lists_the_commands():
    result = tfattn("--help")
    assert result.returncode == 0
    for command in ("demo", "translate"):
        assert command in result.stdout


def test_translate_a_missing_model_is_one_clear_line(tmp_path):
    result = tfattn("translate", "--model", str(tmp_path / "nowhere"), "hola")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tfattn: error: Not an export or a run directory with an export (no saved_model.pb in it or in its "
        f"export/). Received: model={str(tmp_path / 'nowhere')!r}"
    ]


def test_translate_arguments_and_stdin(exported_dates, tmp_path):
    by_args = tfattn("translate", "--model", exported_dates, "5 march 2019", "tue 5 mar 2019",
                     "--plot", str(tmp_path / "a.png"))
    assert by_args.returncode == 0, by_args.stderr
    assert len(by_args.stdout.splitlines()) == 2
    assert (tmp_path / "a.png").stat().st_size > 0
    by_stdin = tfattn("translate", "--model", exported_dates, stdin="5 march 2019\ntue 5 mar 2019\n")
    assert by_stdin.stdout == by_args.stdout


def test_translate_with_threads_sets_them_and_translates_the_same(exported_dates):
    # In a fresh process, as the command runs: the counts reach TensorFlow, the outputs do not change.
    script = ("import sys, tensorflow as tf; from tfattn.cli import main; main(sys.argv[1:]); "
              "print(tf.config.threading.get_inter_op_parallelism_threads(), "
              "tf.config.threading.get_intra_op_parallelism_threads())")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = lambda *flags: subprocess.run(  # noqa: E731
        [sys.executable, "-c", script, "translate", "--model", exported_dates, "5 march 2019", *flags],
        capture_output=True, text=True, env=env, timeout=600)
    default, one_per_op = run(), run("--threads", "2,1")
    assert default.returncode == 0 and one_per_op.returncode == 0, one_per_op.stderr
    assert default.stdout.splitlines()[-1] == "0 0"
    assert one_per_op.stdout.splitlines()[-1] == "2 1"
    assert one_per_op.stdout.splitlines()[0] == default.stdout.splitlines()[0]


@pytest.mark.parametrize("value", ["2", "2,x", "-1,1", "1,2,3"])
def test_threads_takes_two_counts(value):
    result = tfattn("translate", "--model", "any", f"--threads={value}", "hola")  # parsed before any use
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--threads" in result.stderr and "expected two counts >= 0 as INTER,INTRA" in result.stderr


def test_threads_after_tensorflow_started_is_a_clear_error():
    import tensorflow as tf

    from tfattn.cli import set_threads

    tf.constant(1.0) + 1.0  # TensorFlow runs an op: its thread pools exist from now on
    with pytest.raises(ValueError, match="--threads must be set before TensorFlow runs anything"):
        set_threads((2, 1))


def test_demo_trains_exports_reloads_and_reports(tmp_path):
    result = tfattn("demo", "--n-train", "1500", "--n-test", "40", "--epochs", "1", "--out-dir",
                    str(tmp_path), "--quiet", "--attention", "bahdanau")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"exact_match", "export", "plot", "seconds"} <= set(summary)
    assert 0.0 <= summary["exact_match"] <= 1.0
    assert summary["export"] == str(tmp_path / "dates-bahdanau")
    assert os.path.exists(os.path.join(summary["export"], "saved_model.pb"))
    assert os.path.getsize(summary["plot"]) > 0
    assert len(result.stdout.strip().splitlines()) == 1 + 5  # five example translations, then the JSON


@pytest.mark.parametrize("flag, value", [("--attention", "nope"), ("--epochs", "two")])
def test_bad_flag_values_exit_2(flag, value):
    result = tfattn("demo", flag, value)
    assert result.returncode == 2 and "invalid" in result.stderr


@pytest.mark.parametrize("value, expected", [(None, None), ("float32", None), ("bfloat16", "bfloat16")])
def test_train_flags_set_the_projection_dtype(value, expected, tmp_path):
    from tfattn.cli import build_parser, run_config

    flags = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")]
    args = build_parser().parse_args(flags + (["--projection-dtype", value] if value else []))
    assert run_config(args).model.projection_dtype == expected
