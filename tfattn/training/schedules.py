"""Learning-rate schedules as flags: a linear warm-up, then constant, cosine or inverse square root.

    schedule       after `warmup_steps` steps of a linear rise from 0 to the peak rate `r`
    "constant"     r
    "cosine"       a cosine from r down to a fraction of r (`decay_alpha`, 1% unless set) over
                   `decay_steps` steps, then that (constant without `decay_steps`); Keras' `CosineDecay`
    "inverse_sqrt" r * sqrt(w / step), w = max(warmup_steps, 1) (Vaswani et al. 2017, section 5.3)

Reference: arXiv 1706.03762, section 5.3, eq. 3 (the warm-up and inverse square root).
"""

import keras
from keras import ops

SCHEDULES = ("constant", "cosine", "inverse_sqrt")


@keras.saving.register_keras_serializable(package="tfattn")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up from 0 to `peak` over `warmup_steps` steps, then constant or `peak * sqrt(w / step)`.

    Args:
        peak: float. The rate at the end of the warm-up.
        warmup_steps: int >= 0. Steps of the linear rise (0: none).
        decay: str. `"constant"` or `"inverse_sqrt"`. Defaults to `"constant"`.

    Example:

    >>> schedule = WarmupSchedule(1e-3, 100, "inverse_sqrt")
    >>> float(schedule(50)), float(schedule(400))  # half way up; half the peak at 4 x 100 steps
    (0.0005, 0.0005)
    """

    def __init__(self, peak, warmup_steps, decay="constant"):
        if decay not in ("constant", "inverse_sqrt"):
            raise ValueError(f"decay must be 'constant' or 'inverse_sqrt'. Received: decay={decay!r}")
        self.peak, self.warmup_steps, self.decay = peak, warmup_steps, decay

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        rate = self.peak * ops.minimum(step / warmup, 1.0) if self.warmup_steps else ops.cast(self.peak, "float32")
        if self.decay == "inverse_sqrt":
            rate = rate * ops.minimum(1.0, ops.sqrt(warmup / ops.maximum(step, 1.0)))
        return rate

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay": self.decay}


def learning_rate(config):
    """The learning rate (a float or a Keras schedule) of a `TrainConfig`: `schedule`, `warmup_steps`,
    `decay_steps`, `decay_alpha` and the peak `learning_rate`. Under `decay_to_budget` the trainer
    sets the rate at each step instead (`tfattn.training.trainer.budget_learning_rate`), warm-up included."""
    rate, warmup = config.learning_rate, config.warmup_steps or 0  # None: no warm-up outside a run
    if config.decay_to_budget:
        return rate
    if config.schedule == "cosine" and config.decay_steps:
        if not warmup:
            return keras.optimizers.schedules.CosineDecay(rate, config.decay_steps, alpha=config.decay_alpha)
        return keras.optimizers.schedules.CosineDecay(0.0, config.decay_steps, alpha=config.decay_alpha,
                                                      warmup_target=rate, warmup_steps=warmup)
    if config.schedule == "inverse_sqrt" or warmup:
        return WarmupSchedule(rate, warmup, "inverse_sqrt" if config.schedule == "inverse_sqrt" else "constant")
    return rate
