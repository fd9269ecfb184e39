"""The portable export (`tokenizer_ops="core"`, the default): it translates exactly what the
tensorflow-text export translates, its graph holds only core TensorFlow ops, and `saved_model_cli run`
runs it in a process where tensorflow_text is never imported.

"Core" means: registered in a fresh Python process that imported `tensorflow` and nothing else, as
`tensorflow.python.framework.op_def_registry.get(op)` (TensorFlow's C++ op registry, which every
runtime built from TensorFlow's own ops has) answers it. The text export's `CaseFoldUTF8` and
`NormalizeUTF8` are not.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from conftest import made_once, shared_data
from tfattn.data import dates
from tfattn.data.corpora import load_anki, split_pairs
from tfattn.serving.translator import export, load

# Run in a child process that has imported tensorflow only: lists every op type in the export's
# graph and in every function of its library (while bodies, cond branches, the tokenizers' functions,
# nested calls), and which of them TensorFlow's own op registry does not know.
LIST_OPS = """
import json, sys
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry
model = saved_model_pb2.SavedModel()
with open(sys.argv[1] + "/saved_model.pb", "rb") as f:
    model.ParseFromString(f.read())
ops = set()
for graph in model.meta_graphs:
    ops |= {node.op for node in graph.graph_def.node}
    for function in graph.graph_def.library.function:
        ops |= {node.op for node in function.node_def}
        functions = {f.signature.name for f in graph.graph_def.library.function}
ops -= functions  # a call of a library function by name is not an op
print(json.dumps({"ops": sorted(ops), "not_core": sorted(o for o in ops if op_def_registry.get(o) is None),
                  "tensorflow_text_imported": "tensorflow_text" in sys.modules}))
"""

# `saved_model_cli` as the installed command runs it, in a child process where importing
# tensorflow_text fails, so nothing can register its ops; the last line says whether it was imported.
SAVED_MODEL_CLI_WITHOUT_TEXT = """
import sys
class NoTensorflowText:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow_text":
            raise ImportError("tensorflow_text is blocked in this process")
sys.meta_path.insert(0, NoTensorflowText())
from tensorflow.python.tools.saved_model_cli import main
sys.argv[0] = "saved_model_cli"
try:
    main()
finally:
    print("tensorflow_text imported:", "tensorflow_text" in sys.modules)
"""


def child(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def op_listing(path):
    result = child("-c", LIST_OPS, path)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def outputs(fn, **inputs):
    return {k: v.numpy() for k, v in fn(**inputs).items()}


def assert_identical(got, want, what):
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{what}: output {key}")


@pytest.fixture(scope="module")
def dates_exports(dates_translator, exported_dates, tmp_path_factory):
    """The session's briefly trained dates translator, exported both ways: the session's export (core
    ops, the default) and one with tensorflow-text's ops, made once per session."""
    folder = made_once(tmp_path_factory, "export-dates-text",
                       lambda f: export(dates_translator, str(f / "text"), tokenizer_ops="text"))
    return {"core": exported_dates, "text": str(folder / "text")}


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_the_config_says_which_ops_each_tokenizer_uses(dates_exports):
    for ops, path in dates_exports.items():
        with open(os.path.join(path, "tfattn_config.json"), encoding="utf-8") as f:
            assert json.load(f)["tokenizer_ops"] == {"source": ops, "target": ops}


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_only_core_ops_in_the_portable_export(dates_exports):
    core, text = op_listing(dates_exports["core"]), op_listing(dates_exports["text"])
    assert not core["tensorflow_text_imported"]
    assert core["not_core"] == [], core["not_core"]
    # The listing sees into the library: the decoding loop's ops are there, and the text export's
    # tensorflow-text ops are found and named.
    assert {"While", "StatelessWhile"} & set(core["ops"]) and "LookupTableFindV2" in core["ops"]
    assert {"CaseFoldUTF8", "NormalizeUTF8"} <= set(text["not_core"]), text["not_core"]
    assert set(text["not_core"]) <= {"CaseFoldUTF8", "NormalizeUTF8"}, text["not_core"]
    # docs/serving.md lists both exports' ops: what this listing finds.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "serving.md"), encoding="utf-8") as f:
        page = f.read()
    for name, listing in (("core", core), ("text", text)):
        shown = re.search(f"<!-- ops: {name} -->(.*?)<!-- /ops -->", page, flags=re.S)
        assert shown and shown.group(1).replace("```", "").split() == listing["ops"], " ".join(listing["ops"])


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_the_portable_export_translates_the_dates_test_as_the_text_export(dates_exports):
    _, test = dates.make_corpus(0, 1000)  # the demo's held-out dates
    texts = [source for source, _ in test] + ["TUE 5 MARCH 2019", "Ｍａｒｃｈ ５", "", "  ", "ÉTÉ 2019"]
    core, text = load(dates_exports["core"]), load(dates_exports["text"])
    for i in range(0, len(texts), 256):
        batch = tf.constant(texts[i:i + 256])
        got = outputs(core.signatures["translate"], text=batch)
        assert_identical(got, outputs(text.signatures["translate"], text=batch), f"greedy, batch {i}")
        if i == 0:
            assert len(set(got["text"].tolist())) > 20, got["text"][:20]  # the model emits varied dates
    beam = dict(text=tf.constant(texts[:64] + texts[-5:]), beam_width=tf.constant(3), length_penalty=tf.constant(0.6))
    assert_identical(outputs(core.signatures["translate_beam"], **beam),
                     outputs(text.signatures["translate_beam"], **beam), "beam 3")


@pytest.fixture(scope="module")
def spa():
    parts = split_pairs(load_anki(shared_data("spa-eng", "spa.txt")))
    return parts["train"], parts["test"]


@pytest.mark.parametrize("level", ["word", "wordpiece"])
def test_the_core_tokenizer_gives_the_same_tokens_and_text_over_spa_eng_test(spa, level):
    """Both sides of TEST, as sources (tokens) and as targets (text from ids), words or WordPieces."""
    from tfattn.serving.core_text import CoreTokenizer

    train, test = spa
    for side in (0, 1):
        sample = train[::20] if level == "word" else train[::80]  # learning WordPieces takes longer
        text_tok = tfattn.Tokenizer.adapt([p[side] for p in sample], max_tokens=3000, max_length=40, level=level)
        core_tok = CoreTokenizer.like(text_tok)
        sentences = [p[side] for p in test]
        want_tokens, want_ids = text_tok.tokens_and_ids(sentences)
        got_tokens, got_ids = core_tok.tokens_and_ids(sentences)
        np.testing.assert_array_equal(got_tokens.numpy(), want_tokens.numpy())
        np.testing.assert_array_equal(got_ids.numpy(), want_ids.numpy())
        assert (core_tok.detokenize(want_ids).numpy() == text_tok.detokenize(want_ids).numpy()).all()
        if level == "wordpiece":  # words split into pieces: the check sees WordPiece at work
            assert sum(p.startswith(b"##") for p in set(want_tokens.numpy().ravel().tolist())) > 20


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_a_saved_core_wordpiece_tokenizer_holds_only_core_ops(spa, tmp_path):
    """The tokenizer alone, saved with its function: every op core, the tokens tensorflow-text's."""
    from tfattn.serving.core_text import CoreTokenizer

    train, test = spa
    text_tok = tfattn.Tokenizer.adapt([s for s, _ in train[::80]], max_tokens=2000, level="wordpiece")
    module = tf.Module()
    module.tokenizer = CoreTokenizer.like(text_tok, uses=("tokenize",))
    module.tokenize = tf.function(lambda texts: module.tokenizer.tokens_and_ids(texts)[0],
                                  input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "tokenizer"))
    listing = op_listing(str(tmp_path / "tokenizer"))
    assert listing["not_core"] == [] and "LookupTableFindV2" in listing["ops"], listing["not_core"]
    sentences = [s for s, _ in test[:300]] + ["", "Ｍａｒｃｈ", "x" * 120]
    got = tf.saved_model.load(str(tmp_path / "tokenizer")).tokenize(tf.constant(sentences)).numpy()
    np.testing.assert_array_equal(got, text_tok.tokens_and_ids(sentences)[0].numpy())
    assert b"##" in b" ".join(got.ravel().tolist())


@pytest.mark.long
@pytest.mark.parametrize("level", ["word", "wordpiece"])
def test_a_core_export_translates_spa_eng_test_as_the_text_export(spa, tmp_path, level):
    """An untrained Spanish -> English model of words or WordPieces over all of TEST, `[UNK]`s
    replaced by source tokens (so that Spanish words, accents recomposed, reach the output text)."""
    train, test = spa
    source = tfattn.Tokenizer.adapt([s for s, _ in train[::10]], max_tokens=2000, max_length=40, level=level)
    target = tfattn.Tokenizer.adapt([t for _, t in train[::10]], max_tokens=300, max_length=40, level=level)
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=8, units=16),
                              source.vocab_size, target.vocab_size)
    translator = tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=12), replace_unknown=True)
    core, text = (load(export(translator, str(tmp_path / ops), tokenizer_ops=ops)) for ops in ("core", "text"))
    with open(tmp_path / "core" / "tfattn_config.json", encoding="utf-8") as f:
        assert json.load(f)["tokenizer_ops"] == {"source": "core", "target": "core"}
    sentences = [s for s, _ in test]
    produced = set()
    for i in range(0, len(sentences), 512):
        batch = tf.constant(sentences[i:i + 512])
        got = outputs(core.signatures["translate"], text=batch)
        assert_identical(got, outputs(text.signatures["translate"], text=batch), f"greedy, batch {i}")
        produced |= set(got["tokens"].ravel().tolist())
    assert len(produced) > 30, sorted(produced)  # varied output tokens, replaced [UNK]s among them
    beam = dict(text=tf.constant(sentences[:128]), beam_width=tf.constant(4), length_penalty=tf.constant(0.6))
    assert_identical(outputs(core.signatures["translate_beam"], **beam),
                     outputs(text.signatures["translate_beam"], **beam), "beam 4")


def saved_model_cli_run(path, text):
    return child("-c", SAVED_MODEL_CLI_WITHOUT_TEXT, "run", "--dir", path, "--tag_set", "serve",
                 "--signature_def", "translate", "--input_exprs", f"text=[{text!r}]")


@pytest.mark.long  # saved_model_cli, a TensorFlow process of its own (5-20 s): make test-long
def test_saved_model_cli_runs_the_portable_export_without_tensorflow_text(dates_exports, dates_translator):
    expected = dates_translator(["5.3.19"])["text"][0].decode()
    result = saved_model_cli_run(dates_exports["core"], "5.3.19")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tensorflow_text imported: False" in result.stdout
    assert "Result for output key text:" in result.stdout and f"[b'{expected}']" in result.stdout, result.stdout
    # The same command on the tensorflow-text export fails: the check above can tell them apart.
    result = saved_model_cli_run(dates_exports["text"], "5.3.19")
    assert result.returncode != 0 and "Op type not registered 'CaseFoldUTF8'" in result.stderr, result.stderr[-3000:]


@pytest.mark.long  # a second saved_model_cli process, 15-30 s
def test_the_installed_saved_model_cli_command_runs_it(dates_exports, dates_translator):
    expected = dates_translator(["tue 5 march 2019"])["text"][0].decode()
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run([cli, "run", "--dir", dates_exports["core"], "--tag_set", "serve", "--signature_def",
                             "translate", "--input_exprs", "text=['tue 5 march 2019']"], capture_output=True,
                            text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"[b'{expected}']" in result.stdout, result.stdout


def test_tfattn_export_takes_the_tokenizer_ops(monkeypatch, capsys):
    from conftest import run_main
    from tfattn.runs import export as runs_export

    calls = []
    monkeypatch.setattr(runs_export, "export_run", lambda *args, **kwargs: calls.append(kwargs) or "out")
    for flags in ([], ["--tokenizer-ops", "text"], ["--tokenizer-ops", "core"]):
        assert run_main(capsys, "export", "--model", "run", "--out", "out", *flags)[0] == 0
    assert [call["tokenizer_ops"] for call in calls] == ["core", "text", "core"]
    status, _, err = run_main(capsys, "export", "--model", "run", "--out", "out", "--tokenizer-ops", "icu")
    assert status == 2 and "invalid choice: 'icu'" in err


def test_export_names_tokenizer_ops_it_does_not_know(tmp_path):
    with pytest.raises(ValueError, match=r"one of \('core', 'text'\). Received: tokenizer_ops='icu'"):
        export(None, str(tmp_path / "x"), tokenizer_ops="icu")  # checked before the translator is read
    assert not (tmp_path / "x").exists()
