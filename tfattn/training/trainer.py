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

from tfattn.model import ensure_built, masked_accuracy, masked_loss
from tfattn.accel.optimizer import FusedAdam

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
    return FusedAdam(learning_rate=rate)


def build(model, optimizer=None):
    """Creates the model's (and optimizer's) variables with a dummy batch, outside any tf.function."""
    ensure_built(model)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def weights_checkpoint(model):
    """A `tf.train.Checkpoint` of a built model's weights, in creation order.

    A Keras 3 model is not a checkpoint dependency of its own variables, so `Checkpoint(model=m)`
    saves and restores nothing; the weights are listed explicitly instead.
    """
    ensure_built(model)
    return tf.train.Checkpoint(weights=list(model.variables))


def restore_weights(model, path):
    """Restores a model's weights from a checkpoint written by `Trainer.checkpoint`."""
    status = weights_checkpoint(model).restore(path)
    status.expect_partial().assert_existing_objects_matched()  # every weight found (optimizer ignored)
    return model


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


class Trainer:
    """Trains a model with teacher forcing and keeps what a checkpoint must hold to resume.

    The optimizer's `iterations` is the global step; `epoch` (1-based, the epoch in progress) and
    `position` (batches of that epoch already trained) say where in the data to continue, so that
    `checkpoint()` restores a run to the batch where it stopped.

    Args:
        model: a `Seq2Seq` model.
        config: `TrainConfig`; defaults to `TrainConfig()`.
        quiet: bool. No progress output.

    Example:

    >>> trainer = Trainer(model, TrainConfig(epochs=2))
    >>> history = trainer.fit(dataset, validation=validation_dataset)
    """

    def __init__(self, model, config=None, quiet=False):
        self.model = model
        self.config = config or TrainConfig()
        keras.utils.set_random_seed(self.config.seed)
        self.optimizer = make_optimizer(self.config)
        self.train_step = make_train_step(model, self.optimizer, self.config.clip_norm)
        self.eval_step = make_eval_step(model)
        self.epoch = tf.Variable(1, dtype=tf.int64, trainable=False, name="epoch")
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name="position")
        self.progress = Progress(quiet)
        self.history = {}

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    def checkpoint(self, **extra):
        """A `tf.train.Checkpoint` of the weights, optimizer, epoch and data position (and `extra`).

        The weights are under `weights`, as in `weights_checkpoint`, so that either can restore them.
        """
        return tf.train.Checkpoint(weights=list(self.model.variables), optimizer=self.optimizer,
                                   epoch=self.epoch, position=self.position, **extra)

    def fit(self, dataset, validation=None, callbacks=(), on_step=None):
        """Runs epochs `epoch..config.epochs` (or until the time budget); returns the history.

        Args:
            dataset: a `tf.data.Dataset` of `(source, target)` int32 batches, or a function
                `epoch -> Dataset` (a resumed run needs each epoch's batches in the same order).
            validation: optional dataset; adds `val_loss` and `val_accuracy` to each epoch's logs.
            callbacks: callables `f(epoch, logs)` run after each epoch (validation included).
            on_step: optional callable `f(trainer, logs)` run after each step.

        Returns:
            `{"loss": [...], "accuracy": [...], "padding_fraction": [...], ("val_loss",
            "val_accuracy"), "tokens_per_s": [...], "seconds": float}`: `self.history`, to which
            each call appends one entry per epoch it runs (an epoch cut by the time budget and
            finished by a later call has two) and adds its seconds; `padding_fraction` is the
            share of padding among the label positions.
        """
        start = time.perf_counter()
        seconds_before = self.history.get("seconds", 0.0)
        while int(self.epoch) <= self.config.epochs:
            epoch = int(self.epoch)
            data = dataset(epoch) if callable(dataset) else dataset
            logs, tokens_per_s, finished = self._run_epoch(data, start, on_step)
            if validation is not None:
                logs.update({f"val_{k}": v for k, v in evaluate_loss(self.eval_step, validation).items()})
            for key, value in {**logs, "tokens_per_s": tokens_per_s}.items():
                self.history.setdefault(key, []).append(value)
            self.progress.end_epoch(epoch, logs, tokens_per_s)
            if finished:
                self.epoch.assign_add(1)
                self.position.assign(0)
            for callback in callbacks:
                callback(epoch, logs)
            if not finished or not math.isfinite(logs["loss"]) or _out_of_time(self.config, start):
                break
        self.history["seconds"] = seconds_before + time.perf_counter() - start
        return self.history

    def _run_epoch(self, dataset, start, on_step):
        """Trains from `position` to the end of the epoch; returns `(logs, tokens_per_s, finished)`."""
        sums, tokens, slots, t0, epoch = np.zeros(2), 0, 0, time.perf_counter(), int(self.epoch)
        end = self.config.steps_per_epoch
        data = dataset.take(end) if end else dataset
        logs, finished = {"loss": float("nan"), "accuracy": float("nan")}, True
        for source, target in data.skip(int(self.position)):
            out = self.train_step(source, target)
            self.position.assign_add(1)
            n = int(out["tokens"])
            sums += np.array([float(out["loss"]), float(out["accuracy"])]) * n
            tokens, slots = tokens + n, slots + target.shape[0] * (target.shape[1] - 1)  # labels, padded
            logs = dict(zip(("loss", "accuracy"), (sums / max(tokens, 1)).tolist()))
            self.progress.update(epoch, int(self.position), logs, tokens / (time.perf_counter() - t0))
            if on_step is not None:
                on_step(self, {**logs, "step_loss": float(out["loss"])})
            if _out_of_time(self.config, start):
                finished = False
                break
        logs["padding_fraction"] = 1.0 - tokens / slots if slots else 0.0
        return logs, tokens / max(time.perf_counter() - t0, 1e-9), finished


def fit(model, dataset, config=None, validation=None, quiet=False, callbacks=()):
    """Trains `model` on `dataset` with teacher forcing; returns the history dict.

    A shortcut for `Trainer(model, config, quiet).fit(dataset, validation, callbacks)`; see `Trainer`.
    """
    return Trainer(model, config, quiet).fit(dataset, validation, callbacks)


def _out_of_time(config, start):
    return config.time_budget is not None and time.perf_counter() - start >= config.time_budget
