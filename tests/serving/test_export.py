"""The exported SavedModel: its signature, robustness, and loading without tfattn."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfattn.serving.translator import CONFIG_FILE, load

from conftest import assert_same_outputs, shared_export

OUTPUTS = {"text": tf.string, "tokens": tf.string, "input_tokens": tf.string, "attention": tf.float32,
           "length": tf.int32}
BEAM_OUTPUTS = {**OUTPUTS, "score": tf.float32, "nbest_text": tf.string, "nbest_score": tf.float32,
                "nbest_tokens": tf.string, "nbest_attention": tf.float32}
MIXED = ["tue 5 march 2019", "5.3.19", "", "   ", "x" * 10000, b"\xff\xfe\xc3(", "😀 🎉", "march 5th 2019",
         "\u202eمرحبا\u202c", "a\x00b\x07c\x1b[31m"]


@pytest.mark.parametrize("name, inputs, outputs", [
    ("translate", {"text": tf.string}, OUTPUTS),
    ("serving_default", {"text": tf.string}, OUTPUTS),
    ("translate_beam", {"text": tf.string, "beam_width": tf.int32, "length_penalty": tf.float32}, BEAM_OUTPUTS),
    ("translate_text", {"text": tf.string}, {"text": tf.string}),
])
def test_signature_names_and_types(exported_dates, name, inputs, outputs):
    loaded = shared_export(exported_dates)
    assert set(loaded.signatures) == {"translate", "serving_default", "translate_beam", "translate_text"}
    signature = loaded.signatures[name]
    assert {k: v.dtype for k, v in signature.structured_input_signature[1].items()} == inputs
    got = signature.structured_outputs
    assert {k: v.dtype for k, v in got.items()} == outputs
    # Every output has its rank in the signature (`saved_model_cli show` prints it): a batch axis,
    # then output time, n-best or input time axes.
    ranks = {"text": 1, "tokens": 2, "input_tokens": 2, "attention": 3, "length": 1, "score": 1,
             "nbest_text": 2, "nbest_score": 2, "nbest_tokens": 3, "nbest_attention": 4}
    assert {k: v.shape.rank for k, v in got.items()} == {k: ranks[k] for k in outputs}


def test_config_and_vocabulary_assets(exported_dates, dates_translator):
    config = json.loads(open(os.path.join(exported_dates, CONFIG_FILE), encoding="utf-8").read())
    assert config["source_tokenizer"]["level"] == "char" and config["decode"]["max_length"] == 14
    assert config["accel"] is True  # the fast tier decodes, the default
    assert config["signatures"]["translate_beam"]["outputs"][-4:] == ["nbest_text", "nbest_score", "nbest_tokens",
                                                                     "nbest_attention"]
    assert config["signatures"]["translate_text"] == {"inputs": ["text"], "outputs": ["text"]}
    assets = os.path.join(exported_dates, "assets")
    assert sorted(os.listdir(assets)) == sorted([CONFIG_FILE, "source_vocab.txt", "target_vocab.txt"])
    lines = open(os.path.join(assets, "target_vocab.txt"), encoding="utf-8").read().split("\n")[:-1]
    assert lines[1:] == dates_translator.target_tokenizer.vocabulary[1:]  # line i holds id i


def beam_inputs(beam_width=4, length_penalty=0.6):
    return {"beam_width": tf.constant(beam_width, tf.int32), "length_penalty": tf.constant(length_penalty)}


@pytest.mark.parametrize("name, extra", [
    ("translate", {}),
    ("translate_beam", beam_inputs()),
    ("translate_beam", beam_inputs(0)),
    ("translate_beam", beam_inputs(-7)),
    ("translate_beam", beam_inputs(10**6)),  # larger than the vocabulary: clamped
    ("translate_beam", beam_inputs(3, float("nan"))),
])
def test_bad_inputs_give_results_not_errors(exported_dates, dates_translator, name, extra):
    translate = shared_export(exported_dates).signatures[name]
    out = {k: v.numpy() for k, v in translate(text=tf.constant(MIXED), **extra).items()}
    n = len(MIXED)
    assert out["text"].shape == (n,) and out["length"].shape == (n,)
    max_in = dates_translator.source_tokenizer.max_length
    assert out["input_tokens"].shape[1] == max_in  # the 10,000 characters are truncated
    assert out["input_tokens"][4, 0] == b"[START]" and out["input_tokens"][4, max_in - 1] == b"[END]"
    assert out["input_tokens"][2].tolist()[:3] == [b"[START]", b"[END]", b""]  # "" -> markers only
    blank = (out["input_tokens"] != b"").sum(axis=1) == 2  # [START] and [END] only: no source token
    assert blank.tolist()[2:4] == [True, True]  # "" and "   "
    for i, length in enumerate(out["length"]):
        if blank[i]:  # an empty translation (issue 31): no tokens, no text
            assert length == 0 and out["text"][i] == b"" and (out["tokens"][i] == b"").all()
            continue
        assert 1 <= length <= 14
        assert out["tokens"][i, length - 1] == b"[END]" and (out["tokens"][i, length:] == b"").all()


def test_beam_width_is_clamped_to_the_vocabulary(exported_dates, dates_translator):
    beam = shared_export(exported_dates).signatures["translate_beam"]
    vocab = dates_translator.target_tokenizer.vocab_size
    assert beam(text=tf.constant(["5.3.19"]), **beam_inputs(10**6))["nbest_text"].shape == (1, vocab)
    assert beam(text=tf.constant(["5.3.19"]), **beam_inputs(-7))["nbest_text"].shape == (1, 1)
    scores = beam(text=tf.constant(["5.3.19", "1 jan 2000"]), **beam_inputs(5))["nbest_score"].numpy()
    assert (np.diff(scores, axis=1) <= 0).all()  # n-best sorted, best first


@pytest.mark.parametrize("name, extra", [("translate", {}), ("translate_beam", beam_inputs())])
def test_empty_batch_and_a_batch_of_512(exported_dates, name, extra):
    translate = shared_export(exported_dates).signatures[name]
    out = translate(text=tf.constant([], tf.string), **extra)
    assert set(out) == set(BEAM_OUTPUTS if extra else OUTPUTS)
    assert all(v.shape[0] == 0 for v in out.values())
    big = [MIXED[i % len(MIXED)] for i in range(512)]
    out = translate(text=tf.constant(big), **extra)
    assert out["text"].shape == (512,)
    assert out["text"].numpy()[len(MIXED)] == out["text"].numpy()[0]  # the same sentence, the same answer


def in_memory(translator, name, texts, extra):
    if name == "translate":
        return translator.translate(tf.constant(texts))
    return translator.translate_beam(tf.constant(texts), extra["beam_width"], extra["length_penalty"])


@pytest.mark.parametrize("style", ["luong", "bahdanau"])  # Bahdanau: a second token table, the tanh layer's
@pytest.mark.parametrize("name, extra", [("translate", {}), ("translate_beam", beam_inputs())])
def test_same_outputs_as_in_memory(request, style, name, extra):
    export, translator = {"luong": ("exported_dates", "dates_translator"),
                          "bahdanau": ("exported_bahdanau", "bahdanau_translator")}[style]
    path, translator = request.getfixturevalue(export), request.getfixturevalue(translator)
    texts = MIXED + [source for source, _ in request.getfixturevalue("dates_data")[1][:30]]
    loaded = shared_export(path).signatures[name](text=tf.constant(texts), **extra)
    memory = in_memory(translator, name, texts, extra)
    assert_same_outputs({k: v.numpy() for k, v in loaded.items()}, {k: v.numpy() for k, v in memory.items()})


FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    sys.modules["tfattn"] = None  # any `import tfattn` now raises ImportError
    import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
    try:
        import tfattn  # noqa: F401
        raise SystemExit("tfattn is importable")
    except ImportError:
        pass
    texts = json.loads(sys.argv[2])
    signatures = tf.saved_model.load(sys.argv[1]).signatures
    greedy = signatures["translate"](text=tf.constant(texts))
    beam = signatures["translate_beam"](text=tf.constant(texts), beam_width=tf.constant(3),
                                        length_penalty=tf.constant(0.6))
    outputs = {**{"greedy_" + k: v for k, v in greedy.items()}, **{"beam_" + k: v for k, v in beam.items()}}
    np.savez(sys.argv[3], **{k: v.numpy() for k, v in outputs.items()})
""")


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_loads_and_runs_in_a_fresh_process_without_tfattn(exported_dates, dates_translator, tmp_path):
    moved = str(tmp_path / "moved")
    shutil.copytree(exported_dates, str(tmp_path / "copy"))
    shutil.move(str(tmp_path / "copy"), moved)  # the export does not depend on where it was written
    texts = [t for t in MIXED if isinstance(t, str)]
    script = tmp_path / "load.py"
    script.write_text(FRESH_PROCESS)
    result = tmp_path / "out.npz"
    env = {**os.environ, "PYTHONPATH": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, str(script), moved, json.dumps(texts), str(result)], check=True, env=env,
                   cwd=str(tmp_path), timeout=300)
    fresh = np.load(result, allow_pickle=True)
    greedy = in_memory(dates_translator, "translate", texts, {})
    beam = in_memory(dates_translator, "translate_beam", texts, beam_inputs(3, 0.6))
    expected = {**{"greedy_" + k: v for k, v in greedy.items()}, **{"beam_" + k: v for k, v in beam.items()}}
    assert_same_outputs({k: fresh[k] for k in fresh.files}, {k: v.numpy() for k, v in expected.items()})


def test_load_refuses_a_directory_that_is_not_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="Not a SavedModel directory"):
        load(str(tmp_path))


def test_the_export_stores_what_the_step_reads_made_ahead(exported_dates, dates_translator):
    loaded = shared_export(exported_dates)
    model = dates_translator.model
    decoder = model.decoder  # Luong style with input feeding, a GRU
    stored = {k: v.numpy() for k, v in loaded.decoding_weights.items()}
    assert set(stored) == {"gates_table", "kernel_rest", "input_bias", "recurrent_kernel", "recurrent_bias",
                           "hidden_kernel", "logits_kernel", "logits_bias"}  # Luong's tanh layer has no bias
    np.testing.assert_array_equal(stored["logits_kernel"], decoder.logits_dense.kernel.numpy())  # (units, vocab)
    # The embedding's share of the GRU's gates for every token; the input bias is added by the step,
    # with the fed h~'s product.
    emb = decoder.embedding_dim
    cell = decoder.rnn_layer.cell
    expected = decoder.embedding.embeddings.numpy() @ cell.kernel.numpy()[:emb]
    np.testing.assert_allclose(stored["gates_table"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(stored["kernel_rest"], cell.kernel.numpy()[emb:])  # the fed h~ still multiplies
    np.testing.assert_array_equal(stored["input_bias"], cell.bias.numpy()[0])
    # Of the model's own variables, only those the step does not replace: the encoder's and the attention's.
    own = model.encoder.variables + decoder.attention_layer.variables
    assert len(loaded.model_variables) == len(own) < len(model.variables)
    for got, variable in zip(loaded.model_variables, own):
        np.testing.assert_array_equal(got.numpy(), variable.numpy())
    assert dates_translator.decoding_weights == {}  # only the export's translator copies the weights


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_an_export_writes_no_info_lines_and_traces_each_function_once(dates_translator, tmp_path, monkeypatch):
    # As in a notebook, where TensorFlow sets its logger to INFO: tf.saved_model.save would log
    # "Assets written to: ..." there. And each signature's function is traced once: `save` gets every
    # function of the object again in its own context, which traced them all a second time.
    from tfattn.serving.translator import BEAM_OUTPUTS, OUTPUTS, TEXT_OUTPUTS, Translator, export

    traced = []
    unless_empty = Translator._unless_empty

    @tf.autograph.experimental.do_not_convert
    def counted(self, text, fn, names):
        traced.append(names)
        return unless_empty(self, text, fn, names)

    monkeypatch.setattr(Translator, "_unless_empty", counted)
    logger = tf.get_logger()
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        export(dates_translator, str(tmp_path / "export"))
        assert logger.level == logging.INFO
        logger.info("a line of the user's own")  # the handler sees INFO lines outside the export
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [r.getMessage() for r in records] == ["a line of the user's own"]
    # translate, translate_beam (its four dtype pairs call one graph), translate_text; one head: no translate_heads
    assert sorted(traced) == sorted([OUTPUTS, BEAM_OUTPUTS, TEXT_OUTPUTS]), traced


@pytest.fixture(scope="module")
def exported_reference(dates_translator, tmp_path_factory):
    """The Luong dates translator with `accel=False`, exported: the reference tier's decoding."""
    from tfattn.serving.translator import Translator, export

    t = dates_translator
    translator = Translator(t.model, t.source_tokenizer, t.target_tokenizer, t.decode_config, accel=False)
    return translator, export(translator, str(tmp_path_factory.mktemp("export") / "reference"))


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_a_reference_export_stores_nothing_ahead_and_translates_as_in_memory(exported_reference):
    translator, path = exported_reference
    config = json.loads(open(os.path.join(path, CONFIG_FILE), encoding="utf-8").read())
    assert config["accel"] is False
    loaded = load(path)
    assert len(loaded.decoding_weights) == 0  # the step reads the model's own variables, all of them
    assert len(loaded.model_variables) == len(translator.model.variables)
    for name, extra in [("translate", {}), ("translate_beam", beam_inputs())]:
        got = loaded.signatures[name](text=tf.constant(MIXED), **extra)
        want = in_memory(translator, name, MIXED, extra)
        assert_same_outputs({k: v.numpy() for k, v in got.items()}, {k: v.numpy() for k, v in want.items()}, name)


@pytest.mark.parametrize("make", [list, tuple, np.array, lambda texts: tf.constant(texts),
                                  lambda texts: [t.encode() for t in texts]])
def test_the_translator_takes_a_batch_in_any_of_its_forms(dates_translator, make):
    texts = ["tue 5 march 2019", "5.3.19"]
    expected = dates_translator(texts)["text"]
    assert expected.tolist() == dates_translator.translate(tf.constant(texts))["text"].numpy().tolist()
    np.testing.assert_array_equal(dates_translator(make(texts))["text"], expected)


def test_one_string_is_a_batch_of_one(dates_translator):
    one = dates_translator("5.3.19")
    assert one["text"].shape == (1,) and one["text"][0] == dates_translator(["5.3.19"])["text"][0]
    assert dates_translator.beam("5.3.19", beam_width=2)["nbest_text"].shape == (1, 2)


@pytest.mark.parametrize("texts, message", [
    ([["5.3.19"]], "texts must be one-dimensional, a batch of texts. Received: shape (1, 1)"),
    (["5.3.19", 7], "texts must be a list of str or bytes. Received an item 7 of type int"),
    (np.array([1, 2]), "texts must be a list of str or bytes. Received an item 1 of type int"),
])
def test_the_translator_names_a_batch_it_cannot_take(dates_translator, texts, message):
    texts = np.array(texts) if isinstance(texts, list) and isinstance(texts[0], list) else texts
    with pytest.raises(ValueError, match=re.escape(message)):
        dates_translator(texts)
