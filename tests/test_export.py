"""The exported SavedModel: its signature, robustness, and loading without tfattn."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfattn.export import CONFIG_FILE, load

OUTPUTS = {"text": tf.string, "tokens": tf.string, "input_tokens": tf.string, "attention": tf.float32,
           "length": tf.int32}
MIXED = ["tue 5 march 2019", "5.3.19", "", "   ", "x" * 10000, b"\xff\xfe\xc3(", "😀 🎉", "march 5th 2019",
         "\u202eمرحبا\u202c", "a\x00b\x07c\x1b[31m"]


def test_signature_names_and_types(exported_dates):
    loaded = load(exported_dates)
    assert set(loaded.signatures) == {"translate", "serving_default"}
    signature = loaded.signatures["translate"]
    assert list(signature.structured_input_signature[1]) == ["text"]
    outputs = signature.structured_outputs
    assert {k: v.dtype for k, v in outputs.items()} == OUTPUTS
    assert outputs["attention"].shape.rank == 3 and outputs["tokens"].shape.rank == 2


def test_config_file_is_written(exported_dates):
    config = json.loads(open(os.path.join(exported_dates, CONFIG_FILE), encoding="utf-8").read())
    assert config["source_tokenizer"]["level"] == "char" and config["decode"]["max_length"] == 14
    assert os.path.exists(os.path.join(exported_dates, "assets", CONFIG_FILE))


def test_bad_inputs_give_results_not_errors(exported_dates, dates_translator):
    translate = load(exported_dates).signatures["translate"]
    out = {k: v.numpy() for k, v in translate(text=tf.constant(MIXED)).items()}
    n = len(MIXED)
    assert out["text"].shape == (n,) and out["length"].shape == (n,)
    max_in = dates_translator.source_tokenizer.max_length
    assert out["input_tokens"].shape[1] == max_in  # the 10,000 characters are truncated
    assert out["input_tokens"][4, 0] == b"[START]" and out["input_tokens"][4, max_in - 1] == b"[END]"
    assert out["input_tokens"][2].tolist()[:3] == [b"[START]", b"[END]", b""]  # "" -> markers only
    for i, length in enumerate(out["length"]):
        assert 1 <= length <= 14
        assert out["tokens"][i, length - 1] == b"[END]" and (out["tokens"][i, length:] == b"").all()


def test_empty_batch(exported_dates):
    out = load(exported_dates).signatures["translate"](text=tf.constant([], tf.string))
    assert out["text"].shape == (0,) and out["length"].shape == (0,)
    assert out["attention"].shape[0] == 0 and out["tokens"].shape[0] == 0


def test_same_outputs_as_in_memory(exported_dates, dates_translator):
    loaded = load(exported_dates).signatures["translate"](text=tf.constant(MIXED))
    memory = dates_translator.translate(tf.constant(MIXED))
    for key in OUTPUTS:
        np.testing.assert_array_equal(loaded[key].numpy(), memory[key].numpy(), err_msg=key)


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
    out = tf.saved_model.load(sys.argv[1]).signatures["translate"](text=tf.constant(texts))
    np.savez(sys.argv[3], **{k: v.numpy() for k, v in out.items()})
""")


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
    memory = dates_translator.translate(tf.constant(texts))
    for key in OUTPUTS:
        np.testing.assert_array_equal(fresh[key], memory[key].numpy(), err_msg=key)


def test_load_refuses_a_directory_that_is_not_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="Not a SavedModel directory"):
        load(str(tmp_path))
