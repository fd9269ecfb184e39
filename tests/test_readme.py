"""The README's API tour runs as printed: each ```python block of "A tour of the API", in order.

(The quick start trains for 705 steps; `make demo` and tests/test_cli.py cover what it
does.)
"""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def tour_blocks():
    text = README.read_text(encoding="utf-8")
    tour = text.split("## A tour of the API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", tour, flags=re.S)


def test_the_tour_has_the_attention_and_keras_mask_examples():
    blocks = tour_blocks()
    assert len(blocks) == 2
    assert "value_mask=" in blocks[0] and "mask_zero=True" in blocks[1]


def test_every_tour_block_runs_and_its_assertions_hold():
    namespace = {}
    for block in tour_blocks():
        exec(compile(block, str(README), "exec"), namespace)  # each block asserts its own result
    assert namespace["weights"].shape == (1, 3, 5)
