"""The `tfattn` command line, run as a user would: a subprocess, its output and exit status."""

import json
import os
import subprocess
import sys

import pytest

import zygote
from conftest import run_main, shared_export, tf_default_threads, usable_tfds


def tfattn(*args, stdin=None, cwd=None, env=None, text=True):
    """`tfattn ARGS` in a process of its own (forked from one that imported TensorFlow, `zygote`)."""
    return zygote.run(*args, stdin=stdin, cwd=cwd, env=env, text=text)


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


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_translate_with_threads_sets_them_and_translates_the_same(exported_dates):
    # In a fresh process, as the command runs: the counts reach TensorFlow, the outputs do not change.
    script = ("import sys, tensorflow as tf; from tfattn.cli import main; main(sys.argv[1:]); "
              "print(tf.config.threading.get_inter_op_parallelism_threads(), "
              "tf.config.threading.get_intra_op_parallelism_threads())")
    env = tf_default_threads({**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})  # TensorFlow's own counts by default
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


@pytest.mark.long  # minutes of runs: make test-long
def test_demo_trains_exports_reloads_and_reports(tmp_path):
    result = tfattn("demo", "--n-train", "1500", "--n-validation", "40", "--n-test", "40", "--max-steps", "15",
                    "--validate-every", "10", "--out-dir", str(tmp_path), "--attention", "bahdanau")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"exact_match", "export", "plot", "seconds", "steps", "validation_exact_match"} <= set(summary)
    assert summary["steps"] == 15 and summary["stopped"] == "step cap 15 reached"  # 15 steps cannot read 99.5%
    progress = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in progress] == ["step 10 of at most 15", "step 15 of at most 15"]
    assert progress[-1].endswith("held-out dates); stopped: step cap 15 reached")
    assert 0.0 <= summary["exact_match"] <= 1.0
    assert summary["export"] == str(tmp_path / "dates-bahdanau")
    assert os.path.exists(os.path.join(summary["export"], "saved_model.pb"))
    assert os.path.getsize(summary["plot"]) > 0
    assert len(result.stdout.strip().splitlines()) == 1 + 5  # five example translations, then the JSON


@pytest.mark.parametrize("flag, value, message", [
    ("--attention", "nope", "argument --attention: invalid choice: 'nope'"),
    ("--max-steps", "two", "argument --max-steps: expected an integer >= 1. Received: 'two'"),
])
def test_bad_flag_values_exit_2(flag, value, message):
    result = tfattn("demo", flag, value)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("text, seconds", [("15m", 900), ("90s", 90), ("1h", 3600), ("1h30m", 5400),
                                           ("45", 45), ("2.5m", 150), (" 1h 5s ", 3605)])
def test_duration_in_seconds(text, seconds):
    from tfattn.cli import duration

    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "15x", "m", "0", "0h0m"])
def test_duration_errors_name_the_value(text):
    import argparse

    from tfattn.cli import duration

    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a duration > 0 .* Received: {text!r}"):
        duration(text)


@pytest.mark.parametrize("flags, expected", [([], None), (["--no-accel"], False)])
def test_no_accel_trains_with_the_reference_tier(flags, expected, tmp_path):
    from tfattn.cli import build_parser, run_config

    train = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")]
    assert run_config(build_parser().parse_args(train + flags)).train.accel is expected


@pytest.mark.parametrize("flags, warmup", [
    ([], 1000),  # the default recipe: 4-head Luong
    (["--attention", "bahdanau"], 0),  # one head: no warm-up
    (["--attention", "luong"], 0),
    (["--attention", "luong", "--heads", "4"], 1000),  # multi-head: 1,000 steps
    (["--encoder", "transformer"], 1000),
    (["--attention", "transformer"], 1000),
    (["--attention", "transformer", "--warmup-steps", "0"], 0),  # a given value wins
    (["--warmup-steps", "7"], 7),
])
def test_models_with_multihead_attention_warm_up_by_default(flags, warmup, tmp_path):
    from tfattn.cli import build_parser, run_config

    train = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")]
    assert run_config(build_parser().parse_args(train + flags)).train.warmup_steps == warmup


@pytest.mark.parametrize("flags, kind", [
    # (attention, heads, tie_embeddings, embedding_dim, units)
    ([], ("luong", 4, False, 256, 256)),  # the default recipe (RECIPE: docs/performance.md's best 15-minute row)
    (["--heads", "8"], ("luong", 8, False, 256, 256)),  # the recipe with the heads given
    (["--units", "128"], ("luong", 4, False, 256, 128)),
    (["--tie-embeddings", "--units", "128"], ("luong", 4, True, 128, 128)),  # tied: the embeddings follow --units
    (["--encoder", "transformer"], ("luong", 4, False, 256, 256)),
    (["--attention", "luong"], ("luong", 1, False, 256, 256)),  # Luong's own single head, untied
    (["--attention", "luong", "--units", "128"], ("luong", 1, False, 256, 128)),
    (["--attention", "bahdanau"], ("bahdanau", 1, False, 256, 256)),
    (["--attention", "transformer"], ("transformer", 1, False, 256, 256)),
    (["--attention", "transformer", "--heads", "4"], ("transformer", 4, False, 256, 256)),
])
def test_without_attention_the_model_is_the_recipe(flags, kind, tmp_path):
    from tfattn.cli import build_parser, run_config

    train = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")]
    m = run_config(build_parser().parse_args(train + flags)).model
    assert (m.attention, m.heads, m.tie_embeddings, m.embedding_dim, m.units) == kind


@pytest.mark.parametrize("flags, field, want", [
    ([], ("train", "label_smoothing"), 0.0),
    (["--label-smoothing", "0.1"], ("train", "label_smoothing"), 0.1),
    ([], ("model", "tie_embeddings"), False),  # the default recipe does not tie (tied scored lower over WordPiece)
    (["--tie-embeddings"], ("model", "tie_embeddings"), True),
    ([], ("source_tokenizer", "level"), "wordpiece"),  # the default recipe's vocabularies
    ([], ("target_tokenizer", "level"), "wordpiece"),
    (["--attention", "luong"], ("source_tokenizer", "level"), "word"),  # a kind named: words, as before
    (["--heads", "2"], ("target_tokenizer", "level"), "wordpiece"),  # a model flag keeps the recipe's
    (["--tokenizer", "char"], ("source_tokenizer", "level"), "char"),
    (["--attention", "bahdanau", "--tokenizer", "wordpiece"], ("target_tokenizer", "level"), "wordpiece"),
    (["--attention", "luong"], ("model", "tie_embeddings"), False),
    (["--attention", "luong", "--tie-embeddings"], ("model", "tie_embeddings"), True),
    ([], ("model", "norm"), "pre"),
    (["--attention", "transformer", "--norm", "post"], ("model", "norm"), "post"),
    ([], ("train", "precision_asked"), "auto"),  # --precision auto is the default, resolved in the config
    (["--precision", "float32"], ("train", "precision"), "float32"),
    (["--precision", "float32"], ("train", "precision_asked"), None),
    (["--precision", "mixed_bfloat16"], ("train", "precision"), "mixed_bfloat16"),
])
def test_issue_44_flags_set_their_fields(flags, field, want, tmp_path):
    from tfattn.cli import build_parser, run_config

    train = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")]
    section, name = field
    assert getattr(getattr(run_config(build_parser().parse_args(train + flags)), section), name) == want


@pytest.mark.parametrize("value", ["1", "-0.1", "x", "nan"])
def test_label_smoothing_outside_0_1_exits_2(value, capsys):
    from tfattn.cli import build_parser

    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["train", "--corpus", "c", "--out", "r", "--label-smoothing", value])
    assert exit.value.code == 2
    assert f"expected a number in [0, 1). Received: {value!r}" in capsys.readouterr().err


def test_luong_scores_are_scaled_unless_no_scale(tmp_path):
    from tfattn.cli import build_parser, run_config

    train = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run"), "--attention", "luong"]
    assert run_config(build_parser().parse_args(train)).model.scale is True
    assert run_config(build_parser().parse_args(train + ["--no-scale"])).model.scale is False


# -- every model flag against every kind: the table of tests/test_model.py, on the command line -----

MODEL_FLAGS = {"score": ["--score", "dot"], "normalize": ["--normalize"], "scale": ["--no-scale"],
               "local": ["--local", "p"], "window": ["--window", "3"], "hard": ["--hard"], "heads": ["--heads", "4"],
               "input_feeding": ["--no-input-feeding"], "encoder": ["--encoder", "transformer"],
               "positions": ["--positions", "learned"], "relative_clip": ["--relative-clip", "4"],
               "ff_dim": ["--ff-dim", "64"], "embedding_dim": ["--embedding-dim", "32"], "rnn": ["--rnn", "lstm"],
               "units": ["--units", "128"], "num_layers": ["--layers", "2"], "dropout": ["--dropout", "0.1"]}


def kind_flags(fields):
    return [item for name, value in fields.items() for item in (f"--{name.replace('_', '-')}", str(value))]


def config_of(tmp_path, *flags):
    """`run_config` of `tfattn train ... FLAGS`, as `main` calls it (it knows which flags were given)."""
    from tfattn.cli import build_parser, run_config

    argv = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run"), *flags]
    args = build_parser().parse_args(argv)
    args.argv = argv
    return run_config(args)


@pytest.mark.parametrize("kind", ["bahdanau", "bahdanau+self-attention encoder", "luong", "luong local",
                                  "luong multi-head", "transformer", "transformer relative", "none"])
@pytest.mark.parametrize("option", MODEL_FLAGS)
def test_every_model_flag_is_taken_or_refused_naming_it_and_the_model(option, kind, tmp_path):
    from test_model import ACCEPTED, KINDS

    flags = [*kind_flags(KINDS[kind]), *MODEL_FLAGS[option]]
    if kind in ACCEPTED[option]:
        config_of(tmp_path, *flags)
        return
    with pytest.raises(ValueError) as error:
        config_of(tmp_path, *flags)
    message = str(error.value)  # the flag (or, heads on local attention, the kind's --local: given too)
    assert message.split(" applies to ")[0] in (MODEL_FLAGS[option][0], "--local") and "\n" not in message, message
    assert f" only; the model is {KINDS[kind]['attention']}" in message, message


def test_a_model_flag_given_at_its_default_value_is_refused_too(tmp_path):
    with pytest.raises(ValueError) as error:
        config_of(tmp_path, "--attention", "luong", "--normalize", "--window", "10", "--positions", "sinusoidal",
                  "--ff-dim", "7", "--relative-clip", "2", "--units", "64")
    assert str(error.value) == (
        "--window applies to local attention (--local m or p) only; the model is luong with global attention; "
        "--positions applies to self-attention (--attention transformer or --encoder transformer) only; the model "
        "is luong with an RNN encoder; --relative-clip applies to relative positions (--positions relative) only; "
        "the model is luong with an RNN encoder; --ff-dim applies to self-attention (--attention transformer or "
        "--encoder transformer) only; the model is luong with an RNN encoder; --normalize applies to bahdanau "
        "attention only; the model is luong. Received: --window 10 --positions sinusoidal --relative-clip 2 "
        "--ff-dim 7 --normalize")
    assert config_of(tmp_path, "--attention", "transformer").model.attention == "transformer"  # defaults pass


@pytest.mark.parametrize("flags, expected", [([], None), (["--no-accel"], False)])
def test_no_accel_exports_the_reference_tier(flags, expected):
    from tfattn.cli import build_parser

    args = build_parser().parse_args(["export", "--model", "run", "--out", "out"] + flags)
    assert args.accel is expected


# -- flag values: counts, sizes, durations ---------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["evaluate", "--model", "m", "--batch-size", "0"],
     "argument --batch-size: expected an integer >= 1. Received: '0'"),
    (["evaluate", "--model", "m", "--limit", "0"], "argument --limit: expected an integer >= 1. Received: '0'"),
    (["translate", "--model", "m", "--beam", "-1"], "argument --beam: expected an integer >= 0 and <= 2147483647 (the export clamps it to its vocabulary, at most 64). Received: '-1'"),
    (["train", "--out", "r", "--vocab-size", "4"],
     "argument --vocab-size: expected an integer >= 5 (4 ids are reserved). Received: '4'"),
    (["train", "--out", "r", "--max-length", "2"],
     "argument --max-length: expected an integer >= 3 ([START] and [END] are counted). Received: '2'"),
    (["train", "--out", "r", "--max-pairs", "0"], "argument --max-pairs: expected an integer >= 1. Received: '0'"),
    (["train", "--out", "r", "--checkpoint-every", "0"],
     "argument --checkpoint-every: expected an integer >= 1. Received: '0'"),
    (["train", "--out", "r", "--units", "1.5"], "argument --units: expected an integer >= 1. Received: '1.5'"),
    (["train", "--out", "r", "--layers", "0"], "argument --layers: expected an integer >= 1. Received: '0'"),
    (["train", "--out", "r", "--embedding-dim", "-8"],
     "argument --embedding-dim: expected an integer >= 1. Received: '-8'"),
    (["train", "--out", "r", "--batch-size", "0"], "argument --batch-size: expected an integer >= 1. Received: '0'"),
    (["train", "--out", "r", "--epochs", "0"], "argument --epochs: expected an integer >= 1. Received: '0'"),
    (["train", "--out", "r", "--learning-rate", "nan"],
     "argument --learning-rate: expected a number > 0. Received: 'nan'"),
    (["train", "--out", "r", "--learning-rate", "1e300"],  # finite in Python, inf in float32
     "argument --learning-rate: expected a number > 0 that float32 holds (from 1.4e-45 to 3.4e38; outside, "
     "training would compute with inf or 0). Received: '1e300'"),
    (["train", "--out", "r", "--clip-norm", "1e300"],
     "argument --clip-norm: expected a number > 0 that float32 holds (from 1.4e-45 to 3.4e38; outside, "
     "training would compute with inf or 0). Received: '1e300'"),
    (["train", "--out", "r", "--learning-rate", "1e-300"],  # 0 in float32
     "argument --learning-rate: expected a number > 0 that float32 holds (from 1.4e-45 to 3.4e38; outside, "
     "training would compute with inf or 0). Received: '1e-300'"),
    (["train", "--out", "r", "--time-budget", "9" * 400],  # inf seconds, which JSON cannot hold
     "argument --time-budget: expected a duration > 0 such as 15m, 90s, 1h30m or 45 (seconds). Received: "
     f"'{'9' * 400}'"),
    (["train", "--out", "r", "--time-budget", "0s"],
     "argument --time-budget: expected a duration > 0 such as 15m, 90s, 1h30m or 45 (seconds). Received: '0s'"),
    (["train", "--out", "r", "--time-budget", "soon"],
     "argument --time-budget: expected a duration > 0 such as 15m, 90s, 1h30m or 45 (seconds). Received: 'soon'"),
    (["train", "--out", "r", "--dropout", "1.5"], "argument --dropout: expected a number in [0, 1). Received: '1.5'"),
    (["train", "--out", "r", "--dropout", "nan"], "argument --dropout: expected a number in [0, 1). Received: 'nan'"),
    (["demo", "--n-test", "0"], "argument --n-test: expected an integer >= 1. Received: '0'"),
    (["demo", "--n-train", "0"], "argument --n-train: expected an integer >= 1. Received: '0'"),
    (["demo", "--max-steps", "0"], "argument --max-steps: expected an integer >= 1. Received: '0'"),
    (["demo", "--stop-at", "1.5"], "argument --stop-at: expected a number in (0, 1], such as 0.995. Received: '1.5'"),
    (["demo", "--stop-at", "nan"], "argument --stop-at: expected a number in (0, 1], such as 0.995. Received: 'nan'"),
    (["demo", "--seed", "-1"], "argument --seed: expected an integer >= 0. Received: '-1'"),
])
def test_count_and_size_flags_refuse_nonsense(capsys, args, message):
    status, out, err = run_main(capsys, *args)
    assert status == 2 and out == ""
    assert err.splitlines()[-1] == f"tfattn {args[0]}: error: {message}"


def test_the_smallest_accepted_values_reach_the_config(tmp_path):
    from tfattn.cli import build_parser, run_config

    flags = ["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run"), "--attention", "bahdanau",
             "--vocab-size", "5", "--max-length", "3", "--batch-size", "1", "--units", "2", "--max-pairs", "1",
             "--time-budget", "1m30s"]  # (Bahdanau: one head, any even units)
    config = run_config(build_parser().parse_args(flags))
    assert (config.source_tokenizer.max_tokens, config.source_tokenizer.max_length) == (5, 3)
    assert (config.data.batch_size, config.model.units, config.corpus.max_pairs) == (1, 2, 1)
    # One unit cannot be split between the two directions of the (default) bidirectional encoder.
    with pytest.raises(ValueError, match="--units must be even: .*Received: --units 1"):
        run_config(build_parser().parse_args([*flags[:-6], "--units", "1", *flags[-4:]]))
    assert (config.train.time_budget, config.train.epochs) == (90.0, 10)  # no --epochs: TrainConfig's 10
    assert build_parser().parse_args(["translate", "--model", "m", "--beam", "0"]).beam == 0
    with pytest.raises(ValueError, match=r"^--splits takes three comma-separated names \(train, validation, test\)\. "
                                         r"Received: --splits a,b$"):
        run_config(build_parser().parse_args([*flags, "--splits", "a,b"]))


def test_the_smallest_vocabulary_has_one_token_besides_the_reserved_ids():
    from tfattn.cli import MIN_VOCAB_SIZE
    from tfattn.data.text import RESERVED, Tokenizer

    assert MIN_VOCAB_SIZE == len(RESERVED) + 1
    tokenizer = Tokenizer.adapt(["a a b"], max_tokens=MIN_VOCAB_SIZE)
    assert list(tokenizer.vocabulary[len(RESERVED):]) == ["a"]


@pytest.mark.parametrize("field, value", [("n_train", 0), ("n_test", 0), ("n_test", -5), ("n_train", 2.5)])
def test_demo_config_needs_pairs(field, value):
    from tfattn.demo import DemoConfig

    with pytest.raises(ValueError, match=rf"{field} must be an int >= 1\. Received: {field}={value!r}"):
        DemoConfig(**{field: value})


# -- train --resume takes the run's settings -------------------------------------------------------

def test_resume_refuses_flags_it_would_ignore(tmp_path):
    run = str(tmp_path / "run")
    result = tfattn("train", "--resume", "--out", run, "--units", "512", "--epochs", "3", "--format", "tsv",
                    "--no-input-feeding")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tfattn: error: --resume continues the run with its own settings (config.json); it takes only --epochs, "
        "--time-budget, --quiet, --corpus (its corpus file, if moved), --strategy, --replicas, --worker-timeout, "
        "--tensorboard and --no-tensorboard. Received: "
        "--format tsv --no-input-feeding --units 512"
    ]


def test_resume_refuses_a_flag_given_with_its_default_value(capsys, monkeypatch, tmp_path):
    import tfattn.runs.train

    monkeypatch.setattr(tfattn.runs.train, "train_run", lambda *a, **kw: pytest.fail("train_run was called"))
    status, _, err = run_main(capsys, "train", "--resume", "--out", str(tmp_path), "--units", "256",
                              "--batch-size=64")
    assert status == 2
    assert err.strip().endswith("Received: --units 256 --batch-size 64")  # 256 and 64 are the defaults


@pytest.mark.parametrize("flags, epochs, budget", [
    ([], None, None),  # the run's own
    (["--epochs", "3", "--time-budget", "2m"], 3, 120.0),
    (["--epo", "4", "--time-budget=1h"], 4, 3600.0),  # abbreviated and joined, as argparse allows
])
def test_resume_passes_only_epochs_and_time_budget(capsys, monkeypatch, tmp_path, flags, epochs, budget):
    import tfattn.runs.train

    calls = []
    monkeypatch.setattr(tfattn.runs.train, "train_run", lambda config, out, **kw: calls.append((out, kw)) or {"run": out})
    status, out, _ = run_main(capsys, "train", "--resume", "--out", str(tmp_path), "--quiet", *flags)
    assert status == 0 and json.loads(out) == {"run": str(tmp_path)}
    [(run, kw)] = calls
    assert (run, kw["resume"], kw["quiet"], kw["epochs"], kw["time_budget"]) == (str(tmp_path), True, True, epochs,
                                                                                 budget)


@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_quiet_silences_keras_only_while_it_trains(capsys, monkeypatch, tmp_path, ends):
    """`train --quiet` turns Keras's progress lines off (a corpus's download) during the run only: `main`
    called in a notebook or another program leaves Keras's setting as it found it, even on an error."""
    import keras

    import tfattn.runs.train

    def train_run(config, out, **kw):
        seen.append(keras.utils.is_interactive_logging_enabled())
        if ends == "raises":
            raise ValueError("the corpus is broken")
        return {"run": out}

    seen = []
    monkeypatch.setattr(tfattn.runs.train, "train_run", train_run)
    keras.utils.enable_interactive_logging()
    status, _, err = run_main(capsys, "train", "--resume", "--out", str(tmp_path), "--quiet")
    assert (status, seen) == ({"returns": 0, "raises": 2}[ends], [False]), err
    assert keras.utils.is_interactive_logging_enabled()
    run_main(capsys, "train", "--resume", "--out", str(tmp_path))  # without --quiet: Keras's setting untouched
    assert seen[-1] is True


# -- translate: any bytes ------------------------------------------------------------------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_translate_passes_bytes_that_are_not_utf8(exported_dates):
    # The model reads the bytes and cleans them itself (an invalid byte becomes U+FFFD), as a server would.
    replaced = tfattn("translate", "--model", exported_dates, "\ufffd5 march 2019", "5 march 2019")
    assert replaced.returncode == 0, replaced.stderr
    by_args = tfattn("translate", "--model", exported_dates, b"\xff5 march 2019", "5 march 2019")
    assert by_args.returncode == 0 and "Traceback" not in by_args.stderr, by_args.stderr
    assert by_args.stdout == replaced.stdout and len(by_args.stdout.splitlines()) == 2
    by_stdin = tfattn("translate", "--model", exported_dates, stdin=b"\xff5 march 2019\r\n5 march 2019\n", text=False)
    assert by_stdin.returncode == 0, by_stdin.stderr
    assert by_stdin.stdout.decode("utf-8") == replaced.stdout


# -- plots: the path written, files that are not what is expected ----------------------------------

HISTORY = {"loss": [2.0, 1.0], "accuracy": [0.2, 0.5], "val_loss": [2.1, 1.4], "seconds": 3.0}
EVALUATION = {"bleu": 10.0, "n": 3, "bleu_by_length": {"1-5": {"bleu": 12.0, "n": 2}, "6-10": {"bleu": 8.0, "n": 1}}}


def write_json(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


def test_plot_out_without_extension_writes_and_prints_a_png(capsys, tmp_path):
    history = write_json(tmp_path / "history.json", HISTORY)
    status, out, err = run_main(capsys, "plot", "--history", history, "--out", str(tmp_path / "hist"))
    assert status == 0, err
    assert out.strip() == str(tmp_path / "hist.png")
    assert (tmp_path / "hist.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "hist").exists()
    status, out, _ = run_main(capsys, "plot", "--history", history, "--out", str(tmp_path / "hist.pdf"))
    assert status == 0 and out.strip() == str(tmp_path / "hist.pdf") and (tmp_path / "hist.pdf").is_file()


def test_translate_plot_without_extension_prints_the_png_written(exported_dates, tmp_path):
    result = tfattn("translate", "--model", exported_dates, "5 march 2019", "--plot", str(tmp_path / "att"))
    assert result.returncode == 0, result.stderr
    assert f"attention plot: {tmp_path / 'att.png'}" in result.stderr.splitlines()
    assert (tmp_path / "att.png").stat().st_size > 0 and not (tmp_path / "att").exists()


@pytest.mark.parametrize("flags", [[], ["--beam", "3"]])
def test_translate_alignments_print_the_translation_a_tab_and_pharaoh_pairs(exported_dates, capsys, flags):
    import re

    import tensorflow as tf

    from tfattn.cli import _signature
    from tfattn.serving.alignments import sentence_alignment

    texts = ["5 march 2019", "tue 5 mar 2019", ""]
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--alignments", *flags, *texts)
    assert status == 0, err
    lines = [line.split("\t") for line in out.splitlines()]
    assert [len(line) for line in lines] == [2, 2, 2]  # translation TAB pairs, one line per sentence
    signature, inputs = _signature(exported_dates, int(flags[1]) if flags else 0)
    want = {k: v.numpy() for k, v in signature(text=tf.constant(texts), **inputs).items()}
    assert [text for text, _ in lines] == [text.decode() for text in want["text"]]  # the translations
    for n, (_, pairs) in enumerate(lines):
        assert pairs == sentence_alignment(want["attention"][n], want["input_tokens"][n], want["tokens"][n])
        targets = [int(pair.split("-")[1]) for pair in pairs.split()]
        real = [t for t in want["tokens"][n] if t not in (b"", b"[END]")]
        assert targets == list(range(len(real))) if n < 2 else targets == []  # "" has no source token
        assert re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", pairs)
    source_length = len("5 march 2019")  # character level: every source character is a token
    assert all(int(pair.split("-")[0]) < source_length for pair in lines[0][1].split())


def test_translate_help_says_what_alignments_count():
    result = tfattn("translate", "--help")
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    assert "Pharaoh format" in help_text and "without [START], [END] and padding" in help_text
    assert "--replace-unknown" in help_text


def test_save_figure_adds_png_only_without_a_suffix(tmp_path):
    from tfattn.plot import plot_history, save_figure

    assert save_figure(plot_history(HISTORY), tmp_path / "h") == tmp_path / "h.png"
    assert save_figure(plot_history(HISTORY), str(tmp_path / "h.svg")) == tmp_path / "h.svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.png", "h.svg"]


def test_plot_errors_name_the_file_and_what_was_expected(capsys, tmp_path):
    history = write_json(tmp_path / "history.json", HISTORY)
    (tmp_path / "notjson.json").write_text("loss: [1, 2]\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    out = ["--out", str(tmp_path / "p.png")]
    cases = [
        (["--bleu-by-length", history], f"{history} is not a `tfattn evaluate --output` file (no 'bleu_by_length'). "
                                        f"Received: --bleu-by-length {history!r}"),
        (["--history", str(tmp_path / "notjson.json")],
         f"{tmp_path / 'notjson.json'} is not JSON (a run's history.json expected): Expecting value: line 1 column 1 "
         f"(char 0). Received: --history {str(tmp_path / 'notjson.json')!r}"),
        (["--history", str(tmp_path)],
         f"{tmp_path} is a directory; pass {tmp_path / 'history.json'}. Received: --history {str(tmp_path)!r}"),
        (["--history", str(tmp_path / "empty")],
         f"{tmp_path / 'empty'} is a directory; pass a run's history.json. "
         f"Received: --history {str(tmp_path / 'empty')!r}"),
        (["--history", write_json(tmp_path / "eval.json", EVALUATION)],
         f"{tmp_path / 'eval.json'} is not a run's history.json (no 'loss'). "
         f"Received: --history {str(tmp_path / 'eval.json')!r}"),
        (["--history", write_json(tmp_path / "text.json", {"loss": "abc"})],
         f"{tmp_path / 'text.json'} is not a run's history.json: history['loss'] must be a list of numbers (null "
         f"where not finite), one per epoch. Received: history['loss']='abc'"),
        (["--history", write_json(tmp_path / "mixed.json", {"loss": [2.0, 1.0], "val_accuracy": [0.5, "0.7"]})],
         f"{tmp_path / 'mixed.json'} is not a run's history.json: history['val_accuracy'] must be a list of numbers "
         f"(null where not finite), one per epoch. Received: history['val_accuracy']=[0.5, '0.7']"),
        (["--bleu-by-length", str(tmp_path / "missing.json")],
         f"No such file: {tmp_path / 'missing.json'} (a file written by `tfattn evaluate --output` expected). "
         f"Received: --bleu-by-length {str(tmp_path / 'missing.json')!r}"),
    ]
    for flags, message in cases:
        status, stdout, err = run_main(capsys, "plot", *flags, *out)
        assert (status, stdout, err) == (2, "", f"tfattn: error: {message}\n"), flags
    assert not (tmp_path / "p.png").exists()


def test_plot_bleu_by_length_files_of_the_same_name_get_a_curve_each(capsys, monkeypatch, tmp_path):
    import tfattn.plot

    (tmp_path / "spa").mkdir()
    (tmp_path / "fra").mkdir()
    paths = [write_json(tmp_path / name / "eval.json", EVALUATION) for name in ("spa", "fra")]
    drawn = []
    real = tfattn.plot.plot_bleu_by_length
    monkeypatch.setattr(tfattn.plot, "plot_bleu_by_length", lambda curves: drawn.append(curves) or real(curves))
    status, _, err = run_main(capsys, "plot", "--bleu-by-length", *paths, "--out", str(tmp_path / "b.png"))
    assert status == 0, err
    assert list(drawn[0]) == [str(tmp_path / "spa" / "eval"), str(tmp_path / "fra" / "eval")]


# -- corpora the CLI cannot read -------------------------------------------------------------------

@pytest.mark.parametrize("corpus, message", [
    ("file:///nowhere/missing.zip",
     "Cannot download the corpus from file:///nowhere/missing.zip: [Errno 2] No such file or directory: "
     "'/nowhere/missing.zip'. Received: url='file:///nowhere/missing.zip'"),
    ("tfds:nonexistent", "TFDS has no dataset 'nonexistent'. See https://www.tensorflow.org/datasets/catalog/overview. "
                         "Received: name='nonexistent'"),
])
def test_train_on_a_corpus_that_cannot_be_read_is_one_line(tmp_path, corpus, message):
    if corpus.startswith("tfds:"):
        usable_tfds()
    # A download goes to a Keras home of the test's own (a fresh process, which reads it at import).
    keras_home = {"KERAS_HOME": str(tmp_path / "keras")} if corpus.startswith("file:") else None
    result = tfattn("train", "--corpus", corpus, "--data-dir", str(tmp_path / "tfds"), "--out", str(tmp_path / "run"),
                    env=keras_home)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"tfattn: error: {message}"
    assert not (tmp_path / "run").exists()


def test_demo_errors_are_counted_by_date_form():
    from tfattn.demo import errors_by_form

    wrong = [("5.3.19", "2019-03-05", "2019-03-06"), ("Mar 5th, 2019", "2019-03-05", "2019-05-03"),
             ("6.3.19", "2019-03-06", "2019-03-05"), ("March 5th, 2019", "2019-03-05", "2019-03-05x")]
    # "March 5th, 2019" (full month name and a comma) is none of the forms.
    assert errors_by_form(wrong) == {"dot_dmy_short": 2, "mon_ordinal_year": 1, "None": 1}
    assert list(errors_by_form(wrong))[0] == "dot_dmy_short"  # most frequent first


# -- unusable corpora and messages: one line each, before anything is written ----------------------

def dates_corpus(path, n=600, encoding="utf-8"):
    from processes import write_anki

    write_anki(path, n)
    path.write_bytes(path.read_text(encoding="utf-8").encode(encoding))
    return str(path)


def last_error(err):
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("tfattn: error: "), err
    return lines[-1]


def test_a_utf16_corpus_without_a_byte_order_mark_is_refused(capsys, tmp_path):
    corpus = dates_corpus(tmp_path / "d.txt", encoding="utf-16-le")
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(tmp_path / "run"), "--quiet")
    assert status == 2 and "looks like UTF-16LE text without a byte order mark" in last_error(err)
    assert not (tmp_path / "run").exists()


def test_a_length_limit_that_leaves_no_pairs_is_refused(capsys, tmp_path):
    from tfattn.data.corpora import load_anki, split_pairs

    corpus = dates_corpus(tmp_path / "d.txt")
    train = split_pairs(load_anki(corpus))["train"]
    # --max-length 3 leaves one character between [START] and [END]: no date is that short.
    status, _, err = run_main(capsys, "train", "--corpus", corpus, "--out", str(tmp_path / "run"), "--max-length", "3",
                              "--tokenizer", "char", "--quiet")
    n = f"{len(train):,}"
    assert status == 2 and last_error(err) == (
        f"tfattn: error: No train pairs are left: the length limit drops all {n} ({n} with a source longer than 3 "
        f"tokens, {n} with a target longer than 3; [START] and [END] count). Pass a larger --max-length. "
        "Received: max_length=3")
    assert not (tmp_path / "run").exists()


def test_a_directory_given_as_an_anki_corpus_says_so(capsys, tmp_path):
    (tmp_path / "spa-eng").mkdir()
    dates_corpus(tmp_path / "spa-eng" / "spa.txt")
    for extra in ([], ["--format", "anki"]):
        status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "spa-eng"), *extra,
                                  "--out", str(tmp_path / "run"), "--quiet")
        assert status == 2 and "spa-eng is a directory; pass the sentence-pair file in it (it holds spa.txt)" in err


def test_a_binary_corpus_is_one_short_line_naming_each_reason_once(capsys, tmp_path):
    import random

    noise = bytes(random.Random(0).choice(range(1, 256)) for _ in range(200_000))  # no NUL: not UTF-16-like
    (tmp_path / "noise.txt").write_bytes(noise)
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "noise.txt"), "--out",
                              str(tmp_path / "run"), "--quiet")
    assert status == 2 and err.count("invalid UTF-8") == 1 and len(err) < 400, err
    assert last_error(err).startswith("tfattn: error: The ")  # train or validation split: no pairs


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_translate_reads_stdin_a_batch_at_a_time(exported_dates, tmp_path):
    """Peak memory does not grow with the number of lines: 20,000 lines take what 2,000 take."""
    from tfattn.data import dates

    child = ("import atexit, resource, sys\nfrom tfattn import cli\n"
             "atexit.register(lambda: print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
             "file=sys.stderr))\nsys.exit(cli.main())")
    texts = [text for text, _ in dates.generate(2000, seed=1)]
    peaks = {}
    for copies in (1, 10):
        (tmp_path / "in.txt").write_text("\n".join(texts * copies) + "\n", encoding="utf-8")
        with open(tmp_path / "in.txt", "rb") as stdin, open(tmp_path / "out.txt", "wb") as stdout:
            proc = subprocess.run([sys.executable, "-c", child, "translate", "--model", exported_dates], stdin=stdin,
                                  stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600,
                                  env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert proc.returncode == 0, proc.stderr
        peaks[copies] = int(proc.stderr.split("maxrss")[-1])  # KiB on Linux
        out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
        assert len(out) == 2000 * copies and out[:2000] * copies == out  # in input order
    assert peaks[10] - peaks[1] < 20 * 1024, peaks  # one batch of 20,000 needs some 200 MB more


def test_the_translate_signature_refuses_a_batch_that_is_not_one_dimensional(exported_dates, grappler):
    import tensorflow as tf

    translate = shared_export(exported_dates).signatures["translate"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)text_must_be_a_batch_of_strings.*"
                                                             r"Shape of tensor text \[2,2\] is not compatible"):
        translate(text=tf.constant([["5 march 2019", "6 march 2019"], ["a", "b"]]))


@pytest.mark.parametrize("name, value", [("beam_width", [4, 4]), ("length_penalty", [0.6, 0.6])])
def test_the_beam_signature_refuses_a_vector_beam_width_or_length_penalty(exported_dates, name, value, grappler):
    import tensorflow as tf

    from tfattn.serving.translator import load

    beam = load(exported_dates).signatures["translate_beam"]
    inputs = {"beam_width": tf.constant(4), "length_penalty": tf.constant(0.6)}
    inputs[name] = tf.constant(value, inputs[name].dtype)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"(?s){name}_must_be_a_scalar.*"
                                                             rf"Shape of tensor {name} \[2\] is not compatible"):
        beam(text=tf.constant(["5 march 2019", "6 march 2019"]), **inputs)


@pytest.mark.parametrize("flags, to_budget, alpha", [
    (["--time-budget", "15m"], True, 0.3),  # the cosine over the clock ends at 30% of the peak
    (["--time-budget", "15m", "--decay-alpha", "0.05"], True, 0.05),
    (["--decay-steps", "1000"], False, 0.01),  # Keras' CosineDecay over steps, to 1% unless told
    (["--decay-steps", "1000", "--decay-alpha", "0.5"], False, 0.5),
    (["--time-budget", "15m", "--decay-steps", "1000"], False, 0.01),  # the steps given decide
])
def test_decay_alpha_reaches_the_config(tmp_path, flags, to_budget, alpha):
    train = config_of(tmp_path, *flags).train
    assert (train.decay_to_budget, train.decay_alpha) == (to_budget, alpha)


def test_decay_alpha_without_a_cosine_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"^--decay-alpha sets where a cosine ends, and this run has none: give "
                                         r"--decay-steps or --time-budget too\. Received: --decay-alpha 0\.2$"):
        config_of(tmp_path, "--decay-alpha", "0.2")
    status, _, err = run_main(capsys, "train", "--out", "r", "--decay-alpha", "1.5")
    assert status == 2 and err.splitlines()[-1] == (
        "tfattn train: error: argument --decay-alpha: expected a number in [0, 1). Received: '1.5'")


@pytest.mark.parametrize("flags, received", [
    (["--schedule", "inverse-sqrt", "--decay-steps", "100"], "--decay-steps 100 --schedule inverse-sqrt"),
    (["--schedule", "constant", "--time-budget", "5m", "--decay-alpha", "0.2"],
     "--decay-alpha 0.2 --schedule constant"),
])
def test_cosine_flags_with_another_schedule_are_refused(tmp_path, flags, received):
    with pytest.raises(ValueError, match=rf"^{received.split()[0]} shapes the cosine schedule, and --schedule "
                                         rf"{flags[1]} has none\. Received: {received}$"):
        config_of(tmp_path, *flags)


def test_a_time_budget_with_another_schedule_keeps_that_schedule(tmp_path):
    """Only the cosine is fitted to the clock: inverse-sqrt under --time-budget stays inverse-sqrt."""
    train = config_of(tmp_path, "--schedule", "inverse-sqrt", "--time-budget", "5m").train
    assert (train.schedule, train.decay_to_budget, train.time_budget) == ("inverse_sqrt", False, 300.0)
