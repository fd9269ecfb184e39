"""The learning-rate schedule fitted to a time budget (`TrainConfig.decay_to_budget`)."""

import math

import pytest

from tfattn.training import trainer as trainer_module
from tfattn.training.trainer import TrainConfig, budget_learning_rate


@pytest.mark.parametrize("elapsed, share", [(0, 1.0), (30, 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi / 4))),
                                            (60, 0.505), (120, 0.01), (500, 0.01)])
def test_the_rate_follows_a_cosine_over_the_budget_down_to_one_percent(elapsed, share):
    config = TrainConfig(learning_rate=2e-3, time_budget=120, decay_to_budget=True)
    assert budget_learning_rate(config, elapsed) == pytest.approx(2e-3 * share)


def test_decay_to_budget_needs_a_budget():
    with pytest.raises(ValueError, match="decay_to_budget needs a time_budget. Received: time_budget=None"):
        TrainConfig(decay_to_budget=True)


@pytest.mark.parametrize("elapsed, step, share", [
    (60, 10, 0.505),   # half the budget, a tenth of the steps: the time decides
    (30, 50, 0.505),   # a quarter of the budget, half the steps: the steps decide
    (0, 100, 0.01),    # every step done at once: the cosine has ended
    (120, 0, 0.01),    # the budget used up
])
def test_with_decay_steps_too_the_cosine_follows_whichever_runs_out_first(elapsed, step, share):
    config = TrainConfig(learning_rate=2e-3, time_budget=120, decay_steps=100, decay_to_budget=True)
    assert budget_learning_rate(config, elapsed, step) == pytest.approx(2e-3 * share)


def test_each_step_trains_at_the_rate_of_its_time(monkeypatch, dates_data):
    """With a clock that moves 10 s per reading, every step sees a later time and a lower rate."""
    import tfattn

    train, _, source, target = dates_data
    clock = iter(range(0, 100_000, 10))
    monkeypatch.setattr(trainer_module.time, "perf_counter", lambda: next(clock))
    model = tfattn.make_model(tfattn.ModelConfig(embedding_dim=4, units=8), source.vocab_size, target.vocab_size)
    dataset = tfattn.make_dataset(train[:64], source, target, tfattn.DataConfig(batch_size=16, bucket=False))
    config = TrainConfig(learning_rate=1e-2, time_budget=1000, decay_to_budget=True, epochs=1)
    trainer = trainer_module.Trainer(model, config, quiet=True)
    rates = []
    trainer.fit(dataset, on_step=lambda t, logs: rates.append(float(t.optimizer.learning_rate)))
    assert len(rates) == 4  # 64 pairs in batches of 16
    assert rates == sorted(rates, reverse=True) and len(set(rates)) == 4
    readings = [budget_learning_rate(config, elapsed) for elapsed in range(0, 1000, 10)]
    for rate in rates:  # each one is the schedule's rate at some reading of the clock
        assert min(abs(rate - r) for r in readings) < 1e-9, rate


@pytest.mark.parametrize("elapsed, share", [(0, 1.0), (60, 0.3 + 0.7 * 0.5), (120, 0.3), (500, 0.3)])
def test_decay_alpha_is_where_the_budget_cosine_ends(elapsed, share):
    """Keras' CosineDecay alpha: peak * (alpha + (1 - alpha) * (1 + cos(pi * t / T)) / 2), by hand at
    alpha 0.3: the peak at 0, 0.65 of it half-way, 0.3 of it at the budget and after."""
    config = TrainConfig(learning_rate=2e-3, time_budget=120, decay_to_budget=True, decay_alpha=0.3)
    assert budget_learning_rate(config, elapsed) == pytest.approx(2e-3 * share)


def test_decay_alpha_is_where_the_step_cosine_ends():
    """Over `decay_steps` the same alpha goes to Keras' own CosineDecay: the peak at step 0, 0.65 of it at
    step 50 of 100, 0.3 of it from step 100 on."""
    from tfattn.training.schedules import learning_rate

    schedule = learning_rate(TrainConfig(learning_rate=2e-3, decay_steps=100, decay_alpha=0.3))
    assert [float(schedule(step)) for step in (0, 50, 100, 400)] == pytest.approx([2e-3, 1.3e-3, 6e-4, 6e-4])


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.3", True, None])
def test_decay_alpha_must_be_a_fraction(alpha):
    with pytest.raises(ValueError, match=r"decay_alpha must be a number in \[0, 1\]. Received: decay_alpha="):
        TrainConfig(decay_alpha=alpha)


def test_decay_to_budget_needs_the_cosine_schedule():
    with pytest.raises(ValueError, match=r"decay_to_budget fits the cosine schedule to the time budget; "
                                         r"schedule='inverse_sqrt' has none"):
        TrainConfig(time_budget=60, decay_to_budget=True, schedule="inverse_sqrt")


@pytest.mark.parametrize("fields", [dict(), dict(schedule="constant", decay_steps=100),
                                    dict(schedule="inverse_sqrt", time_budget=60)])
def test_decay_alpha_without_a_cosine_is_refused(fields):
    with pytest.raises(ValueError, match=r"^decay_alpha sets where the cosine ends, and this config has none"):
        TrainConfig(decay_alpha=0.3, **fields)
    TrainConfig(**fields)  # the default alpha is no request
