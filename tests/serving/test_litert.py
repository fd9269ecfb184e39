"""The LiteRT export (tfattn/serving/litert.py), run by ai-edge-litert's interpreter: the tokens and
attention of the SavedModel export, LiteRT's builtin ops only, for Bahdanau, Luong and the Transformer;
and the same model converted to ONNX (tf2onnx) and run by onnxruntime.

The oracle is the SavedModel export's `translate` signature (or, in the quick tests of the kinds
that have no session export, the `Translator` it is made from): its output tokens are what the
LiteRT model's ids must name through the vocabulary file beside it.
"""

import io
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from conftest import made_once, run_main, shared_data, shared_dates_translator, shared_export
from tfattn.data import dates
from tfattn.serving.litert import CONFIG_FILE, MODEL_FILE, LiteRTTranslator, export_litert
from tfattn.serving.translator import export, load

pytest.importorskip("ai_edge_litert", reason="needs ai-edge-litert (pip install 'tfattn[litert]')")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
KINDS = ("bahdanau", "luong", "transformer")


@pytest.fixture(scope="module")
def translators(dates_data, dates_translator, bahdanau_translator, tmp_path_factory):
    """The session's Bahdanau and Luong dates translators, and a Transformer trained as briefly (once
    per session, as they are)."""
    return {"bahdanau": bahdanau_translator, "luong": dates_translator,
            "transformer": shared_dates_translator(dates_data, tmp_path_factory, "transformer")}


@pytest.fixture(scope="module")
def lite(translators, tmp_path_factory):
    """Each kind's LiteRT export, written once per session (shared by the workers) and loaded."""
    write = lambda t, kind: lambda f: export_litert(t, str(f / kind))  # noqa: E731
    folders = {kind: made_once(tmp_path_factory, f"litert-{kind}", write(t, kind)) for kind, t in translators.items()}
    return {kind: LiteRTTranslator(str(folder / kind)) for kind, folder in folders.items()}


def saved_model_outputs(signature, texts, batch_size=64):
    """The `translate` outputs of each text: tokens up to `[END]`, attention rows up to it, text."""
    out = {"tokens": [], "attention": [], "text": [], "input_tokens": []}
    for i in range(0, len(texts), batch_size):
        got = {k: v.numpy() for k, v in signature(text=tf.constant(texts[i:i + batch_size])).items()}
        for row in range(len(got["text"])):
            n, t_in = int(got["length"][row]), int((got["input_tokens"][row] != b"").sum())
            out["tokens"].append([t.decode("utf-8") for t in got["tokens"][row, :n]])
            out["attention"].append(got["attention"][row, :n, :t_in])
            out["text"].append(got["text"][row].decode("utf-8"))
            out["input_tokens"].append([t.decode("utf-8") for t in got["input_tokens"][row, :t_in]])
    return out


def translator_outputs(translator, texts):
    """The same, from a `Translator` in this process (the graph its export saves)."""
    return saved_model_outputs(lambda text: translator.translate(text), texts)


def assert_same_translations(got, want, what):
    """Tokens, source tokens and text equal; attention within float32 rounding."""
    for i, (tokens, wanted) in enumerate(zip(got["tokens"], want["tokens"])):
        assert tokens == wanted, f"{what}, sentence {i}: {got['input_tokens'][i]}"
        np.testing.assert_allclose(got["attention"][i], want["attention"][i], rtol=1e-4, atol=1e-5,
                                   err_msg=f"{what}, sentence {i}")
    assert got["input_tokens"] == want["input_tokens"] and got["text"] == want["text"]
    assert len(got["tokens"]) == len(want["tokens"])


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
def test_luong_gives_the_saved_models_tokens_and_attention(lite, exported_dates):
    _, test = dates.make_corpus(0, 1000)
    texts = [s for s, _ in test[:40]]
    want = saved_model_outputs(shared_export(exported_dates).signatures["translate"], texts)
    assert_same_translations(lite["luong"](texts), want, "luong")
    assert len(set(want["text"])) > 10, want["text"]  # varied dates: the model is not stuck on one


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_each_kind_gives_its_translators_tokens(lite, translators, kind):
    _, test = dates.make_corpus(0, 1000)
    texts = [s for s, _ in test[:40]]
    want = translator_outputs(translators[kind], texts)
    assert_same_translations(lite[kind](texts), want, kind)
    assert len(set(want["text"])) > 5, want["text"]


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
def test_the_model_holds_only_builtin_ops(lite):
    # LiteRT names a Select TF op "Flex" + its TensorFlow name; ai-edge-litert's interpreter has none.
    for kind, translator in lite.items():
        ops = model_ops(translator.model_path)
        assert ops and not [op for op in ops if op.startswith("Flex")], (kind, ops)


def model_ops(path):
    """The op names of a `.tflite` file, as LiteRT's analyzer lists them."""
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        tf.lite.experimental.Analyzer.analyze(model_path=path)
    return sorted(set(re.findall(r"Op#\d+ (\w+)", buffer.getvalue())))


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
def test_serving_md_lists_the_luong_models_ops(lite):
    shown = re.search(r"<!-- ops: litert -->\n```\n(.*?)\n```", DOCS.read_text(encoding="utf-8"), re.S)
    ops = model_ops(lite["luong"].model_path)
    assert shown and shown.group(1).split() == ops, " ".join(ops)


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
def test_a_source_without_tokens_gets_an_empty_translation(lite):
    # [START] [END] alone: length 0, the one id slot 0, one row of zero attention over the two positions.
    out = lite["luong"].translate_ids(np.array([[2, 3]]))
    assert out["length"].tolist() == [0] and out["ids"].tolist() == [[0]]
    np.testing.assert_array_equal(out["attention"], np.zeros((1, 1, 2), np.float32))
    assert lite["luong"]([""])["text"] == [""]


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
def test_the_export_directory_holds_the_vocabularies(lite, translators, tmp_path):
    path = export_litert(translators["luong"], str(tmp_path / "lite"))
    names = sorted(os.listdir(path))
    assert names == sorted([MODEL_FILE, CONFIG_FILE, "source_vocab.txt", "target_vocab.txt"])
    lines = (Path(path) / "target_vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:4] == ["[PAD]", "[UNK]", "[START]", "[END]"]  # line i is id i
    assert lines[4:] == translators["luong"].target_tokenizer.vocabulary[4:]
    export_litert(translators["luong"], path)  # over an earlier LiteRT export: allowed


@pytest.mark.long  # the session's three LiteRT exports, 20-30 s to write: make test-long
@pytest.mark.parametrize("source", [np.zeros((2, 3), np.int32), np.zeros((1, 0), np.int32),
                                    np.zeros((1, 3), np.float32), np.zeros(3, np.int32)])
def test_translate_ids_refuses_what_is_not_one_sentence_of_ids(lite, source):
    with pytest.raises(ValueError, match=r"shape \(1, t_in\)\. Received: shape"):
        lite["luong"].translate_ids(source)


def test_what_the_export_cannot_do_is_refused(translators, tmp_path):
    unknown = tfattn.Translator(translators["luong"].model, translators["luong"].source_tokenizer,
                                translators["luong"].target_tokenizer, replace_unknown=True)
    with pytest.raises(ValueError, match="cannot replace \\[UNK\\].*Received: replace_unknown=True"):
        export_litert(unknown, str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not a LiteRT export"):
        export_litert(translators["luong"], str(tmp_path / "b"))


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_tfattn_export_format_litert(small_run, tmp_path, capsys):
    run, _ = small_run
    out = str(tmp_path / "lite")
    status, _, err = run_main(capsys, "export", "--model", run, "--out", out, "--format", "litert")
    assert status == 0, err
    texts = ["5 march 2019", "1 may 2020", "12/03/21"]
    want = saved_model_outputs(load(os.path.join(run, "export")).signatures["translate"], texts)
    assert_same_translations(LiteRTTranslator(out)(texts), want, "the run's checkpoint")


# -- ONNX, from the LiteRT model (tf2onnx converts it; the SavedModel it does not) ---------------------


class OnnxTranslator(LiteRTTranslator):
    """A LiteRT export's model converted to ONNX by tf2onnx and run by onnxruntime, with the export's
    tokenizers around it (as `LiteRTTranslator`)."""

    def __init__(self, path, onnx_path):
        import onnxruntime

        super().__init__(path)
        self.session = onnxruntime.InferenceSession(onnx_path)

    def translate_ids(self, source):
        feed = {self.session.get_inputs()[0].name: np.asarray(source, np.int32)}
        outputs = self.session.run(None, feed)
        by_rank = {value.ndim: value for value in outputs}  # ids (1, t_out), length (1,), attention (1, t_out, t_in)
        return {"ids": by_rank[2], "length": by_rank[1], "attention": by_rank[3]}


def to_onnx(litert_dir, out):
    """`python -m tf2onnx.convert --tflite DIR/model.tflite`, as docs/serving.md gives it."""
    pytest.importorskip("tf2onnx", reason="needs tf2onnx and onnxruntime (requirements.txt pins them)")
    pytest.importorskip("onnxruntime", reason="needs onnxruntime")
    result = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", os.path.join(litert_dir, MODEL_FILE),
                             "--output", out, "--opset", "17"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def onnx_luong(lite, tmp_path_factory):
    path = os.path.dirname(lite["luong"].model_path)
    return OnnxTranslator(path, to_onnx(path, str(tmp_path_factory.mktemp("onnx") / "luong.onnx")))


@pytest.mark.long  # tf2onnx's converter, a TensorFlow process of its own, over a LiteRT export: make test-long
def test_onnx_of_the_litert_model_gives_the_saved_models_tokens(onnx_luong, exported_dates):
    _, test = dates.make_corpus(0, 1000)
    texts = [s for s, _ in test[:40]]
    want = saved_model_outputs(shared_export(exported_dates).signatures["translate"], texts)
    assert_same_translations(onnx_luong(texts), want, "onnx")


# -- the whole test splits (make test-long) ------------------------------------------------------------


@pytest.mark.long  # three SavedModel exports and 3,000 LiteRT calls: minutes
@pytest.mark.parametrize("kind", KINDS)
def test_all_of_the_dates_test_split(lite, translators, kind, tmp_path, request):
    _, test = dates.make_corpus(0, 1000)  # the demo's held-out dates
    texts = [s for s, _ in test]
    # The session's export of the same translator where there is one (Luong, Bahdanau), else its own.
    session = {"luong": "exported_dates", "bahdanau": "exported_bahdanau"}.get(kind)
    saved = request.getfixturevalue(session) if session else export(translators[kind], str(tmp_path / kind))
    want = saved_model_outputs(load(saved).signatures["translate"], texts)
    assert_same_translations(lite[kind](texts), want, kind)
    path = os.path.dirname(lite[kind].model_path)
    onnx = OnnxTranslator(path, to_onnx(path, str(tmp_path / f"{kind}.onnx")))
    assert_same_translations(onnx(texts), want, f"{kind}, onnx")


@pytest.fixture(scope="module")
def spa_test_pairs():
    from tfattn.data.corpora import load_anki, split_pairs

    parts = split_pairs(load_anki(shared_data("spa-eng", "spa.txt")))  # TEST: line index i % 50 == 0
    return parts["train"], parts["test"]


def spa_word_translator(pairs, kind):
    """A word-level Spanish -> English model of `kind` with its initial (seeded) weights. Not trained:
    trained for seconds (190 steps), such a model says only `[END]` to every sentence of TEST, which
    would compare nothing; random weights give varied words, with gaps between the top logits far
    above the rounding in which LiteRT's and TensorFlow's kernels differ."""
    train = pairs[::15][:6000]
    source = tfattn.Tokenizer.adapt([s for s, _ in train], max_tokens=2000, max_length=24)
    target = tfattn.Tokenizer.adapt([t for _, t in train], max_tokens=1500, max_length=24)
    sizes = {} if kind == "transformer" else {"embedding_dim": 16}  # the Transformer's embedding is `units`
    model = tfattn.make_model(tfattn.ModelConfig(attention=kind, units=32, dropout=0.0, **sizes),
                              source.vocab_size, target.vocab_size)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=12))


@pytest.mark.long
@pytest.mark.parametrize("kind", KINDS)
def test_all_of_spa_eng_test_at_the_word_level(spa_test_pairs, kind, tmp_path):
    train, test = spa_test_pairs
    translator = spa_word_translator(train, kind)
    texts = [s for s, _ in test]
    want = saved_model_outputs(load(export(translator, str(tmp_path / "saved"))).signatures["translate"], texts)
    lite_dir = export_litert(translator, str(tmp_path / "lite"))
    assert_same_translations(LiteRTTranslator(lite_dir)(texts), want, f"spa-eng {kind}")
    assert len({t for tokens in want["tokens"] for t in tokens}) > 10  # varied words (the Transformer: 23)
    onnx = OnnxTranslator(lite_dir, to_onnx(lite_dir, str(tmp_path / "model.onnx")))
    assert_same_translations(onnx(texts), want, f"spa-eng {kind}, onnx")
