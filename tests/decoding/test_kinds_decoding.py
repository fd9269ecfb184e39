"""Decoding every model kind through the one loop: the tier each runs and the Transformer's step bound."""

import numpy as np
import pytest

import tfattn
from tfattn.config import resolve_accel
from tfattn.decoding.loop import DecodeConfig
from tfattn.decoding.search import beam_search, greedy

SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 2, 0, 0, 0]])


def model(**fields):
    return tfattn.make_model(tfattn.ModelConfig(units=8, embedding_dim=8, max_target_length=8, **fields), 20, 30)


@pytest.mark.parametrize("fields, fast", [
    (dict(attention="bahdanau"), True),
    (dict(attention="luong", score="cosine"), True),  # the fast decoder calls the layer itself
    (dict(attention="luong", heads=2), True),
    (dict(attention="luong", local="p"), False),
    (dict(attention="luong", hard=True), False),
    (dict(attention="bahdanau", encoder="transformer", heads=2), False),
    (dict(attention="transformer", heads=2), False),
    (dict(attention="none"), False),
])
def test_the_fast_tier_runs_only_the_models_it_has_code_for(fields, fast):
    m = model(**fields)
    assert resolve_accel(True, m) is fast
    assert resolve_accel(False, m) is False
    # Whatever the switch says, every kind decodes (the fast tier falls back to the reference).
    out = greedy(m, SOURCE, DecodeConfig(max_length=8), accel=True)
    assert out["ids"].shape[0] == 2 and out["attention"].shape[2] == SOURCE.shape[1]


def test_a_transformer_refuses_more_steps_than_its_cache_holds():
    m = model(attention="transformer", heads=2)
    assert greedy(m, SOURCE, DecodeConfig(max_length=8))["ids"].shape[1] <= 8
    for decode in (greedy, beam_search):
        with pytest.raises(ValueError, match=r"decoder.s max_length \(8: .*Received: max_length=9"):
            decode(m, SOURCE, config=DecodeConfig(max_length=9))
