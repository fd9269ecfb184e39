"""The offline demo: trained by steps, it stops once it reads held-out validation dates (`tfattn.demo`).

The fast tests check the early stop with a stand-in for the translations, and that the validation
dates are held out. The long test runs the demo with its own settings for both attention styles and
checks its promise: the reloaded export reads at least 99% of the 1,000 held-out test dates (dates
never seen in training) exactly right. Seen with seed 0, on 2 cores shared with other work: Luong
stopped at step 400 (validation 100.0%, test 100%), Bahdanau at step 300 (validation 99.5%, test 100%);
trained on without the stop, both first passed 99.5% between steps 250 and 350.
"""

import json
import shutil

import keras
import pytest
import tensorflow as tf

from tfattn import demo
from tfattn.data import dates
from tfattn.serving.translator import load


def test_validation_dates_are_held_out_from_training_and_testing():
    train, test = dates.make_corpus(3000, 200, seed=3)
    validation = demo.validation_pairs(train, 500, seed=3)
    assert len(validation) == 500 and validation == demo.validation_pairs(train, 500, seed=3)
    days = {target for _, target in validation}
    assert not days & {target for _, target in train} and not days & {target for _, target in test}
    assert len(days) > 400  # drawn from many days, not a few


def test_validation_needs_a_day_that_training_leaves():
    train_days, _ = dates.split_dates(seed=0)
    every_day = [("x", f"{d.year:04d}-{d.month:02d}-{d.day:02d}") for d in train_days]
    with pytest.raises(ValueError, match=r"no day is left to validate on.*Received: n_train=69397"):
        demo.validation_pairs(every_day, 10)


class Trainer:
    """What `EarlyStop` reads and sets of a `tfattn.training.trainer.Trainer`."""

    def __init__(self):
        self.steps_taken, self.stop_training = 0, False


class Validator:
    """Translates the validation pairs with `right[k]` of them right at its `k`-th call."""

    def __init__(self, pairs, right):
        self.pairs, self.right, self.calls = pairs, list(right), 0

    def translate(self, sources):
        right = self.right[self.calls]
        self.calls += 1
        return {"hypotheses": [t if i < right else "wrong" for i, (_, t) in enumerate(self.pairs)]}


PAIRS = [("5.3.19", "2019-03-05"), ("1 may 2020", "2020-05-01"), ("7/8/30", "1930-08-07"), ("x", "2000-01-01")]


def train(stop):
    """Steps until `stop` ends training (at most 100); the steps taken."""
    trainer = Trainer()
    while not trainer.stop_training and trainer.steps_taken < 100:
        trainer.steps_taken += 1
        stop(trainer, {})
    return trainer.steps_taken


def test_early_stop_validates_every_n_steps_and_stops_at_the_share():
    config = demo.DemoConfig(validate_every=2, stop_at=0.75, max_steps=10)
    lines = []
    stop = demo.EarlyStop(Validator(PAIRS, [1, 2, 3, 4]), PAIRS, config, echo=lines.append)
    assert train(stop) == 6
    assert stop.history == [(2, 0.25), (4, 0.5), (6, 0.75)]
    assert lines == ["step 2 of at most 10: validation exact match 25.0% (1 of 4 held-out dates)",
                     "step 4 of at most 10: validation exact match 50.0% (2 of 4 held-out dates)",
                     "step 6 of at most 10: validation exact match 75.0% (3 of 4 held-out dates); stopped: "
                     "validation exact match 75.0% >= 75.0%"]


def test_early_stop_ends_at_the_step_cap_and_validates_there():
    config = demo.DemoConfig(validate_every=4, stop_at=1.0, max_steps=6)
    stop = demo.EarlyStop(Validator(PAIRS, [3, 3]), PAIRS, config)
    assert train(stop) == 6
    assert stop.history == [(4, 0.75), (6, 0.75)] and stop.reason == "step cap 6 reached"


@pytest.mark.parametrize("field, value, message", [
    ("max_steps", 0, r"max_steps must be an int >= 1\. Received: max_steps=0"),
    ("validate_every", 2.5, r"validate_every must be an int >= 1\. Received: validate_every=2\.5"),
    ("n_validation", 0, r"n_validation must be an int >= 1\. Received: n_validation=0"),
    ("stop_at", 0.0, r"stop_at must be a share of exact matches in \(0, 1\]\. Received: stop_at=0\.0"),
    ("stop_at", 1.5, r"stop_at must be .* Received: stop_at=1\.5"),
    ("stop_at", float("nan"), r"stop_at must be .* Received: stop_at=nan"),
])
def test_demo_config_refuses_what_it_cannot_train_with(field, value, message):
    with pytest.raises(ValueError, match=message):
        demo.DemoConfig(**{field: value})


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("attention", ["luong", "bahdanau"])
def test_the_demo_reads_99_percent_of_held_out_dates(attention, tmp_path):
    config = demo.DemoConfig(attention=attention, out_dir=str(tmp_path), seed=0)
    keras.utils.set_random_seed(config.seed)
    summary = demo.run(config, quiet=True)
    assert 1 <= summary["steps"] <= config.max_steps
    if summary["steps"] < config.max_steps:  # stopped early: by the validation dates
        assert summary["validation_exact_match"] >= config.stop_at, summary

    # Scored here, from the export on disk and the held-out pairs, not by the demo's own count.
    _, test_pairs = dates.make_corpus(config.n_train, config.n_test, seed=config.seed)
    assert len(test_pairs) == 1000
    translate = load(summary["export"]).signatures["translate"]
    right = 0
    for i in range(0, len(test_pairs), 250):
        chunk = test_pairs[i:i + 250]
        out = translate(text=tf.constant([source for source, _ in chunk]))["text"].numpy()
        right += sum(text.decode("utf-8") == iso for text, (_, iso) in zip(out, chunk))
    assert right / len(test_pairs) >= 0.99, summary["errors_by_form"]
    assert summary["exact_match"] == round(right / len(test_pairs), 4)  # the demo reports what it got


@pytest.mark.parametrize("quiet, examples", [(True, 0), (False, 5)])
def test_quiet_prints_the_json_alone(dates_translator, exported_dates, tmp_path, monkeypatch, capsys, quiet, examples):
    config = demo.DemoConfig(n_test=8, out_dir=str(tmp_path))
    _, test_pairs = dates.make_corpus(40, config.n_test, seed=0)
    # The translator's export is the session's, copied (writing one takes seconds; this test is about lines).
    monkeypatch.setattr(demo, "export", lambda translator, path: shutil.copytree(exported_dates, path))
    monkeypatch.setattr(demo, "train_translator", lambda config, quiet: (dates_translator, test_pairs,
                                                                         {"seconds": 1.0, "loss": [1.0], "validation": [],
                                                                          "steps": 1, "stopped": "step cap 1 reached"}))
    demo.main(config, quiet=quiet)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == examples + 1 and " -> " not in lines[-1]
    assert set(json.loads(lines[-1])) >= {"exact_match", "export", "plot"}  # the summary, last
