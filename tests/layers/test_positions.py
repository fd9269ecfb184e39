"""Positions: Vaswani's sinusoids (section 3.5) checked by hand and against a NumPy table, learned
positions, Shaw's clipped relative distances (eq. 5-6); and the bag-of-words fact: self-attention
without positions is permutation-equivariant, with any of the three kinds it is not.

Backend-neutral (no TensorFlow import).
"""

import math

import keras
import numpy as np
import pytest
from keras import ops
from keras.src import testing

from multihead_oracles import np_relative, np_sinusoids
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.positions import LearnedPositions, RelativePositions, SinusoidalPositions
from tfattn.layers.transformer import TransformerEncoder


def to_numpy(x):
    return ops.convert_to_numpy(x)


def test_sinusoids_by_hand():
    # dim 4: features 0, 1 have angle pos; features 2, 3 have angle pos / 10000^(2/4) = pos / 100.
    table = to_numpy(SinusoidalPositions()(np.zeros((1, 3, 4), "float32")))[0]
    want = [[0, 1, 0, 1],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]]
    np.testing.assert_allclose(table, want, atol=1e-6)


@pytest.mark.parametrize("dim", [6, 5])
def test_sinusoids_match_the_table_and_are_added(dim):
    x = np.random.default_rng(0).normal(size=(2, 7, dim)).astype("float32")
    out = to_numpy(SinusoidalPositions()(x))
    np.testing.assert_allclose(out - x, np.broadcast_to(np_sinusoids(range(7), dim), x.shape), atol=1e-5)


def test_given_positions_are_used_row_by_row():
    # A decoder step: row 0 at position 3, row 1 at position 10 (past any table: sinusoids have no limit).
    out = to_numpy(SinusoidalPositions()(np.zeros((2, 1, 6), "float32"), positions=np.array([[3], [10]])))
    np.testing.assert_allclose(out[:, 0], np_sinusoids([3, 10], 6), atol=1e-5)


def test_sinusoids_in_float16():
    out = to_numpy(SinusoidalPositions(dtype="float16")(np.zeros((1, 50, 8), "float16")))
    assert out.dtype == "float16"
    np.testing.assert_allclose(out[0], np_sinusoids(range(50), 8), atol=2e-3)


def test_learned_positions_add_their_rows_and_refuse_longer_inputs():
    layer = LearnedPositions(max_length=4)
    x = np.ones((2, 3, 5), "float32")
    out = to_numpy(layer(x))
    table = to_numpy(layer.table)
    assert table.shape == (4, 5)
    np.testing.assert_allclose(out, x + table[:3], atol=1e-7)
    out = to_numpy(layer(x[:, :1], positions=np.array([[3], [0]])))
    np.testing.assert_allclose(out[:, 0], 1 + table[[3, 0]], atol=1e-7)
    with pytest.raises(ValueError, match="max_length=4 positions"):
        layer(np.ones((2, 5, 5), "float32"))


def test_relative_distances_are_clipped_as_in_shaw():
    layer = RelativePositions(clip=2, key_dim=3, value_dim=2)
    a_key, a_value = map(to_numpy, layer(np.arange(4)[None], np.arange(6)[None]))
    assert a_key.shape == (1, 4, 6, 3) and a_value.shape == (1, 4, 6, 2)
    np.testing.assert_allclose(a_key[0], np_relative(to_numpy(layer.key_table), 2, range(4), range(6)))
    np.testing.assert_allclose(a_value[0], np_relative(to_numpy(layer.value_table), 2, range(4), range(6)))
    # By hand: query 0 and key 5 are 5 apart, clipped to 2: the last row of the table.
    np.testing.assert_array_equal(to_numpy(layer.distances(np.arange(4)[None], np.arange(6)[None]))[0, 0],
                                  [2, 3, 4, 4, 4, 4])
    assert RelativePositions(clip=2, key_dim=3)(np.arange(2)[None], np.arange(2)[None])[1] is None


@pytest.mark.parametrize("layer", [SinusoidalPositions(name="s"), LearnedPositions(7, name="l"),
                                   RelativePositions(3, 4, 2, name="r")])
def test_config_round_trip(layer):
    config = layer.get_config()
    assert type(layer).from_config(config).get_config() == config


class KerasHarness(testing.TestCase):
    def test_sinusoidal(self):
        self.run_layer_test(SinusoidalPositions, init_kwargs={}, input_shape=(2, 5, 6),
                            expected_output_shape=(2, 5, 6), expected_num_trainable_weights=0,
                            supports_masking=True)

    def test_learned(self):
        self.run_layer_test(LearnedPositions, init_kwargs={"max_length": 8}, input_shape=(2, 5, 6),
                            expected_output_shape=(2, 5, 6), expected_num_trainable_weights=1,
                            supports_masking=True)


# -- the bag of words ---------------------------------------------------------------------------

PERMUTATION = np.array([3, 0, 4, 1, 2])


def test_self_attention_alone_is_permutation_equivariant_and_relative_positions_break_it():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    plain, relative = MultiHeadAttention(2), MultiHeadAttention(2, relative_clip=2)
    for layer, equivariant in ((plain, True), (relative, False)):
        out = to_numpy(layer(x, x)[0])
        permuted = to_numpy(layer(x[:, PERMUTATION], x[:, PERMUTATION])[0])
        assert np.allclose(permuted, out[:, PERMUTATION], atol=1e-5) == equivariant


@pytest.mark.parametrize("positions", ["none", "sinusoidal", "learned", "relative"])
def test_the_encoder_is_a_bag_of_words_without_positions_only(positions):
    keras.utils.set_random_seed(0)
    encoder = TransformerEncoder(30, 8, num_heads=2, ff_dim=16, num_layers=2, positions=positions, max_length=8,
                                 relative_clip=2 if positions == "relative" else 16)
    if positions == "learned":  # their initial vectors are tiny (stddev 0.02): make them count
        encoder(np.ones((1, 5), "int32"))
        encoder.position_layer.table.assign(np.random.default_rng(1).normal(size=(8, 8)))
    source = np.array([[4, 9, 13, 21, 6]])
    outputs = to_numpy(encoder(source)[0])
    permuted = to_numpy(encoder(source[:, PERMUTATION])[0])
    equivariant = np.allclose(permuted, outputs[:, PERMUTATION], atol=1e-5)
    assert equivariant == (positions == "none")
