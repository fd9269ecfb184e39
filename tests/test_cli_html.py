"""`tfattn translate --html FILE`: every sentence's translation and attention as one explorer page
(`tfattn.explore`), its data what the export's signature returned. The page in a browser:
tests/test_explore_browser.py."""

import io
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import run_main
from test_explore import embedded
from tfattn.serving.translator import load

TEXTS = ["tue 5 march 2019", "07/08/1930"]


def cropped(out, i, k=None):
    """Sentence `i`'s (hypothesis `k`'s) attention without padding, and its output tokens, as the
    signature returned them."""
    t_in = int((out["input_tokens"][i] != b"").sum())
    tokens = out["tokens"][i] if k is None else out["nbest_tokens"][i, k]
    attention = out["attention"][i] if k is None else out["nbest_attention"][i, k]
    t_out = int((tokens != b"").sum())
    return attention[:t_out, :t_in], [t.decode() for t in tokens[:t_out]]


@pytest.mark.parametrize("beam", [0, 3])
def test_the_page_holds_each_sentence_and_hypothesis_with_its_attention(exported_dates, capsys, tmp_path, beam):
    path = tmp_path / "page.html"
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--beam", str(beam), "--html",
                                str(path), *TEXTS)
    assert status == 0, err
    assert f"attention page: {path}" in err.splitlines()
    loaded = load(exported_dates)
    if beam:
        want = loaded.signatures["translate_beam"](text=tf.constant(TEXTS), beam_width=tf.constant(beam),
                                                   length_penalty=tf.constant(0.6))
    else:
        want = loaded.signatures["translate"](text=tf.constant(TEXTS))
    want = {key: value.numpy() for key, value in want.items()}
    sentences = embedded(path.read_text(encoding="utf-8"))["sentences"]
    assert [s["source"] for s in sentences] == TEXTS
    assert out.splitlines() == [s["hypotheses"][0]["text"] for s in sentences]  # the page shows what was printed
    for i, sentence in enumerate(sentences):
        assert len(sentence["hypotheses"]) == (beam or 1)
        for k, hypothesis in enumerate(sentence["hypotheses"]):
            attention, tokens = cropped(want, i, k if beam else None)
            assert hypothesis["tokens"] == tokens
            np.testing.assert_allclose(hypothesis["attention"], attention, atol=1e-6)  # rounded to 6 decimals


def test_an_html_path_that_cannot_be_written_is_refused_before_translating(exported_dates, capsys, tmp_path):
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--html",
                                str(tmp_path / "missing" / "page.html"), "5 march 2019")
    assert status == 2 and out == ""  # nothing was translated
    assert err.splitlines()[-1] == (f"tfattn: error: No such directory: {tmp_path / 'missing'}; create it "
                                    f"first. Received: --html {str(tmp_path / 'missing' / 'page.html')!r}")
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--html", str(tmp_path), "5 march 2019")
    assert status == 2 and out == "" and "is a directory; pass a file path" in err


def test_nothing_to_translate_writes_no_page(exported_dates, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--html", str(tmp_path / "p.html"))
    assert status == 0 and out == ""
    assert "no attention page written: there was nothing to translate" in err
    assert not (tmp_path / "p.html").exists()


@pytest.mark.long  # an export of its own: make test-long
def test_a_multi_head_export_gives_the_page_every_head(dates_data, capsys, tmp_path):
    import tfattn
    from tfattn.training.trainer import TrainConfig, fit

    train, _, source, target = dates_data
    keras.utils.set_random_seed(0)
    model = tfattn.make_model(tfattn.ModelConfig(attention="luong", heads=2, units=16, embedding_dim=16),
                              source.vocab_size, target.vocab_size)
    fit(model, tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=32)),
        TrainConfig(learning_rate=5e-3, epochs=1), quiet=True)
    export = tfattn.export(tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14)),
                           str(tmp_path / "export"))
    path = tmp_path / "heads.html"
    status, _, err = run_main(capsys, "translate", "--model", export, "--html", str(path), *TEXTS)
    assert status == 0, err
    want = {key: value.numpy() for key, value in load(export).signatures["translate_heads"](
        text=tf.constant(TEXTS)).items()}
    for i, sentence in enumerate(embedded(path.read_text(encoding="utf-8"))["sentences"]):
        attention, tokens = cropped(want, i)
        heads = sentence["hypotheses"][0]["heads"]  # (layers, heads, t_out, t_in)
        np.testing.assert_allclose(heads, want["attention_heads"][i][:, :, :len(tokens), :attention.shape[1]],
                                   atol=1e-6)
        assert np.shape(heads)[:2] == (1, 2)
