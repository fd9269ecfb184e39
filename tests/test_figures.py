"""notebooks/figures/make_figures.py: every figure of the notebooks draws, matches the committed PNG of
docs/figures/ (pixel for pixel where the same versions drew it), stays small, and is what the notebooks'
Markdown cells carry as attachments."""

import base64
import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (the [test] extra)")
pytest.importorskip("PIL", reason="needs Pillow, which matplotlib requires")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "notebooks" / "figures" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png(colour, size=(40, 30)):
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="png")
    return buffer.getvalue()


def test_every_figure_draws_and_agrees_with_docs_and_the_notebooks(figures):
    problems = figures.check()
    assert problems == [], "\n".join(problems) + "\n(python notebooks/figures/make_figures.py redraws and attaches)"


def test_the_notebooks_show_the_figures_the_issue_asks_for(figures):
    # Each idea drawn before any code runs, in the notebook that teaches it.
    wanted = {"01_attention_from_scratch.ipynb": {"attention-steps.png"},
              "03_bahdanau_and_luong.ipynb": {"when-they-attend.png", "local-windows.png", "hard-and-soft.png"},
              "06_attention_to_transformer.ipynb": {"multi-head.png", "transformer-block.png", "sinusoidal-positions.png"}}
    shown = {path.name: set(figures.ATTACHMENT.findall("\n".join(c.source for c in nbformat.read(path, 4).cells)))
             for path in figures.notebook_paths()}
    assert all(names <= shown[notebook] for notebook, names in wanted.items()), shown


def test_compare_finds_other_pixels_another_size_and_too_many_bytes(figures):
    white, grey = png("white"), png((250, 250, 250))
    assert figures.compare("a.png", white, white, exact=True) == []
    assert figures.compare("a.png", grey, white, exact=False) == []  # other versions: the size only
    assert figures.compare("a.png", grey, white, exact=True) == ["a.png: 100.00% of its pixels differ from the committed file"]
    # Other versions may round the size a pixel or two (figures.SIZE_SLACK is 2); more is another figure.
    assert figures.compare("a.png", png("white", (42, 29)), white, exact=False) == []
    assert figures.compare("a.png", png("white", (43, 30)), white, exact=False) == [
        "a.png: 43x30 pixels drawn, 40x30 committed"]
    assert figures.compare("a.png", png("white", (41, 30)), white, exact=True) == [
        "a.png: 41x30 pixels drawn, 40x30 committed"]
    big = white + b"\0" * figures.MAX_BYTES  # PNG readers stop at IEND: the same picture, too many bytes
    assert figures.compare("a.png", white, big, exact=True)[0].startswith("a.png: 80,")


def test_attaching_is_idempotent_and_the_check_sees_a_stale_attachment(figures, tmp_path, monkeypatch):
    cell = nbformat.v4.new_markdown_cell("A picture: ![steps](attachment:a.png)")
    notebook = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("no picture")])
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.png").write_bytes(png("white"))
    monkeypatch.setattr(figures, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(figures, "FIGURES", tmp_path / "figures")
    drawn = {"a.png": png("white")}
    assert figures.check_attachments(drawn) == ["n.ipynb cell 0: attachments [], references ['a.png']"]
    assert figures.attach(drawn) == {"n.ipynb": ["a.png"]}
    written = path.read_bytes()
    assert base64.b64decode(nbformat.read(path, 4).cells[0].attachments["a.png"]["image/png"]) == drawn["a.png"]
    figures.attach(drawn)
    assert path.read_bytes() == written  # nothing changes the second time
    assert figures.check_attachments(drawn) == []
    (tmp_path / "figures" / "a.png").write_bytes(png("black"))  # the committed file changed, the attachment not
    assert figures.check_attachments(drawn) == ["n.ipynb cell 0: a.png is not the committed file (run make_figures.py)"]
    assert figures.check_attachments({**drawn, "b.png": png("white")})[-1] == "b.png: drawn, but no notebook shows it"


def test_local_windows_follow_the_layers_positions(figures):
    # The picture's local-p windows sit where LuongAttention.predict_positions puts p_t: on the
    # positions the queries were made to read (ALIGN), a quarter past each.
    import tfattn

    query, value = figures.local_inputs()
    layer = tfattn.LuongAttention("dot", local="p", window=figures.WINDOW, units=1)
    layer(query, value)
    layer.w_p.assign(np.eye(query.shape[-1], 1, k=-(query.shape[-1] - 1), dtype="float32"))
    layer.v_p.assign(np.array([6.0], "float32"))
    positions = np.asarray(layer.predict_positions(query, source_length=value.shape[1]))[0]
    np.testing.assert_allclose(positions, np.array(figures.ALIGN) + 0.25, atol=1e-4)
