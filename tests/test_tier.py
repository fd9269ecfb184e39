"""The tier switch: `accel=None` everywhere follows `tfattn.tier`; True or False wins over it."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tfattn
from tfattn import tier
from tfattn.accel import seq2seq as fast
from tfattn.data.text import END_ID, START_ID


@pytest.fixture
def tiny_model():
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=4, units=6), 12, 11)
    return tfattn.model.ensure_built(model)


SOURCE = np.array([[START_ID, 5, 6, END_ID]], "int32")


def test_the_fast_tier_is_the_default_and_the_scope_restores_the_switch():
    assert tier.accel_enabled()
    with pytest.raises(RuntimeError):
        with tier.accel_scope(False):
            assert not tier.accel_enabled() and tier.resolve(None) is False
            assert tier.resolve(True) is True  # an explicit choice wins
            raise RuntimeError("the switch is restored on the way out")
    assert tier.accel_enabled()


@pytest.mark.parametrize("value", [1, "yes", 0.0])
def test_only_booleans_set_the_switch(value):
    with pytest.raises(ValueError, match=f"Received: enabled={value!r}"):
        tier.set_accel(value)
    with pytest.raises(ValueError, match=f"Received: accel={value!r}"):
        tier.resolve(value)


@pytest.mark.parametrize("setting, expected", [("0", "False"), ("off", "False"), ("1", "True")])
def test_the_environment_variable_sets_the_default(setting, expected):
    # A fresh process reads the variable when it imports tfattn.tier: a leaf, loaded alone from its
    # file (importing the package would load TensorFlow first, for seconds, to no purpose here).
    env = {**os.environ, "TFATTN_ACCEL": setting}
    code = ("import importlib.util as u, sys; spec = u.spec_from_file_location('tier', sys.argv[1]); "
            "t = u.module_from_spec(spec); spec.loader.exec_module(t); print(t.accel_enabled())")
    result = subprocess.run([sys.executable, "-c", code, tier.__file__], capture_output=True, text=True, env=env,
                            timeout=120)
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
    calls = spy(monkeypatch, fast, "decode")  # the fast tier's door
    with tier.accel_scope(enabled):
        greedy_ids = tfattn.greedy(tiny_model, SOURCE)["ids"]
        tfattn.beam_search(tiny_model, SOURCE, beam_width=2)
    assert len(calls) == 2 * expected_calls
    with tier.accel_scope(not enabled):  # an explicit accel= wins over the switch
        np.testing.assert_array_equal(tfattn.greedy(tiny_model, SOURCE, accel=enabled)["ids"], greedy_ids)
    assert len(calls) == 3 * expected_calls


@pytest.mark.parametrize("enabled", [True, False])
def test_training_follows_the_switch_and_the_trainer_records_the_choice(tiny_model, monkeypatch, enabled):
    calls = spy(monkeypatch, fast, "forward")
    with tier.accel_scope(enabled):
        trainer = tfattn.Trainer(tiny_model, tfattn.TrainConfig(epochs=1), quiet=True)
        step = tfattn.make_train_step(tiny_model, tfattn.training.step.make_optimizer(tfattn.TrainConfig()))
    target = np.array([[START_ID, 7, 8, END_ID]], "int32")
    trainer.train_step(SOURCE, target), step(SOURCE, target)  # traced here, after the scope
    assert trainer.config.accel is enabled
    assert len(calls) == (2 if enabled else 0)


def test_a_translator_fixes_the_tier_when_it_is_made(tiny_model):
    tokenizer = tfattn.Tokenizer.adapt(["a b c"], level="word", max_length=8)
    with tier.accel_scope(False):
        translator = tfattn.Translator(tiny_model, tokenizer, tokenizer)
    assert translator.accel is False


def test_each_entry_point_chooses_the_tier_once(tiny_model, monkeypatch):
    """The tier is chosen where a user enters (the Trainer, the Translator, greedy) and handed down:
    training steps, validation and translations do not choose it again."""
    calls = spy(monkeypatch, fast, "choose")
    trainer = tfattn.Trainer(tiny_model, tfattn.TrainConfig(epochs=1), quiet=True)
    target = np.array([[START_ID, 7, 8, END_ID]], "int32")
    trainer.train_step(SOURCE, target), trainer.eval_step(SOURCE, target)  # traced here
    assert calls == ["choose"]
    tokenizer = tfattn.Tokenizer.adapt(["a b c"], level="word", max_length=8)
    translator = tfattn.Translator(tiny_model, tokenizer, tokenizer)
    translator(["a b"]), translator(["c"]), translator.beam(["a"], beam_width=2)
    assert calls == ["choose"] * 2
    tfattn.greedy(tiny_model, SOURCE)
    assert calls == ["choose"] * 3
