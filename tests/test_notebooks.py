"""The notebooks: each one run top to bottom through a real Jupyter kernel, and committed without outputs.

Every notebook in notebooks/ follows one pattern (CONTRIBUTING.md says it for their authors):
- its first cell (Markdown) opens with the Open-in-Colab badge of its own path in the repository where
  tfattn is published, pyproject.toml's `[project.urls] Repository` (README.md and notebooks/README.md
  link the same, and the install cell installs from it: tests below check that they agree);
- its first code cell is the install cell, the same in every notebook but for its `REQUIREMENT` line;
- in a notebook that trains, the next code cell is the parameter cell, Colab form fields of its sizes;
- then the setup cell, which quiets TensorFlow before it loads and is the only cell that reads the
  quick switch (`TFATTN_NOTEBOOK_QUICK`);
- the solutions of its exercises sit in Markdown `<details>` blocks; they run here too, after the
  notebook, in the same kernel;
- one reading order (the tour, then 01, 02, ...): both READMEs list them so, and each notebook's last
  cell names the next.

Execution (marked `long` and `notebook`: make test-long, and make test-colab under Colab's versions;
.ci/run runs them in make test-colab only): a fresh `python3` kernel (ipykernel, this Python) per
notebook, working directory a temporary one, in quick mode, with MPLBACKEND=Agg, `TFATTN_SOURCE`
pointing the install cell at this checkout (no network), and neither TF_CPP_MIN_LOG_LEVEL nor
KERAS_BACKEND set, so that the notebook's own setup is what runs. A cell that raises fails the test
with the cell's index, the head of its source and the error.

    python tests/test_notebooks.py run notebooks/NAME.ipynb    # one notebook, with each cell's seconds
    python tests/test_notebooks.py run --full notebooks/NAME.ipynb    # as it comes (the form's sizes)
    python tests/test_notebooks.py strip notebooks/NAME.ipynb  # its outputs removed, before a commit
    python tests/test_notebooks.py repoint    # badges and pip URLs set from pyproject.toml's Repository
"""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbclient and ipykernel (the [test] extra)")
nbclient = pytest.importorskip("nbclient", reason="needs nbclient and ipykernel (the [test] extra)")
pytest.importorskip("ipykernel", reason="needs nbclient and ipykernel (the [test] extra)")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
QUICK_SWITCH = "TFATTN_NOTEBOOK_QUICK"
SOURCE_SWITCH = "TFATTN_SOURCE"


def project_urls():
    """pyproject.toml's `[project.urls]`, {label: URL}: where tfattn is published, named in one place."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib  # Python 3.11 and newer
    except ModuleNotFoundError:  # 3.10: the table's lines themselves
        table = text.split("[project.urls]", 1)[1].split("\n[", 1)[0]
        return dict(re.findall(r'^(\w+) = "([^"]+)"', table, re.MULTILINE))
    return tomllib.loads(text)["project"]["urls"]


REPOSITORY = project_urls()["Repository"]  # https://github.com/OWNER/NAME
# The pages that link the notebooks and the published repository: they must agree with REPOSITORY.
PAGES = [ROOT / "README.md", ROOT / "notebooks" / "README.md", ROOT / "CONTRIBUTING.md"]
# A repository on GitHub as links name it: github.com/OWNER/NAME, and Colab's github/OWNER/NAME/blob/...
GITHUB_REPOSITORY = re.compile(r"github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?(?=[/\s\")\]`'#]|$)")
COLAB_LINK = re.compile(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/([\w.-]+)/([\w./-]+\.ipynb)")
# A hang guard per cell, not a budget: the budget (3 minutes a notebook in quick mode) is measured.
CELL_TIMEOUT = 600
# What TensorFlow prints to stderr as it starts (absl's `E0000 00:00:...` lines, CUDA and oneDNN
# notices): a notebook sets its log level before TensorFlow loads, so none of it reaches a cell.
STARTUP_NOISE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|cuInit|oneDNN|TF_ENABLE_ONEDNN_OPTS|"
                           r"This TensorFlow binary is optimized|Unable to register cu")
# TensorFlow 2.21 writes a few lines through absl before it reads TF_CPP_MIN_LOG_LEVEL, under this
# heading; no setting silences them, so they are let through. Colab's TensorFlow 2.20 honours the level
# (make test-colab runs the notebooks under it, where the block does not appear).
BEFORE_ABSL_INIT = re.compile(r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
                              r"STDERR\n(?:I0000 [^\n]* (?:port|cudart_stub)\.cc:\d+\] [^\n]*\n)*")
# Grappler's warnings while it optimizes a graph with a decoding loop (a Softmax whose rank its own shape
# inference lost, tensorflow/tensorflow#50575; a loop's Merge node with a control input): harmless, and
# written through absl, which TensorFlow 2.20 (Colab's) starts without reading TF_CPP_MIN_LOG_LEVEL, so no
# setting silences them there; 2.21 honours the level. They are not start-up lines, and are let through.
GRAPPLER_WARNING = re.compile(r"^W\d{4} [\d:.]+ +\d+ (?:op_level_cost_estimator|loop_optimizer)\.cc:\d+\] ")
# A Colab form field: `NAME = 600  # @param {type:"integer"}`, `SIZE = "small"  # @param ["small", "full"]`.
FORM_FIELD = re.compile(r'[A-Z][A-Z0-9_]* = ("[^"]*"|True|False|-?[0-9.]+)  # @param (\{type:"[a-z]+"\}|\[.*\])')
REQUIREMENT_LINE = re.compile(r'^REQUIREMENT = "tfattn(\[[a-z,]+\])?"  # .*$', re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SOLUTION = re.compile(r"<details>.*?```python\n(.*?)```.*?</details>", re.DOTALL)


def colab_url(path):
    """The Open-in-Colab address of a notebook of notebooks/ in the published repository, branch main."""
    owner_name = REPOSITORY.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_name}/blob/main/notebooks/{Path(path).name}"


def load(path):
    return nbformat.read(path, as_version=4)


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def solutions(notebook):
    """The code of the exercises' hidden solutions: each ```python block inside a `<details>` block."""
    return [code for cell in notebook.cells if cell.cell_type == "markdown" for code in SOLUTION.findall(cell.source)]


def kernel_env():
    env = {**os.environ, QUICK_SWITCH: "1", "MPLBACKEND": "Agg", SOURCE_SWITCH: str(ROOT)}
    # The notebook's own setup runs, not the test suite's. And ipykernel sends what TensorFlow's C++
    # code writes to stderr into the cell's output, as on Colab, unless it finds PYTEST_CURRENT_TEST.
    for name in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    return env


def failure(path, what, cell, error):
    """The message of a cell that raised: which cell, the head of its source, and the error."""
    head = "\n".join(cell.source.splitlines()[:6])
    text = ANSI.sub("", str(error))
    # nbclient's message repeats the whole source between two rules of dashes; the error follows them.
    parts = text.split("------------------\n", 2)
    text = parts[2] if len(parts) == 3 else text
    return f"{path.name}: {what} raised\n--- source (head) ---\n{head}\n--- error ---\n{text.strip()[-6000:]}"


def execute(path, workdir, env=None, extra_cells=()):
    """Runs every code cell of the notebook at `path`, then `extra_cells` (code, appended as cells), in
    one fresh kernel.

    Returns the executed notebook, its code cells and `[(cell index, seconds)]`; raises AssertionError
    naming the cell that raised. Cell indices count every cell (Markdown too), from 0.
    """
    notebook = load(path)
    count = len(notebook.cells)
    notebook.cells += [nbformat.v4.new_code_cell(code) for code in extra_cells]
    cells = [(i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    seconds = []
    with client.setup_kernel(env=kernel_env() if env is None else env, cwd=str(workdir)):
        for index, cell in cells:
            start = time.perf_counter()
            try:
                client.execute_cell(cell, index)
            except (nbclient.exceptions.CellExecutionError, nbclient.exceptions.CellTimeoutError) as error:
                what = f"cell {index}" if index < count else f"extra cell {index - count} (an exercise's solution)"
                raise AssertionError(failure(path, what, cell, error)) from None
            seconds.append((index, time.perf_counter() - start))
    return notebook, [cell for _, cell in cells], seconds


def startup_noise(cell):
    """The lines of TensorFlow's start-up noise in the cell's stderr: an empty list where it is quiet."""
    stderr = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stderr")
    return [line for line in BEFORE_ABSL_INIT.sub("", stderr).splitlines()
            if STARTUP_NOISE.search(line) and not GRAPPLER_WARNING.match(line)]


@pytest.mark.long
@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel(path, tmp_path):
    notebook, cells, seconds = execute(path, tmp_path, extra_cells=solutions(load(path)))
    print(f"{path.name}: {sum(s for _, s in seconds):.1f} s in quick mode; slowest cells "
          f"{sorted(seconds, key=lambda c: -c[1])[:3]}")
    noisy = [(index, lines[0]) for (index, _), cell in zip(seconds, cells) if (lines := startup_noise(cell))]
    assert noisy == [], f"{path.name}: TensorFlow's start-up lines reached cells (cell index, line): {noisy}"


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"
    assert ROOT / "notebooks" / "01_attention_from_scratch.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    notebook = load(path)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {i} has outputs"
            assert cell.execution_count is None, f"{path.name}: cell {i} has execution_count {cell.execution_count!r}"
            assert "execution" not in cell.metadata, f"{path.name}: cell {i} keeps a run's timestamps"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_pattern_badge_install_cell_setup_cell(path):
    notebook = load(path)
    badge = colab_url(path)
    assert notebook.cells[0].cell_type == "markdown" and badge in notebook.cells[0].source, (
        f"{path.name}: the first cell should open with the Open-in-Colab badge, a link to {badge}")
    cells = code_cells(notebook)
    first = cells[0]
    template = code_cells(load(NOTEBOOKS[0]))[0].source
    assert REQUIREMENT_LINE.search(first.source), f"{path.name}: the install cell has no REQUIREMENT line"
    assert f'REPOSITORY = "{REPOSITORY}"  #' in template and '"git+{REPOSITORY}"' in template, (
        f"the install cell should install from {REPOSITORY} (pyproject.toml's Repository) by default")
    assert REQUIREMENT_LINE.sub("", first.source) == REQUIREMENT_LINE.sub("", template), (
        f"{path.name}: the install cell differs from {NOTEBOOKS[0].name}'s beyond its REQUIREMENT line")
    form = parameter_cell(notebook)
    setup = 2 if form else 1  # the setup cell's index among the code cells
    reading = [i for i, cell in enumerate(cells) if QUICK_SWITCH in cell.source]
    assert reading in ([], [setup]), f"{path.name}: {QUICK_SWITCH} is read in code cells {reading}, not the setup cell ({setup})"
    assert 'os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")' in cells[setup].source, (
        f"{path.name}: the setup cell should set TF_CPP_MIN_LOG_LEVEL before TensorFlow loads")
    # A notebook that trains (its setup reads the quick switch to shrink the training) shows its sizes as a form.
    assert form is not None or not reading, (
        f"{path.name} trains: its second code cell should be a parameter cell, Colab form fields of its sizes")


def parameter_cell(notebook):
    """The code cell after the install cell when it holds Colab form fields (`# @param`), else None."""
    cells = code_cells(notebook)
    return cells[1] if len(cells) > 2 and "# @param" in cells[1].source else None


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if parameter_cell(load(p))], ids=lambda p: p.name)
def test_a_parameter_cell_is_a_form_of_literals_and_nothing_else(path):
    cell = parameter_cell(load(path))
    title, *fields = cell.source.splitlines()
    assert title.startswith("#@title ") and cell.metadata.get("cellView") == "form", (
        f"{path.name}: the parameter cell should open with a #@title and show as a form (cellView: form)")
    assert fields and all(FORM_FIELD.fullmatch(line) for line in fields), (
        f"{path.name}: every line of the parameter cell should be a form field, NAME = literal  # @param ...: {fields}")
    values = {}
    exec(cell.source, values)  # literals only: the cell runs alone
    assert all(isinstance(values[line.split(" = ")[0]], (bool, int, float, str)) for line in fields)


def page_texts():
    """{name: text} of the pages and of every notebook (its cells' sources, joined)."""
    texts = {page.relative_to(ROOT).as_posix(): page.read_text(encoding="utf-8") for page in PAGES if page.exists()}
    for path in NOTEBOOKS:
        texts[f"notebooks/{path.name}"] = "\n".join(cell.source for cell in load(path).cells)
    return texts


def test_pages_and_notebooks_link_the_published_repository():
    owner_name = REPOSITORY.removeprefix("https://github.com/")
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPOSITORY), REPOSITORY
    urls = project_urls()
    assert all(url.startswith(REPOSITORY) for url in urls.values()), f"[project.urls] name another place: {urls}"
    texts = page_texts()
    assert {"README.md", "notebooks/README.md"} <= set(texts), sorted(texts)
    wrong = [(name, found) for name, text in texts.items() for found in GITHUB_REPOSITORY.findall(text)
             if found != owner_name]
    wrong += [(name, found) for name, text in texts.items() for found, _, _ in COLAB_LINK.findall(text)
              if found != owner_name]
    assert wrong == [], (f"links to another repository than pyproject.toml's {REPOSITORY} (fix them, or run "
                         f"`python tests/test_notebooks.py repoint`): {wrong}")
    assert f"git+{REPOSITORY}" in texts["README.md"], f"README.md should say `pip install ... git+{REPOSITORY}`"
    for name in ("README.md", "notebooks/README.md"):
        # Every notebook, in Colab, from branch main. (A page may name a notebook another branch brings.)
        linked = {Path(notebook).name for _, branch, notebook in COLAB_LINK.findall(texts[name]) if branch == "main"}
        missing = sorted({path.name for path in NOTEBOOKS} - linked)
        assert missing == [], f"{name} should open every notebook in Colab (branch main); it does not open {missing}"


def reading_order():
    """The one reading order: the tour (attention_tutorial), then the numbered notebooks in order."""
    tour = [path for path in NOTEBOOKS if path.name == "attention_tutorial.ipynb"]
    return tour + sorted(path for path in NOTEBOOKS if re.match(r"\d\d_", path.name))


def test_one_reading_order_in_the_pages_and_the_next_pointers():
    order = [path.name for path in reading_order()]
    assert order[:2] == ["attention_tutorial.ipynb", "01_attention_from_scratch.ipynb"] and set(order) == {
        path.name for path in NOTEBOOKS}, order
    sentence = "Start with the tour, `attention_tutorial.ipynb`, then notebooks 01 to 06 in order, then 07, the\nfailure gallery."
    for page in ("README.md", "notebooks/README.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert sentence.replace("\n", " ") in " ".join(text.split("\n")), f"{page} should say the reading order: {sentence!r}"
        start_here = text.split("## Start here", 1)[1].split("\n## ", 1)[0]
        first_seen = sorted(order, key=lambda name: start_here.find(name))
        assert all(name in start_here for name in order) and first_seen == order, (
            f"{page}'s Start here should list the notebooks in the reading order {order}: {first_seen}")
    for path, following in zip(reading_order(), reading_order()[1:]):
        last = load(path).cells[-1]
        pointers = [line for line in last.source.splitlines() if line.startswith("**Next:**")]
        assert last.cell_type == "markdown" and len(pointers) == 1 and f"`{following.name}`" in pointers[0], (
            f"{path.name}: its last cell should end with a **Next:** line naming `{following.name}`: {pointers}")


def test_solutions_are_found_in_details_blocks():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "**Exercise.** Add.\n\n<details><summary>Solution</summary>\n\n```python\nx = 1 + 1\n```\n\n</details>"),
        nbformat.v4.new_markdown_cell("```python\nnot_a_solution()\n```")])
    assert solutions(notebook) == ["x = 1 + 1\n"]


def test_startup_noise_is_found_and_grappler_warnings_are_let_through():
    # Lines as TensorFlow 2.20 wrote them into a cell of notebook 06 on CI, and a start-up line.
    grappler = ['W0000 00:00:1795711444.381506   24429 op_level_cost_estimator.cc:699] Error in PredictCost() '
                'for the op: op: "Softmax" attr { key: "T" value { type: DT_FLOAT } }',
                "W0000 00:00:1795711445.987141   24429 loop_optimizer.cc:934] Skipping loop optimization for "
                "Merge node with control input: cond/branch_executed/_90"]
    startup = "I0000 00:00:1795711740.177308    2737 port.cc:153] oneDNN custom operations are on."
    cell = nbformat.v4.new_code_cell("translator(examples)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="\n".join([*grappler, startup]) + "\n"),
                    nbformat.v4.new_output("stream", name="stdout", text=startup + "\n")]
    assert startup_noise(cell) == [startup]
    cell.outputs = cell.outputs[:1]
    cell.outputs[0].text = "\n".join(grappler) + "\n"
    assert startup_noise(cell) == []


def install_functions(monkeypatch, requirement, requires, have):
    """The install cell's functions, defined without running its install, over a Python whose tfattn
    lists `requires` and which has the distributions `have`, {name as pip writes it: version}."""
    source = code_cells(load(NOTEBOOKS[0]))[0].source
    namespace = {}
    exec(REQUIREMENT_LINE.sub(f'REQUIREMENT = "{requirement}"  # ', source[:source.index("\ninstalled = ")]), namespace)
    metadata = namespace["importlib"].metadata
    distributions = [types.SimpleNamespace(metadata={"Name": name}, version=v) for name, v in have.items()]
    monkeypatch.setattr(metadata, "requires", lambda name: requires)
    monkeypatch.setattr(metadata, "distributions", lambda: distributions)
    return namespace


def test_the_install_cell_finds_the_missing_requirements_of_its_extras(monkeypatch):
    # tfattn's metadata as pip may write it: markers with the extras in either quotes, a marker with
    # more than the extra, a self-reference, names spelled with dots, underscores and capitals, a
    # version outside its range.
    requires = ['tensorflow<2.22,>=2.20', 'keras<4,>=3.10', 'Matplotlib>=3.7; extra == "plot"',
                'sacrebleu>=2; extra == "eval"', "tensorflow_datasets; extra == 'data'",
                'zope.interface; extra == "plot" and python_version >= "3.8"', 'tfattn[eval,plot]; extra == "all"',
                'pytest; extra == "test"']
    have = {"tensorflow": "2.20.0", "keras": "3.13.2", "sacrebleu": "2.5.1"}
    install = install_functions(monkeypatch, "tfattn[plot,eval,data]", requires, have)
    assert install["extras_missing"]() == ["Matplotlib>=3.7", "tensorflow_datasets", "zope.interface"]
    install = install_functions(monkeypatch, "tfattn[eval]", requires, {**have, "sacrebleu": "1.5.1"})
    assert install["extras_missing"]() == ["sacrebleu>=2"]  # there, but too old
    install = install_functions(monkeypatch, "tfattn[data]", requires, {"Matplotlib": "3.9.0", "tensorflow-datasets": "4.9.9"})
    assert install["extras_missing"]() == []  # tensorflow_datasets is tensorflow-datasets
    assert install["versions"]() == {"matplotlib": "3.9.0", "tensorflow-datasets": "4.9.9"}
    install = install_functions(monkeypatch, "tfattn", requires, {})
    assert install["extras_missing"]() == []  # no extras: nothing of theirs is wanted


def run_install_cell(monkeypatch, workdir, pip_fails, notebook=NOTEBOOKS[0]):
    """Runs `notebook`'s install cell where tfattn is absent, in `workdir`, with pip replaced by a stand-in
    that fails (`pip_fails`) or succeeds without installing anything. Returns the pip commands it ran."""
    commands = []

    def pip(command, **kwargs):
        commands.append(command)
        stderr = "ERROR: Could not find a version that satisfies the requirement\n" if pip_fails else ""
        return subprocess.CompletedProcess(command, int(pip_fails), "", stderr)

    monkeypatch.setattr(subprocess, "run", pip)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # tfattn absent
    monkeypatch.chdir(workdir)
    exec(code_cells(load(notebook))[0].source, {})
    return commands


def test_the_install_cell_says_what_to_do_when_pip_cannot_install_tfattn(monkeypatch, tmp_path):
    monkeypatch.delenv(SOURCE_SWITCH, raising=False)
    with pytest.raises(RuntimeError) as raised:
        run_install_cell(monkeypatch, tmp_path, pip_fails=True)
    message = str(raised.value)
    assert message.startswith(f"pip could not install tfattn[plot] @ git+{REPOSITORY}:\nERROR: Could not find"), message
    # What to do instead, in order: (1) a wheel built in a clone and uploaded here, (2) TFATTN_SOURCE.
    steps = ["1. A wheel", "python -m build --wheel", str(tmp_path), "Files pane", "tfattn-*.whl", "2. TFATTN_SOURCE",
             "%env TFATTN_SOURCE="]
    found = [message.find(step) for step in steps]
    assert -1 not in found and found == sorted(found), list(zip(steps, found))
    assert "Check the network" not in message  # that does not help when the repository cannot be installed


def test_the_install_cell_installs_a_wheel_uploaded_beside_the_notebook(monkeypatch, tmp_path):
    monkeypatch.delenv(SOURCE_SWITCH, raising=False)
    older, newer = tmp_path / "tfattn-0.0.9-py3-none-any.whl", tmp_path / "tfattn-0.1.0-py3-none-any.whl"
    older.write_bytes(b"")
    newer.write_bytes(b"")
    os.utime(older, (1_000, 1_000))  # uploaded first
    commands = run_install_cell(monkeypatch, tmp_path, pip_fails=False)
    assert commands == [[sys.executable, "-m", "pip", "install", "-q", f"tfattn[plot] @ {newer.as_uri()}"]]
    # TFATTN_SOURCE wins over an uploaded wheel.
    monkeypatch.setenv(SOURCE_SWITCH, str(tmp_path / "clone"))
    commands = run_install_cell(monkeypatch, tmp_path, pip_fails=False)
    assert commands[0][-1] == f"tfattn[plot] @ {(tmp_path / 'clone').as_uri()}"


def test_an_empty_tfattn_source_is_unset_in_the_install_cell_and_the_data_cell(monkeypatch, tmp_path):
    # A folder whose parent holds shared/data/spa-eng/spa.txt, as a clone's does: were "" taken for the
    # current folder, the data cell would read that file and the install cell install the folder.
    spa = tmp_path / "shared" / "data" / "spa-eng" / "spa.txt"
    spa.parent.mkdir(parents=True)
    spa.write_text("Go.\tVe.\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "tfattn-0.1.0-py3-none-any.whl").write_bytes(b"")
    answers = {}
    for value in ("", None):
        if value is None:
            monkeypatch.delenv(SOURCE_SWITCH, raising=False)
        else:
            monkeypatch.setenv(SOURCE_SWITCH, value)
        installs = {path.name: run_install_cell(monkeypatch, tmp_path / "work", False, path)[0][-1]
                    for path in NOTEBOOKS}
        cell = next(c.source for c in code_cells(load(ROOT / "notebooks" / "04_spanish_to_english.ipynb"))
                    if "def spa_eng_file" in c.source)
        function = cell[cell.index("def spa_eng_file"):cell.index("\n\n\n", cell.index("def spa_eng_file"))]
        namespace = {"os": os, "Path": Path, "download_anki": lambda: "downloaded"}
        exec(function, namespace)
        answers[value] = (installs, namespace["spa_eng_file"]())
    assert answers[""] == answers[None]
    installs, data = answers[""]
    wheel = (tmp_path / "work" / "tfattn-0.1.0-py3-none-any.whl").as_uri()
    assert all(url.endswith(f" @ {wheel}") for url in installs.values()) and data == "downloaded", installs


@pytest.mark.long
@pytest.mark.notebook
def test_the_install_cell_stops_the_notebook_when_pip_fails(tmp_path):
    # The install branch, forced: find_spec answers that tfattn is absent, and the source does not exist,
    # so pip fails at once (no network, nothing installed).
    install = code_cells(load(NOTEBOOKS[0]))[0].source
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import importlib.util\nimportlib.util.find_spec = lambda name, *args: None"),
        nbformat.v4.new_code_cell(install), nbformat.v4.new_code_cell("print('not reached')")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "install.ipynb"
    nbformat.write(notebook, path)
    env = {**kernel_env(), SOURCE_SWITCH: str(tmp_path / "no-such-checkout")}
    with pytest.raises(AssertionError) as raised:
        execute(path, tmp_path, env=env)
    message = str(raised.value)
    assert "cell 1 raised" in message and "RuntimeError" in message, message
    assert "could not install tfattn" in message and "no-such-checkout" in message, message
    assert "No restart is needed" in message, message
    assert message.index("python -m build") < message.index("%env TFATTN_SOURCE="), message  # the other ways


def strip(path):
    """Writes the notebook at `path` back without outputs and execution counts."""
    notebook = load(path)
    for cell in code_cells(notebook):
        cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)  # the run's timestamps, which Jupyter and nbclient record
    nbformat.write(notebook, path)


def repoint():
    """Points every badge and pip URL of the pages and notebooks at pyproject.toml's Repository: each link
    of the repository the install cells name now becomes one of the new."""
    template = code_cells(load(NOTEBOOKS[0]))[0].source
    old = re.search(r'^REPOSITORY = "https://github\.com/([^"]+)"', template, re.MULTILINE).group(1)
    new = REPOSITORY.removeprefix("https://github.com/")
    for page in [p for p in PAGES if p.exists()]:
        page.write_text(page.read_text(encoding="utf-8").replace(f"github.com/{old}", f"github.com/{new}")
                        .replace(f"/github/{old}/blob/", f"/github/{new}/blob/"), encoding="utf-8")
    for path in NOTEBOOKS:
        notebook = load(path)
        for cell in notebook.cells:
            cell.source = cell.source.replace(f"github.com/{old}", f"github.com/{new}").replace(
                f"/github/{old}/blob/", f"/github/{new}/blob/")
        nbformat.write(notebook, path)
    print(f"github.com/{old} -> github.com/{new} in {len(PAGES)} pages and {len(NOTEBOOKS)} notebooks")


def main(argv):
    """`run [--full] PATH...`: each notebook as the test runs it (quick mode; `--full`: as it comes, the
    form's sizes), with its cells' seconds. `strip PATH...`. `repoint`: the badges and pip URLs from
    pyproject.toml."""
    if argv[:1] == ["repoint"]:
        return repoint()
    command, paths = (argv[0], argv[1:]) if argv and argv[0] in ("run", "strip") else ("run", argv)
    full = "--full" in paths
    paths = [p for p in paths if p != "--full"]
    env = {k: v for k, v in kernel_env().items() if k != QUICK_SWITCH} if full else None
    for path in map(Path, paths):
        if command == "strip":
            strip(path)
            continue
        with tempfile.TemporaryDirectory() as workdir:
            start = time.perf_counter()
            _, _, seconds = execute(path.resolve(), workdir, env, extra_cells=solutions(load(path)))
            print(f"{path.name} ({'as it comes' if full else 'quick'}): {time.perf_counter() - start:.1f} s with the "
                  "kernel's start; cells (index, s):", [(i, round(s, 1)) for i, s in seconds], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
