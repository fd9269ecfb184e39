"""`tfattn train`'s model-kind flags: in --help, and a bad combination refused before any data is read."""

import pytest

from conftest import run_main

FLAGS = ["--score", "--local", "--window", "--hard", "--heads", "--encoder", "--positions", "--relative-clip",
         "--ff-dim"]


def test_help_explains_every_kind_flag(capsys):
    status, out, _ = run_main(capsys, "train", "--help")
    assert status == 0
    for flag in FLAGS:
        assert flag in out, flag
    assert "{bahdanau,luong,transformer,none}" in out and "cosine" in out


@pytest.mark.parametrize("flags, message", [
    (["--attention", "bahdanau", "--local", "p"], "local='p' with attention='bahdanau'"),
    (["--attention", "luong", "--heads", "3", "--units", "16"], "heads=3, units=16"),
    (["--attention", "transformer", "--hard"], "hard=True with attention='transformer'"),
    (["--attention", "none", "--heads", "2"], "heads=2 with attention='none'"),
])
def test_bad_combinations_are_one_line_before_the_corpus_is_read(capsys, tmp_path, flags, message):
    missing = tmp_path / "no-such-corpus.txt"  # reading it would fail with another message
    status, out, err = run_main(capsys, "train", "--corpus", str(missing), "--out", str(tmp_path / "run"), *flags)
    assert status != 0 and message in err and "no-such-corpus" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags", [["--window", "0"], ["--heads", "-1"], ["--local", "x"], ["--positions", "rope"]])
def test_bad_values_are_refused_by_the_parser(capsys, tmp_path, flags):
    status, _, err = run_main(capsys, "train", "--corpus", "x.txt", "--out", str(tmp_path / "run"), *flags)
    assert status == 2 and flags[0] in err
