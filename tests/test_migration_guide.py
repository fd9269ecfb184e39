"""docs/migrating-from-tfa.md runs as printed.

The guide's fences say what each block is:
- ```python: tfattn code. The blocks of one `## ` section run in order in one fresh namespace, each
  with its own small asserts; a ```text block right after one (blank lines between at most) is what
  it must print.
- ```python tfa: code for TensorFlow Addons, which is not installed: parsed, never run.
Any other python fence fails, so that a typo cannot quietly keep a block from running. Every
`tfattn.` name the guide writes in backticks must exist.
"""

import ast
import contextlib
import dataclasses
import importlib
import io
import pathlib
import re

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "migrating-from-tfa.md"
RUN, TFA, OUTPUT = "python", "python tfa", "text"
MIGRATIONS = 5  # sections 1-5 set a tfa snippet beside its tfattn equivalent; 6 is the table


@dataclasses.dataclass
class Block:
    section: str  # the `## ` heading above it
    info: str  # the fence's info string
    code: str
    line: int  # the block's first line of code in the guide, from 1
    output: str = None  # the ```text block that follows a ```python block


def read_blocks(text):
    """The guide's fenced blocks, in order, each with its section; output blocks are attached to
    the ```python block before them."""
    blocks, section, fence, previous_end = [], None, None, None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if fence is None and line.startswith("## "):
            section = line[3:].strip()
        elif fence is None and line.startswith("```"):
            fence = Block(section, line[3:].strip(), "", number + 1)
        elif fence is not None and line.startswith("```"):
            after_run = blocks and blocks[-1].info == RUN and blocks[-1].output is None
            if fence.info == OUTPUT and after_run and not "".join(lines[previous_end:fence.line - 2]).strip():
                blocks[-1].output = fence.code
            else:
                blocks.append(fence)
            fence, previous_end = None, number
        elif fence is not None:
            fence.code += line + "\n"
    assert fence is None, f"an unclosed fence at {GUIDE.name}:{fence.line - 1}"
    return blocks


BLOCKS = read_blocks(GUIDE.read_text(encoding="utf-8"))
SECTIONS = list(dict.fromkeys(b.section for b in BLOCKS if b.info == RUN))


def run_section(section):
    """Runs the section's ```python blocks in order in one namespace; returns the namespace."""
    namespace = {"__name__": "__guide__"}
    for block in (b for b in BLOCKS if b.section == section and b.info == RUN):
        # Blank lines in front, so that a traceback names the guide's own line numbers.
        code = compile("\n" * (block.line - 1) + block.code, str(GUIDE), "exec")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
        if block.output is not None:
            assert _lines(printed.getvalue()) == _lines(block.output), (
                f"{GUIDE.name}:{block.line} printed\n{printed.getvalue()}instead of\n{block.output}")
    return namespace


def _lines(text):
    return [line.rstrip() for line in text.strip().splitlines()]


# -- what the guide holds -------------------------------------------------------------------------


def test_every_fence_is_tfattn_tfa_or_output():
    for block in BLOCKS:
        assert block.info in (RUN, TFA, OUTPUT), f"{GUIDE.name}:{block.line - 1}: fence {block.info!r}"


def test_sections_1_to_5_show_tfa_first_then_tfattn():
    for number in range(1, MIGRATIONS + 1):
        section = next(s for s in dict.fromkeys(b.section for b in BLOCKS) if s.startswith(f"{number}. "))
        kinds = [b.info for b in BLOCKS if b.section == section and b.info in (RUN, TFA)]
        assert TFA in kinds and RUN in kinds, section
        assert kinds.index(TFA) < kinds.index(RUN), f"{section}: the tfa snippet comes first"


def test_tfa_snippets_are_python():
    for block in (b for b in BLOCKS if b.info == TFA):
        ast.parse(block.code, f"{GUIDE.name}:{block.line}")


def test_every_tfattn_block_checks_something():
    for block in (b for b in BLOCKS if b.info == RUN):
        tree = ast.parse(block.code)
        asserts = any(isinstance(node, ast.Assert) for node in ast.walk(tree))
        testing = "np.testing.assert_" in block.code
        assert asserts or testing or block.output is not None, f"{GUIDE.name}:{block.line} checks nothing"


def test_every_tfattn_name_in_backticks_exists():
    names = set()
    for span in re.findall(r"`([^`\n]+)`", GUIDE.read_text(encoding="utf-8")):
        names.update(re.findall(r"\btfattn(?:\.\w+)+", span))
    assert len(names) > 20
    for name in sorted(names):
        assert _resolve(name) is not None, name


def _resolve(dotted):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    return None


# -- the tfattn side runs -------------------------------------------------------------------------


def test_the_guide_has_runnable_sections():
    assert [s.split(".")[0] for s in SECTIONS] == ["1", "2", "3", "4", "5"]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: "section-" + s.split(".")[0])
def test_section_runs_and_prints_what_the_guide_shows(section):
    namespace = run_section(section)
    # A few results, read back from the section's own names.
    if section.startswith("1."):
        assert namespace["weights"].shape == (2, 1, 5)
    elif section.startswith("2."):
        assert namespace["alignments"].shape == (2, 3, 5)
    elif section.startswith("3."):
        assert namespace["beams"]["ids"].shape[:2] == (2, 4)
    elif section.startswith("4."):
        assert namespace["beams"]["scores"].shape == (2, 4)
    elif section.startswith("5."):
        assert float(namespace["loss"]) > 0.0
