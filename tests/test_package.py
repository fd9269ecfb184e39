"""The public names of the package."""

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import keras
import pytest

import tfattn
import tfattn.layers

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_public_name_resolves_to_what_its_module_defines():
    for name in set(tfattn.__all__) - {"tier"}:
        module = importlib.import_module(f"tfattn.{tfattn._EXPORTS[name]}")
        assert getattr(tfattn, name) is getattr(module, name), name


def layer_classes_defined_in_tfattn_layers():
    """Every public Keras layer class that a module of tfattn/layers defines (not an import of one)."""
    found = set()
    for info in pkgutil.iter_modules(tfattn.layers.__path__):
        module = importlib.import_module(f"tfattn.layers.{info.name}")
        found |= {name for name, value in vars(module).items()
                  if inspect.isclass(value) and issubclass(value, keras.layers.Layer)
                  and value.__module__ == module.__name__ and not name.startswith("_")}
    return found


def test_every_public_layer_is_importable_from_tfattn_as_from_tfattn_layers():
    public = set(tfattn.layers.__all__)
    assert layer_classes_defined_in_tfattn_layers() <= public
    assert public <= set(tfattn.__all__)
    for name in public:
        assert getattr(tfattn, name) is getattr(tfattn.layers, name), name


def test_every_layer_the_readme_names_is_importable_from_tfattn():
    # Backquoted CamelCase names of the README that tfattn.layers defines, e.g. `MultiHeadAttention`.
    named = set(re.findall(r"`([A-Z][A-Za-z]+)(?:\(|`|/)", README.read_text(encoding="utf-8")))
    layers = named & layer_classes_defined_in_tfattn_layers()
    assert {"BahdanauAttention", "MultiHeadAttention", "TransformerEncoder", "NoAttentionDecoder"} <= layers
    assert layers <= set(tfattn.__all__)


def test_export_stays_the_function_after_its_module_is_imported():
    import tfattn.serving.translator  # noqa: F401  (a submodule named like a public function would shadow it)

    assert tfattn.export is tfattn.serving.translator.export and callable(tfattn.export)


def run_python(code, cwd, argv0=None):
    """Runs `code` in a fresh Python process (as the script `argv0` if given); returns its stdout."""
    args = [sys.executable, "-c", code] if argv0 is None else [sys.executable, argv0]
    if argv0 is not None:
        (cwd / argv0).write_text(code)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(args, capture_output=True, text=True, timeout=180, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_import_tfattn_makes_every_layer_loadable_in_a_fresh_process(tmp_path):
    # One process saves a functional model holding the layers; another imports only tfattn and loads it.
    save = """
import keras, numpy as np
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
source, target = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
outputs, state, mask = Encoder(20, 4, 6)(source)
logits, attention = Decoder(22, 4, 6, attention="luong", attention_layer=LuongAttention("concat"))(target, outputs, state, mask)
context, weights = BahdanauAttention(5)(outputs, outputs)
model = keras.Model([source, target], [logits, weights])
model.save("m.keras")
ids = np.array([[3, 4, 5, 0]]), np.array([[1, 6, 7]])
np.save("expected.npy", keras.ops.convert_to_numpy(model(ids)[0]))
"""
    load = """
import keras, numpy as np
import tfattn
model = keras.saving.load_model("m.keras")
got = keras.ops.convert_to_numpy(model([np.array([[3, 4, 5, 0]]), np.array([[1, 6, 7]])])[0])
print(float(np.abs(got - np.load("expected.npy")).max()), type(model.layers[2]).__name__)
"""
    run_python(save, tmp_path)
    difference, name = run_python(load, tmp_path)
    assert float(difference) < 1e-6 and name in ("Encoder", "Decoder", "BahdanauAttention")


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_the_tfattn_command_parses_without_loading_tensorflow(tmp_path):
    # As the console script `bin/tfattn` runs: argv[0] is named tfattn.
    code = ("import sys; from tfattn.cli import build_parser; "
            "a = build_parser().parse_args(['train', '--out', 'r', '--time-budget', '15m']); "
            "print(a.time_budget, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    assert run_python(code, tmp_path, argv0="tfattn") == ["900.0", "False", "False"]
    # As `python -m tfattn.cli` imports the package (tests/processes.py starts the command so):
    # while Python looks for the module, sys.argv[0] is "-m".
    assert run_python("import sys; sys.argv[0] = '-m'; import tfattn; print('keras' in sys.modules)",
                      tmp_path) == ["False"]
    assert run_python("import sys, tfattn; print('keras' in sys.modules)", tmp_path) == ["True"]


def test_every_tf_function_of_the_package_is_traced_without_autograph():
    """The package writes its control flow out (`tf.while_loop`, `tf.cond`), so each `tf.function` it
    makes says `autograph=False`: autograph's rewrite of the Python would cost seconds at every first
    trace (docs/api.md, "Control flow is written out") and could hide a Python `if` on a tensor."""
    root = Path(tfattn.__file__).parent
    calls = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"tf\.function\b(\((?:[^()]|\([^()]*\))*\))?", text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
            if "`" in before or before.lstrip().startswith(("#", '"')):  # prose: a docstring or comment
                continue
            calls.append((f"{path.relative_to(root)}:{line}", match.group(0)))
    assert len(calls) >= 10, calls  # the scan finds the package's functions
    assert [where for where, call in calls if "autograph=False" not in call] == []
