"""Decoding every model kind through the one loop: the tier each runs and the Transformer's step bound."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.accel import seq2seq as fast_tier
from tfattn.decoding.loop import DecodeConfig
from tfattn.search import beam_search, greedy

SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 2, 0, 0, 0]])


def model(**fields):
    embedding = {} if fields.get("attention") == "transformer" else {"embedding_dim": 8}  # its embeddings: units
    return tfattn.make_model(tfattn.ModelConfig(units=8, max_target_length=8, **embedding, **fields), 20, 30)


@pytest.mark.parametrize("fields, fast", [
    (dict(attention="bahdanau"), True),
    (dict(attention="luong", score="cosine"), True),  # the fast decoder calls the layer itself
    (dict(attention="luong", heads=2), True),
    (dict(attention="luong", local="p"), True),  # so are local and hard attention
    (dict(attention="luong", local="m", hard=True), True),
    (dict(attention="bahdanau", encoder="transformer", heads=2), False),
    (dict(attention="transformer", heads=2), False),
    (dict(attention="none"), False),
])
def test_the_fast_tier_runs_only_the_models_it_has_code_for(fields, fast):
    m = model(**fields)
    assert fast_tier.choose(True, m) is fast
    assert fast_tier.choose(False, m) is False
    # Whatever the switch says, every kind decodes (the fast tier falls back to the reference).
    out = greedy(m, SOURCE, DecodeConfig(max_length=8), accel=True)
    assert out["ids"].shape[0] == 2 and out["attention"].shape[2] == SOURCE.shape[1]


def test_a_transformer_refuses_more_steps_than_its_cache_holds():
    m = model(attention="transformer", heads=2)
    assert greedy(m, SOURCE, DecodeConfig(max_length=8))["ids"].shape[1] <= 8
    for decode in (greedy, beam_search):
        with pytest.raises(ValueError, match=r"decoder.s max_length \(8: .*Received: max_length=9"):
            decode(m, SOURCE, config=DecodeConfig(max_length=9))


@pytest.mark.parametrize("fields", [dict(attention="luong"), dict(attention="transformer", heads=2)])
def test_the_reference_loop_traces_with_a_python_beam_width_and_static_shapes(fields):
    m = model(**fields)
    config = DecodeConfig(max_length=8)
    traced = tf.function(lambda s: beam_search(m, s, 3, config=config, accel=False))(tf.constant(SOURCE))
    eager = beam_search(m, SOURCE, 3, config=config, accel=False)
    for key in ("ids", "length"):
        np.testing.assert_array_equal(traced[key], eager[key])
    np.testing.assert_allclose(traced["scores"], eager["scores"], rtol=1e-5)


@pytest.mark.parametrize("accel", [True, False])
def test_source_ids_of_any_integer_type_and_a_clear_error_otherwise(accel):
    m = model(attention="luong")
    config = DecodeConfig(max_length=8)
    want = greedy(m, SOURCE.astype("int32"), config, accel=accel)["ids"]
    for ids in (SOURCE.astype("int64"), tf.constant(SOURCE, tf.int64), SOURCE.astype("uint8")):
        np.testing.assert_array_equal(greedy(m, ids, config, accel=accel)["ids"], want)
    with pytest.raises(ValueError, match="source must hold integer token ids. Received: source with dtype float32"):
        greedy(m, SOURCE.astype("float32"), config, accel=accel)
    with pytest.raises(ValueError, match=r"source must have shape \(batch, t_in\). Received: source.shape=\(6,\)"):
        greedy(m, SOURCE[0], config, accel=accel)
