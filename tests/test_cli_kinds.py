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
    (["--attention", "bahdanau", "--local", "p"], "--local applies to luong attention with one head only; the "
                                                  "model is bahdanau. Received: --local p"),
    (["--attention", "luong", "--heads", "3", "--units", "16"], "--heads must divide --units (each head gets units "
                                                                "/ heads features). Received: --heads 3, --units 16"),
    (["--attention", "transformer", "--hard"], "--hard applies to bahdanau attention, or luong with one head only; "
                                               "the model is transformer"),
    (["--attention", "none", "--heads", "2"], "--heads applies to luong attention, the transformer or a "
                                              "self-attention encoder only; the model is none with an RNN encoder"),
    (["--attention", "luong", "--units", "7"], "--units must be even: the bidirectional RNN encoder gives half of "
                                               "them to each direction. Received: --units 7"),
    # Without --attention, the default recipe (4-head Luong) is the model the messages name.
    (["--units", "6"], "--heads must divide --units (each head gets units / heads features). Received: --units 6 "
                       "with the default model's 4 heads (give --heads, or --attention)"),
    (["--tie-embeddings", "--embedding-dim", "128"], "--tie-embeddings needs --embedding-dim equal to --units (the "
                                                     "output projection is the embedding table, transposed), or "
                                                     "--no-tie-embeddings. Received: --embedding-dim 128, --units 256"),
    (["--attention", "luong", "--tie-embeddings", "--embedding-dim", "128"],
     "--tie-embeddings needs --embedding-dim equal to --units"),
    (["--normalize"], "--normalize applies to bahdanau attention only; the model is luong (tfattn train's default; "
                      "--attention names another). Received: --normalize"),
    (["--score", "cosine"], "--score applies to luong attention with one head only; the model is luong with 4 heads "
                            "(tfattn train's default; --attention names another). Received: --score cosine"),
    (["--best-by", "bleu", "--bleu-sample", "0"], "--best-by bleu needs a BLEU sample: --bleu-sample must be >= 1. "
                                                  "Received: --bleu-sample 0"),
    (["--replicas", "2"], "pass --strategy mirrored. Received: --replicas 2"),
])
def test_bad_combinations_are_one_line_before_the_corpus_is_read(capsys, tmp_path, flags, message):
    missing = tmp_path / "no-such-corpus.txt"  # reading it would fail with another message
    status, out, err = run_main(capsys, "train", "--corpus", str(missing), "--out", str(tmp_path / "run"), *flags)
    assert status == 2 and message in err and "no-such-corpus" not in err and "Received: --" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags", [["--window", "0"], ["--heads", "-1"], ["--local", "x"], ["--positions", "rope"]])
def test_bad_values_are_refused_by_the_parser(capsys, tmp_path, flags):
    status, _, err = run_main(capsys, "train", "--corpus", "x.txt", "--out", str(tmp_path / "run"), *flags)
    assert status == 2 and flags[0] in err
