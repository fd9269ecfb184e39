"""masked_accuracy of both tiers (tfattn.model and tfattn.accel.losses) against NumPy.

The definition: the share of non-padding target positions (id != 0) whose argmax over the vocabulary
is the target; padding counts in neither the numerator nor the denominator; a batch without a real
token gives 0. On a tie the argmax is the first of the tied ids, as `np.argmax` takes it.
"""

import numpy as np
import pytest

from tfattn.accel.losses import masked_accuracy as fast_accuracy
from tfattn.model import masked_accuracy as reference_accuracy

ACCURACIES = {"model": reference_accuracy, "accel": fast_accuracy}


def numpy_accuracy(target_out, logits):
    mask = target_out != 0
    right = (np.argmax(logits, axis=-1) == target_out) & mask
    return right.sum() / max(mask.sum(), 1)


def last_index_argmax_accuracy(target_out, logits):
    """The same with ties broken towards the last id: what the test must tell apart."""
    vocab = logits.shape[-1]
    predicted = vocab - 1 - np.argmax(logits[..., ::-1], axis=-1)
    mask = target_out != 0
    return ((predicted == target_out) & mask).sum() / max(mask.sum(), 1)


@pytest.mark.parametrize("name", ACCURACIES)
def test_ties_go_to_the_first_id_and_padding_counts_nowhere(name):
    accuracy = ACCURACIES[name]
    # Row (1, 3, 3, 0): ids 1 and 2 tie; the argmax is 1.
    logits = np.array([[[1.0, 3.0, 3.0, 0.0]] * 3], "float32")  # (1, 3, 4)
    assert float(accuracy(np.array([[1, 1, 0]]), logits)) == 1.0  # 2 of 2 real tokens; padding not counted
    assert float(accuracy(np.array([[2, 2, 0]]), logits)) == 0.0
    assert float(accuracy(np.array([[1, 2, 0]]), logits)) == 0.5
    assert float(accuracy(np.array([[0, 0, 0]]), logits)) == 0.0  # no real token: 0, not NaN


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ACCURACIES)
def test_equals_numpy_on_random_logits_with_ties_and_padding(name, seed):
    rng = np.random.default_rng(seed)
    batch, t_out, vocab = 6, 9, 5
    # Integer logits in 0..2: most rows have tied maxima.
    logits = rng.integers(0, 3, size=(batch, t_out, vocab)).astype("float32")
    target_out = rng.integers(1, vocab, size=(batch, t_out))
    lengths = rng.integers(0, t_out + 1, size=batch)
    lengths[0] = 0  # one row all padding
    target_out[np.arange(t_out)[None, :] >= lengths[:, None]] = 0  # right padding
    # Where the padding's logits would put its argmax on 0 (counted as right if padding counted).
    logits[target_out == 0, 0] = 9.0
    expected = numpy_accuracy(target_out, logits)
    assert expected != last_index_argmax_accuracy(target_out, logits)  # the ties decide some positions
    assert (target_out == 0).sum() > 5 and 0 < expected < 1
    got = float(ACCURACIES[name](target_out, logits))
    assert got == pytest.approx(expected, rel=1e-6)
