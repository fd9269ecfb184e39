"""tfattn.accel.decoding.output_argmax: the masked branch, taken when padding or [START] wins a row.

Ids 0 (padding) and 2 ([START]) are never output; [UNK] (1) and [END] (3) are. Each expected token
below is read off its row by hand: the largest logit among the ids other than 0 and 2, the first
one on a tie (as `np.argmax`).
"""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel.decoding import output_argmax

#   id:      0     1     2     3     4     5
ROWS = [
    ([9.0, 1.0, 0.0, 2.0, 5.0, 4.0], 4),  # padding wins the raw argmax; 4 is next (5.0)
    ([0.0, 1.0, 7.0, 0.5, -1.0, 6.0], 5),  # [START] wins; 5 is next (6.0)
    ([8.0, -3.0, 8.0, -2.0, -4.0, -5.0], 3),  # padding and [START] tie on top; [END] (-2) beats [UNK] (-3)
    ([7.0, 3.0, 7.5, -1.0, 3.0, 2.0], 1),  # [START] wins; [UNK] and id 4 tie at 3.0: the first, [UNK]
    ([0.0, 0.0, 0.0, 2.0, 1.0, 3.0], 5),  # an ordinary row in the same batch keeps its argmax
]


@pytest.mark.parametrize("compiled", [False, True])
def test_rows_won_by_padding_or_start_get_the_best_output_token(compiled):
    fn = tf.function(output_argmax) if compiled else output_argmax
    logits = tf.constant([row for row, _ in ROWS], tf.float32)  # (5, 6)
    assert tf.argmax(logits, axis=-1).numpy().tolist() == [0, 2, 0, 2, 5]  # the raw argmax: the masked branch
    got = fn(logits)
    assert got.dtype == tf.int32
    assert got.numpy().tolist() == [token for _, token in ROWS]


@pytest.mark.parametrize("winner", [0, 2])
def test_a_single_row_won_by_a_reserved_id(winner):
    logits = np.full((1, 7), -1.0, np.float32)
    logits[0, winner], logits[0, 6] = 10.0, 0.5
    assert output_argmax(tf.constant(logits)).numpy().tolist() == [6]


def test_without_a_reserved_winner_it_is_the_plain_argmax():
    logits = tf.constant([[0.0, 1.0, 2.0, 5.0, 3.0], [1.0, 9.0, 0.0, 2.0, 2.0], [-1.0, -2.0, -3.0, -4.0, 0.5]])
    assert output_argmax(logits).numpy().tolist() == [3, 1, 4]
