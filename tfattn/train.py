"""Teacher-forced training: one `@tf.function` step, and the loop around it.

    target = [START] y1 y2 y3 [END] 0 0
    decoder input  = target[:, :-1]   ([START] y1 y2 y3 [END] 0)
    decoder labels = target[:, 1:]    (y1 y2 y3 [END] 0 0)         0 = padding, left out of the loss

The step has an `input_signature` with unknown batch size and lengths, so batches of any sentence
length reuse one graph (no retracing).
"""

import dataclasses
import math
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from tfattn.model import masked_accuracy, masked_loss

BATCH_SIGNATURE = (
    tf.TensorSpec([None, None], tf.int32, name="source"),  # (batch, t_in)
    tf.TensorSpec([None, None], tf.int32, name="target"),  # (batch, t_out + 1)
)


@dataclasses.dataclass
class TrainConfig:
    """How a model is trained.

    Attributes:
        learning_rate: Adam learning rate (the peak one when `decay_steps` is set).
        decay_steps: if set, the learning rate follows a cosine from `learning_rate` down to 1% of
            it over this many steps, then stays there.
        clip_norm: gradient clipping by global norm.
        epochs: passes over the training data (upper bound when `time_budget` is set).
        time_budget: seconds of training after which the loop stops (None: no limit).
        steps_per_epoch: batches per epoch (None: the whole dataset).
        seed: random seed for weights and dropout.
    """

    learning_rate: float = 1e-3
    decay_steps: int | None = None
    clip_norm: float = 5.0
    epochs: int = 10
    time_budget: float | None = None
    steps_per_epoch: int | None = None
    seed: int = 0

    def __post_init__(self):
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0. Received: learning_rate={self.learning_rate!r}")
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs must be an int >= 1. Received: epochs={self.epochs!r}")


def make_optimizer(config):
    rate = config.learning_rate
    if config.decay_steps:
        rate = keras.optimizers.schedules.CosineDecay(rate, config.decay_steps, alpha=0.01)
    return keras.optimizers.Adam(learning_rate=rate)


def build(model, optimizer=None):
    """Creates the model's (and optimizer's) variables with a dummy batch, outside any tf.function."""
    if not model.built:
        model((tf.ones([1, 2], tf.int32), tf.ones([1, 1], tf.int32)))
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def make_train_step(model, optimizer, clip_norm=5.0):
    """Returns `train_step(source, target) -> {"loss", "accuracy", "tokens", "grad_norm"}`.

    Args:
        model: a `Seq2Seq` model.
        optimizer: a Keras optimizer.
        clip_norm: float. Gradients are clipped to this global norm.

    The returned function is a `tf.function` traced once for all batch sizes and lengths.
    """
    build(model, optimizer)
    variables = model.trainable_variables

    @tf.function(input_signature=BATCH_SIGNATURE)
    def train_step(source, target):
        target_in, target_out = target[:, :-1], target[:, 1:]  # (batch, t_out) each
        with tf.GradientTape() as tape:
            logits, _ = model((source, target_in), training=True)  # (batch, t_out, vocab)
            loss = masked_loss(target_out, logits)
        grads = tape.gradient(loss, variables)
        grads, grad_norm = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, variables))
        return {
            "loss": loss,
            "accuracy": masked_accuracy(target_out, logits),
            "tokens": tf.math.count_nonzero(target_out, dtype=tf.int32),
            "grad_norm": grad_norm,
        }

    return train_step


def make_eval_step(model):
    """Returns `eval_step(source, target) -> {"loss", "accuracy", "tokens"}` (teacher-forced, no update)."""
    build(model)

    @tf.function(input_signature=BATCH_SIGNATURE)
    def eval_step(source, target):
        target_in, target_out = target[:, :-1], target[:, 1:]
        logits, _ = model((source, target_in), training=False)
        return {
            "loss": masked_loss(target_out, logits),
            "accuracy": masked_accuracy(target_out, logits),
            "tokens": tf.math.count_nonzero(target_out, dtype=tf.int32),
        }

    return eval_step


def evaluate_loss(eval_step, dataset):
    """Token-weighted mean loss and accuracy of `eval_step` over a dataset."""
    totals = {"loss": 0.0, "accuracy": 0.0, "tokens": 0}
    for source, target in dataset:
        out = eval_step(source, target)
        n = int(out["tokens"])
        totals["loss"] += float(out["loss"]) * n
        totals["accuracy"] += float(out["accuracy"]) * n
        totals["tokens"] += n
    n = max(totals["tokens"], 1)
    return {"loss": totals["loss"] / n, "accuracy": totals["accuracy"] / n}


class Progress:
    """A one-line progress display (loss, accuracy, target tokens/s); silent when `quiet`.

    When the stream is not a terminal, it prints one line per epoch instead of redrawing.
    """

    def __init__(self, quiet=False, stream=None):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = not quiet and self.stream.isatty()

    def update(self, epoch, step, logs, tokens_per_s):
        if self.live:
            self.stream.write(f"\repoch {epoch} step {step}: loss {logs['loss']:.4f} "
                              f"acc {logs['accuracy']:.4f} {tokens_per_s:,.0f} tok/s   ")
            self.stream.flush()

    def end_epoch(self, epoch, logs, tokens_per_s):
        if self.quiet:
            return
        text = " ".join(f"{k} {v:.4f}" for k, v in logs.items())
        self.stream.write(("\r" if self.live else "") + f"epoch {epoch}: {text} {tokens_per_s:,.0f} tok/s\n")
        self.stream.flush()


def fit(model, dataset, config=None, validation=None, quiet=False, callbacks=()):
    """Trains `model` on `dataset` with teacher forcing; returns the history dict.

    Args:
        model: a `Seq2Seq` model.
        dataset: a `tf.data.Dataset` of `(source, target)` int32 batches (see `tfattn.data`).
        config: `TrainConfig`; defaults to `TrainConfig()`.
        validation: optional dataset; its loss and accuracy are added as `val_loss`, `val_accuracy`.
        quiet: bool. No progress output.
        callbacks: callables `f(epoch, logs)` run after each epoch.

    Returns:
        `{"loss": [...], "accuracy": [...], ("val_loss", "val_accuracy"), "tokens_per_s": [...],
        "seconds": float}`, one entry per epoch.
    """
    config = config or TrainConfig()
    keras.utils.set_random_seed(config.seed)
    optimizer = getattr(model, "optimizer", None) or make_optimizer(config)
    model.optimizer = optimizer
    train_step = make_train_step(model, optimizer, config.clip_norm)
    eval_step = make_eval_step(model) if validation is not None else None
    progress, history, start = Progress(quiet), {}, time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        logs, tokens_per_s = _run_epoch(train_step, dataset, config, progress, epoch, start)
        if eval_step is not None:
            logs.update({f"val_{k}": v for k, v in evaluate_loss(eval_step, validation).items()})
        for key, value in {**logs, "tokens_per_s": tokens_per_s}.items():
            history.setdefault(key, []).append(value)
        progress.end_epoch(epoch, logs, tokens_per_s)
        for callback in callbacks:
            callback(epoch, logs)
        if _out_of_time(config, start) or not math.isfinite(logs["loss"]):
            break
    history["seconds"] = time.perf_counter() - start
    return history


def _run_epoch(train_step, dataset, config, progress, epoch, start):
    sums, tokens, t0 = np.zeros(2), 0, time.perf_counter()
    data = dataset.take(config.steps_per_epoch) if config.steps_per_epoch else dataset
    for step, (source, target) in enumerate(data, 1):
        out = train_step(source, target)
        n = int(out["tokens"])
        sums += np.array([float(out["loss"]), float(out["accuracy"])]) * n
        tokens += n
        tokens_per_s = tokens / (time.perf_counter() - t0)
        progress.update(epoch, step, dict(zip(("loss", "accuracy"), sums / max(tokens, 1))), tokens_per_s)
        if _out_of_time(config, start):
            break
    logs = dict(zip(("loss", "accuracy"), (sums / max(tokens, 1)).tolist()))
    return logs, tokens / max(time.perf_counter() - t0, 1e-9)


def _out_of_time(config, start):
    return config.time_budget is not None and time.perf_counter() - start >= config.time_budget
