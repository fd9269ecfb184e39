"""Inputs as clients send them, through the loaded export: `beam_width` as int32 or int64 and
`length_penalty` as float32 or float64 (still clamped), and blank texts for every model kind."""

import numpy as np
import pytest
import tensorflow as tf

from test_empty_inputs import BLANK, check_blank, translator
from tfattn.serving.translator import export, load
from conftest import shared_export

TEXTS = ["tue 5 march 2019", "5.3.19", "", "March 5th, 2019"]


def run(fn, *args):
    return {k: v.numpy() for k, v in fn(*args).items()}


@pytest.fixture(scope="module")
def loaded(exported_dates):
    return shared_export(exported_dates)


def signature_beam(loaded, width, alpha):
    """The `translate_beam` signature itself (int32, float32), as before this change."""
    return run(lambda: loaded.signatures["translate_beam"](text=tf.constant(TEXTS), beam_width=tf.constant(width),
                                                            length_penalty=tf.constant(alpha)))


@pytest.mark.parametrize("width_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("alpha_dtype", [tf.float32, tf.float64])
def test_beam_takes_64_bit_inputs(loaded, width_dtype, alpha_dtype):
    got = run(loaded.translate_beam, tf.constant(TEXTS), tf.constant(3, width_dtype), tf.constant(0.6, alpha_dtype))
    want = signature_beam(loaded, 3, 0.6)
    assert got["nbest_text"].shape == (4, 3)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("width,alpha,same_as", [
    (2**40, 0.6, (64, 0.6)),  # beyond int32: clamped, not wrapped around to 0
    (-2**40, 0.6, (1, 0.6)),
    (3, 1e300, (3, 5.0)),  # beyond float32: infinity, clamped to 5
    (3, float("nan"), (3, 0.0)),
    (3, -1e300, (3, 0.0)),
])
def test_64_bit_inputs_are_clamped(loaded, width, alpha, same_as):
    got = run(loaded.translate_beam, tf.constant(TEXTS), tf.constant(width, tf.int64), tf.constant(alpha, tf.float64))
    want = signature_beam(loaded, *same_as)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


KINDS = [("luong", "char", True), ("bahdanau", "char", True), ("luong", "wordpiece", True),
         ("bahdanau", "word", True)]


@pytest.mark.long  # an export each, 15-50 s
@pytest.mark.parametrize("attention,level,accel", KINDS)
def test_blank_texts_through_the_export_for_every_kind(attention, level, accel, tmp_path):
    """The kinds `test_empty_inputs.test_exported_signatures` does not export (the fast tier's
    stored weights, characters, WordPiece), through the portable export, greedy and beam (int64)."""
    loaded = load(export(translator(attention, level, accel), str(tmp_path / "export")))
    out = loaded.signatures["translate"](text=tf.constant(BLANK))
    check_blank({k: v.numpy() for k, v in out.items()}, range(3), mixed=False)
    out = run(loaded.translate_beam, tf.constant(BLANK + ["tue 5 march 2019"]), tf.constant(3, tf.int64),
              tf.constant(0.6, tf.float64))
    check_blank(out, range(3), mixed=True)
    assert out["length"][3] > 0
