"""Serving the export: concurrent calls, `saved_model_cli`, and reusing the layers in Keras models."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn import BahdanauAttention, Seq2Seq
from conftest import shared_export

TEXTS = ["tue 5 march 2019", "", "5.3.19", "x" * 500, "March 5th, 2019", b"\xff\xfe", "😀", "2019 march 05"]


def call(signature, i):
    """Call number `i`: a batch of 1 to 3 of the mixed inputs, greedy or beam."""
    texts = [TEXTS[(i + j) % len(TEXTS)] for j in range(1 + i % 3)]
    if signature.get("beam"):
        out = signature["fn"](text=tf.constant(texts), beam_width=tf.constant(1 + i % 4),
                              length_penalty=tf.constant(0.6))
    else:
        out = signature["fn"](text=tf.constant(texts))
    return {k: v.numpy() for k, v in out.items()}


def test_eight_threads_get_the_single_threaded_results(exported_dates):
    loaded = shared_export(exported_dates)
    signatures = [{"fn": loaded.signatures["translate"]}, {"fn": loaded.signatures["translate_beam"], "beam": 1}]
    jobs = [(signatures[i % 2], i) for i in range(8 * 50)]
    expected = [call(s, i) for s, i in jobs[:24]]  # every distinct job: i % 24 decides the call
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda job: call(*job), jobs))
    for i, result in enumerate(results):
        for key, value in expected[i % 24].items():
            np.testing.assert_array_equal(result[key], value, err_msg=f"call {i}, output {key}")


# `saved_model_cli run` executes the graph, so the tensorflow-text ops must be registered first: the
# same `saved_model_cli` entry point, started by a Python that imported tensorflow_text (README).
WITH_TEXT_OPS = ("import sys, tensorflow_text; from tensorflow.python.tools.saved_model_cli import main; "
                 "sys.argv[0] = 'saved_model_cli'; sys.exit(main())")


def saved_model_cli(*args, text_ops=False):
    cli = [sys.executable, "-c", WITH_TEXT_OPS] if text_ops else [
        os.path.join(os.path.dirname(sys.executable), "saved_model_cli")]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([*cli, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.long  # saved_model_cli, a TensorFlow process of its own (5-20 s): make test-long
def test_saved_model_cli_show_lists_the_signatures(exported_dates):
    result = saved_model_cli("show", "--dir", exported_dates, "--all")
    assert result.returncode == 0, result.stderr
    for name in ("'translate'", "'translate_beam'", "'serving_default'"):
        assert f"signature_def[{name}]" in result.stdout
    for output in ("text", "tokens", "input_tokens", "attention", "length", "score", "nbest_text",
                   "nbest_score", "nbest_tokens", "nbest_attention"):
        assert f"outputs['{output}']" in result.stdout
    for given in ("text", "beam_width", "length_penalty"):
        assert f"inputs['{given}']" in result.stdout


@pytest.mark.long  # saved_model_cli, a TensorFlow process of its own (5-20 s): make test-long
def test_saved_model_cli_run_prints_a_translation(exported_dates, dates_translator):
    expected = dates_translator(["5 march 2019"])["text"][0].decode()
    result = saved_model_cli("run", "--dir", exported_dates, "--tag_set", "serve", "--signature_def",
                             "translate", "--input_exprs", "text=['5 march 2019']", text_ops=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert expected in result.stdout


def test_trained_model_keras_round_trip(dates_translator, tmp_path):
    model = dates_translator.model
    source = dates_translator.source_tokenizer(tf.constant(["5 march 2019", "tue 5 mar 2019"]))
    target_in = tf.constant([[2, 5, 6, 7], [2, 8, 9, 0]])
    logits, attention = model((source, target_in))
    model.save(tmp_path / "dates.keras")
    loaded = keras.saving.load_model(tmp_path / "dates.keras", safe_mode=True)
    assert isinstance(loaded, Seq2Seq)
    logits2, attention2 = loaded((source, target_in))
    np.testing.assert_array_equal(logits2.numpy(), logits.numpy())
    np.testing.assert_array_equal(attention2.numpy(), attention.numpy())


def test_bahdanau_attention_inside_a_functional_model_trains():
    """Reuse: a small classifier that attends over its inputs with a learned query."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)  # (batch, 6, 8)
    query = keras.layers.GlobalAveragePooling1D()(x)[:, None, :]  # (batch, 1, 8)
    context, weights = BahdanauAttention(8)(query, x, value_mask=tokens != 0)  # (batch, 1, 8), (batch, 1, 6)
    output = keras.layers.Dense(2, activation="softmax")(keras.layers.Flatten()(context))
    model = keras.Model(tokens, output)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    data = rng.integers(1, 20, size=(64, 6))
    labels = (data[:, 0] > 10).astype("int32")  # the class depends on the first token only
    history = model.fit(data, labels, epochs=20, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert model.evaluate(data, labels, verbose=0) < 0.3
