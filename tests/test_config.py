"""The tier switch: `accel=None` everywhere follows `tfattn.config`; True or False wins over it."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tfattn
from tfattn import config
from tfattn.accel import decoding as fast_decoding
from tfattn.accel import seq2seq as fast
from tfattn.data.text import END_ID, START_ID


@pytest.fixture
def tiny_model():
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=4, units=6), 12, 11)
    return tfattn.model.ensure_built(model)


SOURCE = np.array([[START_ID, 5, 6, END_ID]], "int32")


def test_the_fast_tier_is_the_default_and_the_scope_restores_the_switch():
    assert config.accel_enabled()
    with pytest.raises(RuntimeError):
        with config.accel_scope(False):
            assert not config.accel_enabled() and config.resolve_accel(None) is False
            assert config.resolve_accel(True) is True  # an explicit choice wins
            raise RuntimeError("the switch is restored on the way out")
    assert config.accel_enabled()


@pytest.mark.parametrize("value", [1, "yes", 0.0])
def test_only_booleans_set_the_switch(value):
    with pytest.raises(ValueError, match=f"Received: enabled={value!r}"):
        config.set_accel(value)
    with pytest.raises(ValueError, match=f"Received: accel={value!r}"):
        config.resolve_accel(value)


@pytest.mark.parametrize("setting, expected", [("0", "False"), ("off", "False"), ("1", "True")])
def test_the_environment_variable_sets_the_default(setting, expected):
    env = {**os.environ, "TFATTN_ACCEL": setting}
    code = "import tfattn.config as c; print(c.accel_enabled())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.split()[-1] == expected, result.stderr


def spy(monkeypatch, module, name):
    """Counts the calls of `module.name` and lets them through."""
    calls, original = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("enabled, expected_calls", [(True, 1), (False, 0)])
def test_decoding_follows_the_switch(tiny_model, monkeypatch, enabled, expected_calls):
    calls = spy(monkeypatch, fast_decoding, "decode")
    with config.accel_scope(enabled):
        greedy_ids = tfattn.greedy(tiny_model, SOURCE)["ids"]
        tfattn.beam_search(tiny_model, SOURCE, beam_width=2)
    assert len(calls) == 2 * expected_calls
    with config.accel_scope(not enabled):  # an explicit accel= wins over the switch
        np.testing.assert_array_equal(tfattn.greedy(tiny_model, SOURCE, accel=enabled)["ids"], greedy_ids)
    assert len(calls) == 3 * expected_calls


@pytest.mark.parametrize("enabled", [True, False])
def test_training_follows_the_switch_and_the_trainer_records_the_choice(tiny_model, monkeypatch, enabled):
    calls = spy(monkeypatch, fast, "forward")
    with config.accel_scope(enabled):
        trainer = tfattn.Trainer(tiny_model, tfattn.TrainConfig(epochs=1), quiet=True)
        step = tfattn.make_train_step(tiny_model, tfattn.training.step.make_optimizer(tfattn.TrainConfig()))
    target = np.array([[START_ID, 7, 8, END_ID]], "int32")
    trainer.train_step(SOURCE, target), step(SOURCE, target)  # traced here, after the scope
    assert trainer.config.accel is enabled
    assert len(calls) == (2 if enabled else 0)


def test_a_translator_fixes_the_tier_when_it_is_made(tiny_model):
    tokenizer = tfattn.Tokenizer.adapt(["a b c"], level="word", max_length=8)
    with config.accel_scope(False):
        translator = tfattn.Translator(tiny_model, tokenizer, tokenizer)
    assert translator.accel is False
