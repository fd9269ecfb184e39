"""MultiHeadAttention against a NumPy oracle written from Vaswani et al. 2017 (eq. 1, section 3.2.2)
and Shaw et al. 2018 (eq. 3-6): per-head projections, masks, causal order, relative positions; and
as the Luong attention of the RNN `Decoder`.

Backend-neutral (no TensorFlow import), like test_backends.py. Sizes: batch 2, t_q 3, t_in 4,
dq 6, dk 5, dv 8, heads 2.
"""

import inspect
import keras
import numpy as np
import pytest
from keras import ops
from keras.src import testing

from attention_oracles import set_weights
from multihead_oracles import np_multihead, np_relative
from tfattn.layers.attention import ScoredAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention

BATCH, T_Q, T_IN, DQ, DK, DV, HEADS = 2, 3, 4, 6, 5, 8, 2
MASK = np.array([[True, True, False, False], [True, True, True, True]])  # sentence 0: two padding positions


def to_numpy(x):
    return ops.convert_to_numpy(x)


def fixed(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).round(1).astype("float32")


def inputs(t_q=T_Q, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=s).astype(dtype) for s in [(BATCH, t_q, DQ), (BATCH, T_IN, DK), (BATCH, T_IN, DV)])


def built(layer, t_q=T_Q, key=True):
    """The layer, built on `inputs()`, with fixed weights; returns the layer and its weights by path."""
    query, key_in, value = inputs(t_q)
    layer(query, value, key=key_in if key else None)
    kd = layer.query_kernel.shape[-1]
    vd, out = layer.output_kernel.shape[1:]
    dk = DK if key else DV
    weights = {"query_kernel": fixed((DQ, HEADS, kd), 1), "key_kernel": fixed((dk, HEADS, kd), 2),
               "value_kernel": fixed((DV, HEADS, vd), 3), "output_kernel": fixed((HEADS, vd, out), 4)}
    if layer.relative is not None:
        weights["relative.key_table"] = fixed(layer.relative.key_table.shape, 5)
        if layer.relative_values:
            weights["relative.value_table"] = fixed(layer.relative.value_table.shape, 6)
    set_weights(layer, weights)
    return layer, {k: v.astype("float64") for k, v in weights.items()}


def oracle(w, query, key, value, allowed=None, clip=None, t_q=T_Q):
    a_key = a_value = None
    if clip:
        a_key = np_relative(w["relative.key_table"], clip, range(t_q), range(T_IN))
        if "relative.value_table" in w:
            a_value = np_relative(w["relative.value_table"], clip, range(t_q), range(T_IN))
    return np_multihead(query, key, value, w["query_kernel"], w["key_kernel"], w["value_kernel"],
                        w["output_kernel"], allowed, a_key, a_value)


SIZES = {  # key_dim, value_dim, output_dim
    "defaults": {},  # dq 6 / 2 heads = 3, dv 8 / 2 = 4, out = dv 8
    "given": {"key_dim": 5, "value_dim": 3, "output_dim": 7},
}


@pytest.mark.parametrize("t_q", [1, T_Q])
@pytest.mark.parametrize("sizes", SIZES)
def test_matches_the_per_head_oracle_with_padding(sizes, t_q):
    layer, w = built(MultiHeadAttention(HEADS, **SIZES[sizes]), t_q)
    query, key, value = inputs(t_q)
    context, mean = map(to_numpy, layer(query, value, key=key, value_mask=MASK))
    _, heads = map(to_numpy, layer(query, value, key=key, value_mask=MASK, return_heads=True))
    want_context, want_heads = oracle(w, query, key, value, MASK[:, None, :], t_q=t_q)
    out = SIZES[sizes].get("output_dim", DV)
    assert context.shape == (BATCH, t_q, out) and mean.shape == (BATCH, t_q, T_IN)
    assert heads.shape == (BATCH, HEADS, t_q, T_IN)
    np.testing.assert_allclose(heads, want_heads, atol=1e-6)
    np.testing.assert_allclose(mean, want_heads.mean(axis=1), atol=1e-6)  # documented: the mean over heads
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert (heads[0, :, :, 2:] == 0.0).all() and (mean[0, :, 2:] == 0.0).all(), "padding gets exactly 0"
    np.testing.assert_allclose(mean.sum(-1), 1.0, atol=1e-6)
    assert not np.allclose(heads[:, 0], heads[:, 1]), "the heads must differ (unshared projections)"


@pytest.mark.parametrize("causal", [False, True])
def test_matches_keras_multi_head_attention_with_the_same_weights(causal):
    # A second, independent oracle: Keras' own layer without biases, given our four kernels. (Keras'
    # layer on JAX needs key_dim == value_dim, hence 3 and 3.)
    x = inputs(T_IN)[2]  # self-attention on (batch, 4, 8), so that the causal mask applies
    ours = MultiHeadAttention(HEADS, key_dim=3, value_dim=3, output_dim=7)
    ours(x, x)
    keras_layer = keras.layers.MultiHeadAttention(HEADS, key_dim=3, value_dim=3, output_shape=7, use_bias=False)
    keras_layer(x, x)
    kernels = [fixed((8, HEADS, 3), 1), fixed((8, HEADS, 3), 2), fixed((8, HEADS, 3), 3), fixed((HEADS, 3, 7), 4)]
    set_weights(ours, dict(zip(["query_kernel", "key_kernel", "value_kernel", "output_kernel"], kernels)))
    for dense, kernel in zip([keras_layer.query_dense, keras_layer.key_dense, keras_layer.value_dense,
                              keras_layer.output_dense], kernels):
        dense.kernel.assign(kernel)
    context, heads = map(to_numpy, ours(x, x, value_mask=MASK, use_causal_mask=causal, return_heads=True))
    want_context, want_heads = map(to_numpy, keras_layer(x, x, attention_mask=np.broadcast_to(MASK[:, None, :], (
        BATCH, T_IN, T_IN)), use_causal_mask=causal, return_attention_scores=True))
    np.testing.assert_allclose(heads, want_heads, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)


def test_prepared_keys_and_values_give_the_same_numbers():
    # What the Decoder does: prepare_keys(value) once, then calls with prepared_keys and no key.
    layer = MultiHeadAttention(HEADS)
    query, key, value = inputs()
    want = [to_numpy(x) for x in layer(query, value, value_mask=MASK)]
    got = [to_numpy(x) for x in layer(query, value, value_mask=MASK, prepared_keys=layer.prepare_keys(value))]
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], atol=1e-7)
    # With a separate key, the values are projected from `value`, never from the key.
    layer = MultiHeadAttention(HEADS, value_dim=3)  # dk 5 != dv 8: value_kernel (8, 2, 3)
    want = [to_numpy(x) for x in layer(query, value, key=key)]
    prepared = {"keys": layer.project_keys(key), "values": None}
    got = [to_numpy(x) for x in layer(query, value, key=key, prepared_keys=prepared)]
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)


def test_causal_mask_puts_no_weight_on_later_positions():
    x = inputs(T_IN)[2]  # self-attention: query = key = value (batch, t 4, 8)
    layer = MultiHeadAttention(HEADS)
    layer(x, x)
    _, heads = map(to_numpy, layer(x, x, use_causal_mask=True, return_heads=True))
    later = np.triu(np.ones((T_IN, T_IN), bool), k=1)  # j > i
    assert (heads[:, :, later] == 0.0).all()
    assert (heads[:, :, ~later] > 0.0).all()
    # With padding too: the union of both masks; query step 0 of sentence 0 sees only itself.
    _, heads = map(to_numpy, layer(x, x, value_mask=MASK, use_causal_mask=True, return_heads=True))
    assert (heads[0, :, 0] == [1, 0, 0, 0]).all() and (heads[0, :, 3, 2:] == 0).all()


@pytest.mark.parametrize("relative_values", [True, False])
@pytest.mark.parametrize("clip", [1, 2])
def test_relative_positions_match_shaw_eq_3_to_5(clip, relative_values):
    # t_q 3, t_in 4: distances j - i run from -2 to 3, so clip 1 and clip 2 both clip some pairs.
    layer, w = built(MultiHeadAttention(HEADS, relative_clip=clip, relative_values=relative_values))
    query, key, value = inputs()
    context, heads = map(to_numpy, layer(query, value, key=key, value_mask=MASK, return_heads=True))
    want_context, want_heads = oracle(w, query, key, value, MASK[:, None, :], clip=clip)
    np.testing.assert_allclose(heads, want_heads, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    plain_context, plain_heads = oracle(w, query, key, value, MASK[:, None, :])
    assert not np.allclose(heads, plain_heads, atol=1e-3), "the relative term must change the scores"


def test_relative_positions_follow_the_given_positions():
    # One query at position 2 (a decoder step) sees the relative distances of row 2 of the full call.
    layer, w = built(MultiHeadAttention(HEADS, relative_clip=2), t_q=T_IN, key=True)
    query, key, value = inputs(T_IN)
    _, full = map(to_numpy, layer(query, value, key=key, return_heads=True))
    positions = np.full((BATCH, 1), 2, "int32")
    _, one = map(to_numpy, layer(query[:, 2:3], value, key=key, return_heads=True, query_positions=positions))
    np.testing.assert_allclose(one[:, :, 0], full[:, :, 2], atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_padding_exactly_zero_and_rows_sum_to_one(dtype):
    query, key, value = inputs(dtype=dtype)
    layer = MultiHeadAttention(HEADS, relative_clip=2, dtype=dtype)
    context, weights = map(to_numpy, layer(query * np.asarray(4, dtype), value, key=key, value_mask=MASK))
    assert context.dtype == dtype and np.isfinite(context).all()
    assert (weights[0, :, 2:] == 0.0).all()
    np.testing.assert_allclose(weights.astype("float64").sum(-1), 1.0, atol=5 * 2.0**-11)


def test_a_row_with_every_position_masked_gets_zero_weights_and_context():
    query, key, value = inputs()
    mask = np.array([[False] * T_IN, [True] * T_IN])
    context, weights = map(to_numpy, MultiHeadAttention(HEADS)(query, value, key=key, value_mask=mask))
    assert (weights[0] == 0).all() and (context[0] == 0).all()


def test_the_oracle_bites():
    # A planted error in the weights (one head's query kernel changed) is caught by the comparison.
    layer, w = built(MultiHeadAttention(HEADS))
    query, key, value = inputs()
    w["query_kernel"][:, 1] *= -1
    _, want = oracle(w, query, key, value)
    _, got = map(to_numpy, layer(query, value, key=key, return_heads=True))
    np.testing.assert_allclose(got[:, 0], want[:, 0], atol=1e-6)
    assert not np.allclose(got[:, 1], want[:, 1], atol=1e-3)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_heads": 4}, "num_heads must divide the key size"),  # dq 6
    ({"num_heads": 3, "key_dim": 2}, "num_heads must divide the value size"),  # dv 8
    ({"heads": 0}, "heads must be a positive int"),
    ({"relative_clip": -1}, "relative_clip must be a positive int"),
])
def test_bad_sizes_are_refused_naming_the_argument(kwargs, message):
    query, key, value = inputs()
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)(query, value, key=key)


@pytest.mark.parametrize("probability", ["hard", "sparse"])
def test_a_probability_other_than_soft_is_refused_not_ignored(probability):
    # Every head's weights are a softmax: hard attention would have been reported by get_config and
    # stayed soft (issue 43, defect 6).
    with pytest.raises(ValueError, match=f"soft attention only.*Received: probability='{probability}'"):
        MultiHeadAttention(probability=probability)
    assert MultiHeadAttention(probability="soft").get_config()["probability"] == "soft"


# -- Keras conventions ------------------------------------------------------------------------------


def test_is_a_scored_attention_and_round_trips_its_config():
    layer = MultiHeadAttention(3, key_dim=5, value_dim=2, output_dim=7, relative_clip=4, relative_values=False,
                               dropout=0.1, seed=3, name="mha")
    assert isinstance(layer, ScoredAttention)
    config = layer.get_config()
    assert MultiHeadAttention.from_config(config).get_config() == config
    assert {k: config[k] for k in ("num_heads", "key_dim", "value_dim", "output_dim", "relative_clip")} == {
        "num_heads": 3, "key_dim": 5, "value_dim": 2, "output_dim": 7, "relative_clip": 4}
    assert "heads" not in config


def test_num_heads_is_keras_name_and_heads_still_works_with_a_warning():
    # The argument Keras' own layer takes, by keyword: the same layer as ours by position.
    assert "num_heads" in inspect.signature(keras.layers.MultiHeadAttention).parameters
    assert MultiHeadAttention(num_heads=2).num_heads == MultiHeadAttention(2).num_heads == 2
    with pytest.warns(DeprecationWarning, match="renamed num_heads"):
        old = MultiHeadAttention(heads=2)
    assert old.num_heads == 2 and old.heads == 2
    with pytest.raises(ValueError, match="Give num_heads only"):
        MultiHeadAttention(num_heads=3, heads=2)


def test_a_config_saved_with_heads_still_loads():
    # A config as tfattn 0.1 wrote it (`heads`), here with 2 heads of (8 -> 4) projections: the
    # layer made from it has num_heads 2 and kernels of (8, 2, 4).
    old_config = {**MultiHeadAttention(2, name="old").get_config(), "heads": 2}
    del old_config["num_heads"]
    with pytest.warns(DeprecationWarning):
        layer = MultiHeadAttention.from_config(old_config)
    layer(np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32"))
    assert layer.num_heads == 2 and tuple(layer.query_kernel.shape) == (8, 2, 4)
    assert layer.get_config()["num_heads"] == 2


def functional_model():
    """`Input -> Embedding(mask_zero=True) -> MultiHeadAttention` with queries from a second input:
    the value mask comes from the Keras mask alone."""
    tokens, queries = keras.Input((None,), dtype="int32"), keras.Input((None, DQ))
    values = keras.layers.Embedding(10, DV, mask_zero=True)(tokens)
    context, weights = MultiHeadAttention(HEADS, relative_clip=2)(queries, values)
    return keras.Model([tokens, queries], [context, weights])


def test_functional_model_masks_padding_and_survives_keras_save_and_load(tmp_path):
    model = functional_model()
    ids = np.array([[3, 4, 0, 0], [1, 2, 3, 4]])
    query = inputs()[0]
    context, weights = map(to_numpy, model([ids, query]))
    assert (weights[0, :, 2:] == 0).all()
    model.save(tmp_path / "mha.keras")
    loaded = keras.saving.load_model(tmp_path / "mha.keras")
    again_context, again_weights = map(to_numpy, loaded([ids, query]))
    np.testing.assert_allclose(again_context, context, atol=1e-6)
    np.testing.assert_allclose(again_weights, weights, atol=1e-6)


class KerasHarness(testing.TestCase):
    def test_run_layer_test(self):
        self.run_layer_test(
            MultiHeadAttention, init_kwargs={"heads": HEADS, "relative_clip": 2},
            input_shape={"query_shape": (BATCH, T_Q, DQ), "value_shape": (BATCH, T_IN, DV),
                         "key_shape": (BATCH, T_IN, DK)},
            expected_output_shape=((BATCH, T_Q, DV), (BATCH, T_Q, T_IN)),
            expected_num_trainable_weights=6, expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0, run_training_check=False)  # its fit() passes a dict as one input


# -- as the Luong attention of the RNN decoder ------------------------------------------------------

SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])
TARGET_IN = np.array([[1, 4, 9, 0], [1, 12, 3, 7]])


@pytest.mark.parametrize("input_feeding", [True, False])
def test_the_rnn_decoder_takes_it_unchanged_and_stepping_equals_teacher_forcing(input_feeding):
    keras.utils.set_random_seed(1)
    outputs, state, mask = Encoder(11, 4, 8)(SOURCE)
    decoder = Decoder(13, 4, 8, attention="luong", attention_layer=MultiHeadAttention(num_heads=4),
                      input_feeding=input_feeding)
    logits, weights = map(to_numpy, decoder(TARGET_IN, outputs, state, mask))
    assert logits.shape == (2, 4, 13) and weights.shape == (2, 4, 5)
    assert (weights[0, :, 3:] == 0).all()
    memory, step_state = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
    for t in range(TARGET_IN.shape[1]):
        step_logits, step_weights, step_state = decoder.step(TARGET_IN[:, t], step_state, memory)
        np.testing.assert_allclose(to_numpy(step_logits), logits[:, t], atol=1e-5)
        np.testing.assert_allclose(to_numpy(step_weights), weights[:, t], atol=1e-6)
    config = decoder.get_config()
    assert Decoder.from_config(config).attention_layer.get_config() == decoder.attention_layer.get_config()
