"""The layers as someone else's Keras model uses them: Keras masks, the list form, argument checks
with messages in the package's axis names, NumPy sizes, dropout on the weights.

Expected values are worked out by hand: with equal scores, softmax over n real positions is 1/n each.
"""

import inspect
import warnings

import keras
import numpy as np
import pytest

from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder

LAYERS = {
    "bahdanau": lambda **kw: BahdanauAttention(4, **kw),
    "luong-general": lambda **kw: LuongAttention("general", **kw),
    "luong-dot": lambda **kw: LuongAttention("dot", **kw),
}
IDS = np.array([[5, 6, 7, 0, 0], [1, 2, 3, 4, 5]])  # sentence 0 has two padding positions


def functional_model(make_layer):
    """`Input -> Embedding(mask_zero=True) -> Bidirectional(GRU) -> attention`, no mask passed."""
    tokens, queries = keras.Input((None,), dtype="int32"), keras.Input((None, 6))
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    encoded = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True))(embedded)  # (batch, t_in, 6)
    context, weights = make_layer()(queries, encoded)
    return keras.Model([tokens, queries], [context, weights])


@pytest.mark.parametrize("name", LAYERS)
def test_padding_gets_exactly_zero_weight_from_the_keras_mask_alone(name):
    model = functional_model(LAYERS[name])
    context, weights = model([IDS, np.random.default_rng(0).normal(size=(2, 3, 6)).astype("float32")])
    weights = keras.ops.convert_to_numpy(weights)
    assert (weights[0, :, 3:] == 0).all()  # (batch, t_q, t_in): the padding of sentence 0
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert (weights[1] > 0).all()


def test_the_same_model_without_a_mask_would_attend_to_padding():
    # The test above can fail: with mask_zero=False the padding positions get weight.
    tokens, queries = keras.Input((None,), dtype="int32"), keras.Input((None, 6))
    encoded = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True))(
        keras.layers.Embedding(10, 4)(tokens))
    _, weights = BahdanauAttention(4)(queries, encoded)
    weights = keras.ops.convert_to_numpy(keras.Model([tokens, queries], weights)([IDS, np.ones((2, 3, 6))]))
    assert (weights[0, :, 3:] > 0).all()


def equal_scores_inputs():
    """A dot score of zero everywhere: a zero query. Values are one-hot rows, so the context reads the weights."""
    query = np.zeros((1, 2, 3), "float32")  # (batch, t_q, dq)
    value = np.eye(4, 3, dtype="float32")[None]  # (batch, t_in 4, dv 3); row 3 is zero
    return query, value


def test_value_mask_key_mask_and_query_mask_by_hand():
    query, value = equal_scores_inputs()
    layer = LuongAttention("dot")
    value_mask = np.array([[True, True, True, False]])
    key_mask = np.array([[True, False, True, True]])
    query_mask = np.array([[True, False]])
    context, weights = layer(query, value, value_mask=value_mask, key_mask=key_mask, query_mask=query_mask)
    # Positions 0 and 2 are real under both masks: 1/2 each. The masked query step gets zeros.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), [[[0.5, 0, 0.5, 0], [0, 0, 0, 0]]])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(context), [[[0.5, 0, 0.5], [0, 0, 0]]])


def test_the_list_form_takes_its_masks_as_keras_attention_does():
    query, value = equal_scores_inputs()
    mask = [np.array([[True, True]]), np.array([[True, True, False, False]])]
    _, weights = LuongAttention("dot")([query, value], mask=mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), [[[0.5, 0.5, 0, 0]] * 2])
    _, weights = LuongAttention("dot")([query, value, value])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), [[[0.25] * 4] * 2])


def test_mask_is_deprecated_and_still_masks_the_values():
    query, value = equal_scores_inputs()
    with pytest.warns(DeprecationWarning, match="value_mask"):
        _, weights = LuongAttention("dot")(query, value, mask=np.array([[True, False, False, False]]))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), [[[1, 0, 0, 0]] * 2])


def test_the_context_carries_the_query_mask():
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 6, mask_zero=True)(tokens)  # queries and values, masked
    context, _ = LuongAttention("dot")(embedded, embedded)
    pooled = keras.layers.GlobalAveragePooling1D()(context)  # averages over unmasked steps only
    model = keras.Model(tokens, [context, pooled])
    context, pooled = (keras.ops.convert_to_numpy(x) for x in model(IDS[:1]))
    np.testing.assert_allclose(pooled[0], context[0, :3].mean(0), rtol=1e-5)


@pytest.mark.parametrize("args, message", [
    ((np.ones((2, 16)), np.ones((2, 16, 16))), r"query must have shape \(batch, t_q, dq\), rank 3. Received: query.shape=\(2, 16\)"),
    ((np.ones((2, 1, 16)), np.ones((2, 7))), r"value must have shape \(batch, t_in, dv\), rank 3. Received: value.shape=\(2, 7\)"),
    ((np.ones((2, 1, 16)), np.ones((3, 7, 16))), r"value must have shape \(batch, t_in, dv\) with batch = 2, as in query. Received: value.shape=\(3, 7, 16\)"),
])
def test_wrong_shapes_name_the_argument_and_the_expected_axes(args, message):
    with pytest.raises(ValueError, match=message):
        BahdanauAttention(16)(*args)


@pytest.mark.parametrize("mask, message", [
    (np.ones((2, 1, 7), bool), r"value_mask must have shape \(batch, t_in\), rank 2. Received: value_mask.shape=\(2, 1, 7\)"),
    (np.ones((2, 6), bool), r"value_mask must have shape \(batch, t_in\) with t_in = 7, as in value. Received: value_mask.shape=\(2, 6\)"),
])
def test_a_wrong_mask_names_itself(mask, message):
    with pytest.raises(ValueError, match=message):
        LuongAttention("general")(np.ones((2, 1, 16)), np.ones((2, 7, 16)), value_mask=mask)


def test_shapes_are_checked_on_symbolic_inputs_too():
    with pytest.raises(ValueError, match=r"key must have shape \(batch, t_in, dk\) with t_in = 5, as in value"):
        BahdanauAttention(4)(keras.Input((1, 8)), keras.Input((5, 8)), key=keras.Input((6, 8)))


def test_numpy_integer_sizes_are_accepted_and_bools_refused():
    assert BahdanauAttention(np.int64(8)).units == 8 and isinstance(BahdanauAttention(np.int32(8)).units, int)
    assert Encoder(np.int64(10), np.int32(4), np.int64(6), num_layers=np.int64(2)).num_layers == 2
    with pytest.raises(ValueError, match="units must be a positive int. Received: units=True"):
        BahdanauAttention(True)


def test_dropout_on_the_weights_acts_only_in_training_and_keeps_padding_at_zero():
    query, value = np.zeros((1, 50, 3), "float32"), np.ones((1, 4, 3), "float32")
    value_mask = np.array([[True, True, True, False]])
    layer = LuongAttention("dot", dropout=0.5, seed=1)
    _, plain = layer(query, value, value_mask=value_mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(plain)[0], [[1 / 3, 1 / 3, 1 / 3, 0]] * 50, rtol=1e-6)
    _, dropped = layer(query, value, value_mask=value_mask, training=True)
    dropped = keras.ops.convert_to_numpy(dropped)[0]
    # Kept weights are scaled by 1 / (1 - 0.5): 2/3; dropped ones are 0; padding stays 0.
    assert np.all(np.isclose(dropped, 0.0) | np.isclose(dropped, 2 / 3, rtol=1e-6))
    assert (dropped[:, 3] == 0).all() and 0.3 < (dropped[:, :3] > 0).mean() < 0.7


def test_the_decoder_takes_the_source_mask_from_the_encoder_outputs():
    encoder = Encoder(10, 4, 6)
    decoder = Decoder(12, 4, 6, attention="luong")
    outputs, state, mask = encoder(IDS)
    target_in = np.array([[1, 4, 9], [1, 5, 2]])
    _, with_mask = decoder(target_in, outputs, state, mask)
    _, from_keras_mask = decoder(target_in, outputs, state)  # the outputs carry the mask
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(from_keras_mask), keras.ops.convert_to_numpy(with_mask))
    assert (keras.ops.convert_to_numpy(with_mask)[0, :, 3:] == 0).all()


def test_decoder_errors_name_the_argument():
    outputs, state, mask = Encoder(10, 4, 6)(IDS)
    with pytest.raises(ValueError, match=r"encoder_outputs_mask must have shape \(batch, t_in\) with t_in = 5"):
        Decoder(12, 4, 6)(np.array([[1, 4], [1, 5]]), outputs, state, np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"state\['h'\] must have shape \(batch, units\) with units = 8"):
        Decoder(12, 4, 8)(np.array([[1, 4], [1, 5]]), outputs, state, mask)


def test_no_deprecation_warning_on_the_new_names():
    query, value = equal_scores_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        LuongAttention("dot")(query, value, value_mask=np.array([[True] * 4]))
        Decoder(12, 4, 6, attention="luong", attention_layer=LuongAttention("dot"))


def public_layer_classes():
    import tfattn.layers

    return [getattr(tfattn.layers, name) for name in tfattn.layers.__all__
            if isinstance(getattr(tfattn.layers, name), type)]


@pytest.mark.parametrize("cls", public_layer_classes(), ids=lambda cls: cls.__name__)
def test_training_defaults_as_keras_writes_it(cls):
    # Keras' layers default `training` to None (taken from the call context: True inside `fit`),
    # its RNN cells to False (`keras.layers.RNN` passes it): the oracle is Keras' own signatures.
    keras_default = {True: inspect.signature(keras.layers.GRUCell.call).parameters["training"].default,
                     False: inspect.signature(keras.layers.MultiHeadAttention.call).parameters["training"].default}
    assert keras_default == {True: False, False: None}
    is_cell = hasattr(cls, "state_size")  # what keras.layers.RNN requires of a cell
    for method in ("call", "compute_output_spec"):
        parameters = inspect.signature(getattr(cls, method)).parameters
        if "training" in parameters and method in vars(cls):
            assert parameters["training"].default is keras_default[is_cell], f"{cls.__name__}.{method}"
