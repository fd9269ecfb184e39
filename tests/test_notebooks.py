"""The Colab tutorial: committed with its outputs stripped, and every code cell runs (in quick mode).

The code cells are joined into one script, without IPython magics (`%pip`, `%matplotlib`) and shell
lines (`!...`), and run in a fresh process from a temporary directory with `TFATTN_NOTEBOOK_QUICK=1`,
which the notebook reads to shrink its corpus and training to a few seconds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TUTORIAL = ROOT / "notebooks" / "attention_tutorial.ipynb"
QUICK_SWITCH = "TFATTN_NOTEBOOK_QUICK"


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def code_cells(notebook):
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def source_of(cell):
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def script_of(notebook):
    """The code cells as one Python script, lines starting with `%` or `!` left out."""
    lines = []
    for i, cell in enumerate(code_cells(notebook)):
        lines.append(f"# -- code cell {i} --")
        lines += [line for line in source_of(cell).splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines) + "\n"


def test_the_tutorial_is_there():
    assert TUTORIAL in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    notebook = load(path)
    assert notebook["nbformat"] == 4
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    cells = code_cells(notebook)
    assert cells, f"{path.name} has no code cells"
    for i, cell in enumerate(cells):
        assert cell["outputs"] == [], f"{path.name}: code cell {i} has outputs"
        assert cell["execution_count"] is None, (
            f"{path.name}: code cell {i} has execution_count {cell['execution_count']!r}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_compiles_and_reads_the_quick_switch_in_one_cell(path):
    notebook = load(path)
    compile(script_of(notebook), path.name, "exec")
    switches = [i for i, cell in enumerate(code_cells(notebook)) if QUICK_SWITCH in source_of(cell)]
    assert len(switches) == 1, f"{path.name}: {QUICK_SWITCH} read in code cells {switches}, not in one"


def test_tutorial_runs(tmp_path):
    script = tmp_path / "attention_tutorial.py"
    script.write_text(script_of(load(TUTORIAL)), encoding="utf-8")
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, QUICK_SWITCH: "1", "MPLBACKEND": "Agg", "TF_CPP_MIN_LOG_LEVEL": "3",
           "KERAS_BACKEND": "tensorflow", "PYTHONPATH": pythonpath}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, (
        f"the notebook failed (exit code {result.returncode})\n--- stdout ---\n{result.stdout[-3000:]}\n"
        f"--- stderr ---\n{result.stderr[-6000:]}")
    assert (tmp_path / "saved_models" / "dates-tutorial" / "saved_model.pb").is_file()
