"""Faults of issue 31 at the command line: memory, downloads, `evaluate`, empty input, misleading
messages and untrusted exports. Each runs `tfattn` as a user would (a child process) and checks one
line on stderr, the exit status and what is left on disk."""

import gzip
import json
import os
import shutil
import zipfile

import pytest

import zygote
from processes import TRAIN_FLAGS, write_anki

MEMORY_CAP = 8 * 1024 ** 3  # RLIMIT_AS of the memory probes: TensorFlow starts well within it


def tfattn(*args, stdin=None, cap=None, env=None):
    """`tfattn ARGS`, run to its end in a process of its own (`zygote`); `cap` bytes of address space
    (RLIMIT_AS) if given."""
    return zygote.run(*args, stdin=stdin, cap=cap, env=env)


def one_error_line(result, status, *fragments):
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tfattn: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def dates_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "d.txt"
    write_anki(path, 200)
    return path


# -- 7: memory -------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--units", "100000"), ("--layers", "1000000")])
def test_a_model_too_big_for_memory_is_refused_before_a_run_is_made(dates_file, tmp_path, flag, value):
    run = tmp_path / "run"
    result = tfattn("train", "--corpus", str(dates_file), "--out", str(run), "--epochs", "1", *TRAIN_FLAGS,
                    flag, value, cap=MEMORY_CAP)  # the last --units given counts
    line = one_error_line(result, 2, "does not fit in memory", "GB", "--units")
    assert f"{flag[2:]}={value}" in line
    assert not (run / "config.json").exists() and not (run / "tokenizers.json").exists()


def test_out_of_memory_while_translating_is_one_line_with_a_hint(exported_dates, monkeypatch, capsys):
    import tensorflow as tf

    from tfattn import cli

    def exhausted(**inputs):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[100000,64,512]")

    monkeypatch.setattr(cli, "_signature", lambda path, beam, heads=False: (exhausted, {}))
    with pytest.raises(SystemExit) as info:
        cli.main(["translate", "--model", exported_dates, "hola"])
    err = capsys.readouterr().err
    assert info.value.code == 1 and err.count("\n") == 1, err
    assert "Out of memory while translating" in err and "--batch-size, --beam or --units" in err


# -- 9: downloads ----------------------------------------------------------------------------------

@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_train_from_a_url_quiet_prints_only_the_json(dates_file, tmp_path):
    archive = tmp_path / "dates.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(dates_file, "dates/dates.txt")
    home = tmp_path / "keras"
    result = tfattn("train", "--corpus", archive.as_uri(), "--out", str(tmp_path / "run"), "--epochs", "1",
                    "--max-pairs", "40", *TRAIN_FLAGS, env={"KERAS_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 and isinstance(json.loads(result.stdout), dict), result.stdout
    assert "Downloading" not in result.stderr  # --quiet: no progress at all


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_train_from_a_url_that_is_not_a_zip_leaves_nothing_in_the_cache(dates_file, tmp_path):
    home = tmp_path / "keras"
    result = tfattn("train", "--corpus", dates_file.as_uri(), "--out", str(tmp_path / "run"), *TRAIN_FLAGS,
                    env={"KERAS_HOME": str(home)})
    one_error_line(result, 2, "is not a zip archive")
    assert result.stdout == ""
    assert not [p for p in (home / "datasets").rglob("*")], list(home.rglob("*"))  # (keras.json is its settings)


# -- 10: evaluate ----------------------------------------------------------------------------------

def test_evaluate_an_empty_corpus_is_refused(exported_dates, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    result = tfattn("evaluate", "--model", exported_dates, "--corpus", str(empty))
    assert result.returncode != 0 and result.stdout == "" and "Traceback" not in result.stderr


def test_evaluate_an_empty_split_is_refused(exported_dates, tmp_path):
    few = tmp_path / "few.txt"
    write_anki(few, 20)
    few.write_text("not a pair\n" + few.read_text(encoding="utf-8"), encoding="utf-8")  # line 0, the only test line, skipped
    result = tfattn("evaluate", "--model", exported_dates, "--corpus", str(few), "--split", "test")
    assert result.stdout == ""
    one_error_line(result, 2, "Nothing to evaluate", "test split")


def test_evaluate_checks_the_output_path_first(exported_dates, tmp_path):
    out = tmp_path / "missingdir" / "eval.json"
    result = tfattn("evaluate", "--model", exported_dates, "--corpus", str(tmp_path / "no-corpus.txt"),
                    "--output", str(out))  # the corpus is missing too: the output is checked before it
    one_error_line(result, 2, "No such directory", str(out.parent), "--output")


def test_evaluate_reports_the_beam_it_used(exported_dates, dates_file):
    with open(os.path.join(exported_dates, "tfattn_config.json"), encoding="utf-8") as f:
        vocab = json.load(f)["target_tokenizer"]["vocab_size"]
    result = tfattn("evaluate", "--model", exported_dates, "--corpus", str(dates_file), "--split", "train",
                    "--limit", "2", "--beam", "1000000")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["beam"] == min(vocab, 64)  # the signature's documented clamp


# -- 12: empty input -------------------------------------------------------------------------------

@pytest.mark.parametrize("beam", ["0", "3"])
def test_translate_blank_lines_gives_empty_lines(exported_dates, beam):
    result = tfattn("translate", "--model", exported_dates, "--beam", beam, stdin="\n  \n5 march 2019\n\t\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == lines[1] == lines[3] == "" and lines[2] != "", result.stdout


# -- 13: messages ----------------------------------------------------------------------------------

def test_a_fifo_corpus_says_it_is_a_pipe(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    result = tfattn("train", "--corpus", str(fifo), "--out", str(tmp_path / "run"), *TRAIN_FLAGS)
    one_error_line(result, 2, str(fifo), "is a pipe", "regular file")


def test_a_symlink_loop_says_so(tmp_path):
    os.symlink(tmp_path / "b.txt", tmp_path / "a.txt")
    os.symlink(tmp_path / "a.txt", tmp_path / "b.txt")
    result = tfattn("train", "--corpus", str(tmp_path / "a.txt"), "--out", str(tmp_path / "run"), *TRAIN_FLAGS)
    one_error_line(result, 2, "symbolic link loop")


@pytest.mark.parametrize("name,format", [("d.txt.gz", None), ("d.txt", "anki")])
def test_a_gzip_corpus_says_it_is_gzip(dates_file, tmp_path, name, format):
    path = tmp_path / name
    path.write_bytes(gzip.compress(dates_file.read_bytes()))
    result = tfattn("train", "--corpus", str(path), *(["--format", format] if format else []),
                    "--out", str(tmp_path / "run"), *TRAIN_FLAGS)
    one_error_line(result, 2, "gzip-compressed", "gunzip")


def test_a_huge_beam_names_the_flag(tmp_path):
    result = tfattn("translate", "--model", str(tmp_path), "--beam", "99999999999999999999", "hola")
    assert result.returncode == 2 and "argument --beam" in result.stderr and "Traceback" not in result.stderr


def test_threads_are_bounded_by_the_machine(tmp_path):
    result = tfattn("translate", "--model", str(tmp_path), "--threads", "20000,20000", "hola")
    assert result.returncode == 2 and "argument --threads" in result.stderr, result.stderr
    assert f"this machine has {os.cpu_count()}" in result.stderr


def test_an_unsupported_plot_extension_is_refused_before_translating(exported_dates, tmp_path):
    result = tfattn("translate", "--model", exported_dates, "--plot", str(tmp_path / "a.xyz"), "5 march 2019")
    one_error_line(result, 2, "--plot", ".xyz", ".png")
    assert result.stdout == ""  # nothing was translated


def test_plot_with_empty_stdin_says_there_was_nothing_to_translate(exported_dates, tmp_path):
    result = tfattn("translate", "--model", exported_dates, "--plot", str(tmp_path / "a.png"), stdin="")
    assert result.returncode == 0 and result.stdout == ""
    assert "nothing to translate" in result.stderr and not (tmp_path / "a.png").exists()


# -- 14: trust -------------------------------------------------------------------------------------

def test_help_says_to_load_only_trusted_exports():
    for args in (["--help"], ["translate", "--help"], ["evaluate", "--help"]):
        assert "trust" in " ".join(tfattn(*args).stdout.split()), args


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_an_export_without_its_config_is_warned_about(exported_dates, tmp_path):
    foreign = tmp_path / "foreign"
    shutil.copytree(exported_dates, foreign)
    (foreign / "tfattn_config.json").unlink()
    result = tfattn("translate", "--model", str(foreign), "5 march 2019")
    assert result.returncode == 0, result.stderr
    assert "has no tfattn_config.json" in result.stderr and "trust" in result.stderr
    trusted = tfattn("translate", "--model", exported_dates, "5 march 2019")
    assert "warning" not in trusted.stderr
