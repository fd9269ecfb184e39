"""The training loop around the step of `tfattn.training.step`: epochs, a time budget, validation,
progress, and what a checkpoint must hold to resume at the batch where a run stopped."""

import dataclasses
import math
import re
import sys
import time

import keras
import tensorflow as tf

from tfattn.accel import seq2seq as fast
from tfattn.core import check_label_smoothing, ensure_built
from tfattn.training import distributed
from tfattn.training.precision import check_precision
from tfattn.training.schedules import SCHEDULES
from tfattn.training.step import eval_step_on, make_optimizer, train_step_on
from tfattn.training.step import make_eval_step, make_train_step  # noqa: F401 (public here too)

@dataclasses.dataclass
class TrainConfig:
    """How a model is trained.

    Attributes:
        learning_rate: Adam learning rate (the peak one when `decay_steps` is set).
        decay_steps: if set, the learning rate follows a cosine from `learning_rate` down to
            `decay_alpha` of it over this many steps, then stays there.
        decay_to_budget: with `time_budget`, the learning rate follows that cosine over the budget's
            time instead (`budget_learning_rate`), so the schedule ends when training does on any
            machine; with `decay_steps` too, over whichever of the two runs out first.
        decay_alpha: where the cosine ends, as a fraction of `learning_rate` (Keras' `CosineDecay`
            `alpha`), in [0, 1]. Defaults to 0.01.
        clip_norm: gradient clipping by global norm.
        epochs: passes over the training data (upper bound when `time_budget` is set).
        time_budget: seconds of training after which the loop stops (None: no limit).
        max_steps: the global step at which the loop stops (None: no limit), so that runs of
            different speeds can be compared at the same number of steps (a resumed run counts
            the steps it was resumed with).
        steps_per_epoch: batches per epoch (None: the whole dataset).
        seed: random seed for weights and dropout.
        accel: run the fast tier (`tfattn.accel`): written-out loops and gradients, fused Adam. With
            `False`, the reference tier (the layers' own calls, autodiff, Keras's Adam). `None`
            follows `tfattn.tier`'s switch; a `Trainer` sets it to what that was when it started.
        log_every: steps between reads of loss and accuracy back from the device for the progress
            line and `fit`'s `on_log` (TensorBoard); the sums are kept on the device, and each read
            waits for the steps before it.
        warmup_steps: steps of a linear rise of the learning rate from 0 to `learning_rate`. None
            (the default): in a `RunConfig`, the warm-up its model needs (`runs.default_warmup`:
            1,000 steps with multi-head attention, else none); used alone, none.
        schedule: after the warm-up, `"cosine"` (down to `decay_alpha` over `decay_steps`; constant
            without them), `"constant"` or `"inverse_sqrt"` (`tfattn.training.schedules`).
        precision: `"float32"`, `"mixed_float16"` or `"mixed_bfloat16"`: the Keras dtype policy the
            model was made under (`tfattn.training.precision`); float16 trains on the reference tier
            (`tfattn.accel.seq2seq.choose`), with loss scaling. `"auto"` (the default): a `Trainer`
            takes the model's own policy; a run picks one by the machine first
            (`tfattn.training.precision.AUTO`: bfloat16 where the hardware computes it fast).
        precision_asked: what was asked when `precision` was resolved from `"auto"` (`"auto"`),
            so that a run's config.json says it; None when `precision` was given as it is.
        max_nonfinite: a step whose loss is not finite is skipped (no update) and counted; this many
            in a row stop the run (`DivergedError`), checked every `log_every` steps and at each
            epoch's end.
        deterministic: seed everything and turn on TensorFlow's op determinism
            (`tf.config.experimental.enable_op_determinism`, for the whole process): two runs with one
            seed give the same losses, at some cost in speed.
        jit_compile: compile the train step with XLA (`make_train_step`), once per batch shape:
            pair it with `DataConfig.pad_to_multiple`.
        label_smoothing: the training loss's label smoothing (`tfattn.core.masked_loss`; Vaswani et
            al. 2017 use 0.1): the training `loss` reported is that smoothed loss, while validation
            (`val_loss`, and perplexity, its exp) is always the plain negative log-likelihood, so
            that runs with and without smoothing compare. 0 (the default) trains on the plain loss.
    """

    learning_rate: float = 1e-3
    decay_steps: int | None = None
    decay_to_budget: bool = False
    decay_alpha: float = 0.01
    clip_norm: float = 5.0
    epochs: int = 10
    time_budget: float | None = None
    max_steps: int | None = None
    steps_per_epoch: int | None = None
    seed: int = 0
    accel: bool | None = None
    log_every: int = 20
    warmup_steps: int | None = None
    schedule: str = "cosine"
    precision: str = "auto"
    precision_asked: str | None = None
    max_nonfinite: int = 5
    deterministic: bool = False
    jit_compile: bool = False
    label_smoothing: float = 0.0

    def __post_init__(self):
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0. Received: learning_rate={self.learning_rate!r}")
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs must be an int >= 1. Received: epochs={self.epochs!r}")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"max_steps must be an int >= 1 or None. Received: max_steps={self.max_steps!r}")
        if isinstance(self.decay_alpha, bool) or not isinstance(self.decay_alpha, (int, float)) or not (
                0 <= self.decay_alpha <= 1):
            raise ValueError(f"decay_alpha must be a number in [0, 1]. Received: decay_alpha={self.decay_alpha!r}")
        if self.decay_to_budget and self.time_budget is None:
            raise ValueError(f"decay_to_budget needs a time_budget. Received: time_budget={self.time_budget!r}")
        if not isinstance(self.log_every, int) or self.log_every < 1:
            raise ValueError(f"log_every must be an int >= 1. Received: log_every={self.log_every!r}")
        if self.warmup_steps is not None and (not isinstance(self.warmup_steps, int) or self.warmup_steps < 0):
            raise ValueError(f"warmup_steps must be an int >= 0 or None. Received: warmup_steps={self.warmup_steps!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}. Received: schedule={self.schedule!r}")
        if self.decay_to_budget and self.schedule != "cosine":
            raise ValueError(f"decay_to_budget fits the cosine schedule to the time budget; schedule={self.schedule!r} "
                             f"has none. Received: decay_to_budget=True, schedule={self.schedule!r}")
        cosine = self.schedule == "cosine" and (self.decay_steps or self.decay_to_budget)
        if self.decay_alpha != type(self).decay_alpha and not cosine:
            raise ValueError(f"decay_alpha sets where the cosine ends, and this config has none (schedule='cosine' with "
                             f"decay_steps or decay_to_budget). Received: decay_alpha={self.decay_alpha!r}, "
                             f"schedule={self.schedule!r}, decay_steps={self.decay_steps!r}")
        check_precision(self.precision)
        check_label_smoothing(self.label_smoothing)
        if not isinstance(self.max_nonfinite, int) or self.max_nonfinite < 1:
            raise ValueError(f"max_nonfinite must be an int >= 1. Received: max_nonfinite={self.max_nonfinite!r}")


def weights_checkpoint(model):
    """A `tf.train.Checkpoint` of a built model's weights, in creation order.

    A Keras 3 model is not a checkpoint dependency of its own variables, so `Checkpoint(model=m)`
    saves and restores nothing; the weights are listed explicitly instead.
    """
    ensure_built(model)
    return tf.train.Checkpoint(weights=list(model.variables))


class DivergedError(ValueError):
    """The training loss or a weight is not finite (NaN or infinity): the run cannot go on."""


def restore_weights(model, path):
    """Restores a model's weights from a checkpoint written by `Trainer.checkpoint`."""
    check_weights_match(model, path)
    status = weights_checkpoint(model).restore(path)
    status.expect_partial().assert_existing_objects_matched()  # every weight found (optimizer ignored)
    return model


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


def check_weights_match(model, path, config="the model's config"):
    """Raises `ValueError` naming the first weight of `model` whose shape differs from the checkpoint
    at `path`, or that one of them lacks: the model was made from another config (`config` names it)."""
    shapes = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    saved = {int(m[1]): tuple(shape) for key, shape in shapes.items()
             if (m := re.fullmatch(r"weights/(\d+)/\.ATTRIBUTES/VARIABLE_VALUE", key))}
    ensure_built(model)
    variables = model.variables  # in the order `weights_checkpoint` saves them
    for i, variable in enumerate(variables):
        if saved.get(i) != tuple(variable.shape):
            was = f"shape {saved[i]}" if i in saved else "no such weight"
            raise ValueError(f"{config} does not match the checkpoint {path}: weight {i}, {variable.path}, has shape "
                             f"{tuple(variable.shape)} in the model and {was} in the checkpoint (was the config "
                             f"edited?). Put back the settings the run was trained with. Received: {config!r}")
    if len(saved) > len(variables):
        raise ValueError(f"{config} does not match the checkpoint {path}: the model has {len(variables)} weights, the "
                         f"checkpoint {len(saved)} (was the config edited?). Put back the settings the run was "
                         f"trained with. Received: {config!r}")


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

    The optimizer's `iterations` is the global step (the updates made: a skipped step does not
    count); `epoch` (1-based, the epoch in progress) and `position` (batches of that epoch already
    trained) say where in the data to continue, and `epoch_sums` what the epoch's batches so far
    added up to, so that `checkpoint()` restores a run to the batch where it stopped and its epoch
    still reports the loss of all its batches. `nonfinite` counts the steps skipped for a loss that
    was not finite: in all, in the current row, and the longest row since the last check.

    Under a `tf.distribute` strategy (`tfattn.training.distributed`), each batch of the dataset is
    the global batch, split among the replicas, and a step is one update on all of it; the loss,
    accuracy and token counts are the global batch's. Validation and everything written run on one
    device. Under `MultiWorkerMirroredStrategy`, every worker runs `fit` alike; it starts them from
    the chief's state, and they stop where the chief does (its clock, its `stop_training`).

    Args:
        model: a `Seq2Seq` model, made under `config.precision` (`tfattn.training.precision.precision_scope`),
            and in `strategy.scope()` under a strategy.
        config: `TrainConfig`; defaults to `TrainConfig()`.
        quiet: bool. No progress output.
        strategy: a `tf.distribute.Strategy` (`tfattn.training.distributed.make_strategy`), or None:
            the one whose scope the trainer is made in, if any, else none (one device).

    Example:

    >>> trainer = Trainer(model, TrainConfig(epochs=2))
    >>> history = trainer.fit(dataset, validation=validation_dataset)
    """

    def __init__(self, model, config=None, quiet=False, strategy=None):
        self.model = model
        config = config or TrainConfig()
        self.strategy = strategy or (tf.distribute.get_strategy() if tf.distribute.has_strategy() else None)
        if self.strategy is not None and config.jit_compile:
            raise ValueError("jit_compile (--jit-compile) trains on one device: it does not combine with a "
                             f"tf.distribute strategy. Received: strategy={type(self.strategy).__name__}")
        with distributed.scope(self.strategy):  # a model not built yet makes its weights there
            ensure_built(model)
        config = _resolved_precision(config, model)
        if self.strategy is not None:
            distributed.check_model(model, self.strategy, config.precision)
        _check_policy(model, config.precision)
        accel = fast.choose(config.accel, model, config.precision)  # the run's tier, chosen once
        self.config = dataclasses.replace(config, accel=accel)  # fixed for the run
        keras.utils.set_random_seed(self.config.seed)
        if self.config.deterministic:
            tf.config.experimental.enable_op_determinism()
        self._make_steps()
        self.epoch = tf.Variable(1, dtype=tf.int64, trainable=False, name="epoch")
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name="position")
        # The epoch so far: loss * tokens, accuracy * tokens, tokens, label positions, seconds.
        self.epoch_sums = tf.Variable(tf.zeros([5]), trainable=False, name="epoch_sums")
        # Steps skipped for a non-finite loss: in all, in the current row, the longest row since the last check.
        self.nonfinite = tf.Variable(tf.zeros([3], tf.int64), trainable=False, name="nonfinite")
        # Since the last `on_log`: the epoch sums' five, the gradient norms' sum, updates, skipped steps.
        self._interval = tf.Variable(tf.zeros([8]), trainable=False, name="interval")
        self.progress = Progress(quiet)
        self.history = {}
        self.stop_training = False  # set by a callback (early stopping): the run ends after this step
        self._clock = None  # during `fit`: (its start, the seconds of the calls before)
        self._taken = None  # during `fit`: `steps_taken`, counted on the host
        self._pending = []  # the steps `flush` has not added up yet: (outputs, label positions, seconds)

    def _make_steps(self):
        """The optimizer and the train step (in the strategy's scope, if any), and the eval step."""
        accel, clip_norm = self.config.accel, self.config.clip_norm
        if self.strategy is None:
            self.optimizer = make_optimizer(self.config, accel)
            self.train_step = train_step_on(self.model, self.optimizer, accel, clip_norm, self.config.jit_compile,
                                            self.config.label_smoothing)
        else:
            with self.strategy.scope():
                self.optimizer = make_optimizer(self.config, accel, summed=True)
            self.train_step = distributed.make_distributed_step(self.strategy, self.model, self.optimizer,
                                                                clip_norm, accel, self.config.label_smoothing)
        self.eval_step = eval_step_on(self.model, accel)
        self._chief = distributed.chief_values(self.strategy)  # the chief's clock and decisions
        self._chief_seconds = 0.0  # the chief's seconds of this `fit`, as the last step brought them

    @property
    def step(self):
        return int(self.optimizer.iterations.numpy())

    @property
    def steps_taken(self):
        """The steps run, updates and skipped steps alike, counted on the host: the global step when
        `fit` started plus the steps since. Work scheduled per step (saves, validations) reads this
        rather than `step`, which waits for the device at every read."""
        return self.step if self._taken is None else self._taken

    @property
    def seconds(self):
        """Training seconds of every call of `fit`, the one running included."""
        if self._clock is None:
            return self.history.get("seconds", 0.0)
        start, before = self._clock
        return before + time.perf_counter() - start

    @property
    def nonfinite_steps(self):
        """The steps skipped so far because their loss was not finite."""
        self.flush()
        return int(self.nonfinite[0])

    def checkpoint(self, **extra):
        """A `tf.train.Checkpoint` of the training state (`state()`) and `extra`."""
        return tf.train.Checkpoint(**self.state(), **extra)  # `state` flushes

    def state(self):
        """What a checkpoint holds to resume: the weights (under `weights`, as in
        `weights_checkpoint`, so that either can restore them), optimizer, epoch, position, epoch
        sums and the count of skipped steps."""
        self.flush()  # the steps trained so far, in position and the sums
        return {"weights": list(self.model.variables), "optimizer": self.optimizer, "epoch": self.epoch,
                "position": self.position, "epoch_sums": self.epoch_sums, "nonfinite": self.nonfinite}

    def fit(self, dataset, validation=None, callbacks=(), on_step=None, on_log=None):
        """Runs epochs `epoch..config.epochs` (or until the time budget); returns the history.

        Args:
            dataset: a `tf.data.Dataset` of `(source, target)` int32 batches, or a function
                `epoch -> Dataset` (a resumed run needs each epoch's batches in the same order).
            validation: optional dataset, which adds `val_loss` and `val_accuracy` to each epoch's
                logs, or a function `trainer -> logs` run at each epoch's end (a
                `tfattn.training.validation.Validator`: BLEU and chrF too).
            callbacks: callables `f(epoch, logs)` run after each epoch (validation included).
            on_step: optional callable `f(trainer, logs)` run after each step.
            on_log: optional callable `f(trainer, logs)` run every `config.log_every` steps and at
                each epoch's end, with the means since the last call (`interval_logs`), e.g. to
                write TensorBoard scalars.

        Returns:
            `{"loss": [...], "accuracy": [...], "padding_fraction": [...], ("val_loss",
            "val_accuracy"), "tokens_per_s": [...], "seconds": float}`:
            `self.history`, to which each call appends one entry per epoch it runs (an epoch cut
            by the time budget and finished by a later call has two, the second over all its
            batches) and adds its seconds; `padding_fraction` is the share of padding among the
            label positions. Skipped steps are left out of the sums.

        Raises:
            DivergedError: an epoch's training loss is not finite, or `config.max_nonfinite`
                steps in a row were skipped; raised before the epoch's validation and callbacks,
                so that nothing saves its state.
        """
        start = time.perf_counter()
        self._clock = (start, self.history.get("seconds", 0.0))
        self._taken = self.step
        self.stop_training = False
        if self.strategy is not None:  # every worker goes on from the chief's state (a resumed run's)
            distributed.broadcast_from_chief(self.strategy, [*self.model.variables, *self.optimizer.variables,
                                                             self.epoch, self.position, self.epoch_sums,
                                                             self.nonfinite])
            self._chief_seconds = 0.0
        while int(self.epoch) <= self.config.epochs and not self._reached_max_steps():
            epoch = int(self.epoch)
            data = dataset(epoch) if callable(dataset) else dataset
            logs, tokens_per_s, finished = self._run_epoch(data, start, on_step, on_log)
            if not math.isfinite(logs["loss"]) and int(self.epoch_sums[2]):  # before anything reads or saves this epoch
                raise DivergedError(f"The training loss of epoch {epoch} is {logs['loss']} at step {self.step}")
            if validation is not None:
                logs.update(validation(self) if callable(validation) else
                            {f"val_{k}": v for k, v in evaluate_loss(self.eval_step, validation).items()})
            for key, value in {**logs, "tokens_per_s": tokens_per_s}.items():
                self.history.setdefault(key, []).append(value)
            self.progress.end_epoch(epoch, logs, tokens_per_s)
            if finished:
                self.epoch.assign_add(1)
                self.position.assign(0)
            for callback in callbacks:
                callback(epoch, logs)
            if not finished or self._should_stop(start):
                break
        self.history["seconds"], self._clock, self._taken = self.seconds, None, None
        return self.history

    def _run_epoch(self, dataset, start, on_step, on_log):
        """Trains from `position` to the end of the epoch; returns `(logs, tokens_per_s, finished)`.

        Each step's outputs stay on the device until `flush` reads them back and adds them up, every
        `config.log_every` steps (for the progress line, `on_log` and the count of skipped steps)
        and at the end of the epoch. A run resumed at the end of an epoch (saved after its last
        batch) trains no batch here and reports the restored sums.
        """
        epoch, finished, step0, tick = int(self.epoch), True, self.step, time.perf_counter()
        if int(self.position) == 0:
            self.epoch_sums.assign(tf.zeros([5]))
        end = self.config.steps_per_epoch
        data = dataset.take(end) if end else dataset
        batches = data.skip(int(self.position))
        if self.strategy is not None:  # each global batch split among the replicas
            batches = self.strategy.experimental_distribute_dataset(batches)
        for i, (source, target) in enumerate(batches, 1):
            if self.config.decay_to_budget:
                self.optimizer.learning_rate = budget_learning_rate(self.config, self._seconds(start), step0 + i - 1)
            out = self.train_step(source, target)
            self._taken += 1
            # label positions, padding included (the distributed step counts the global batch's)
            slots = out["slots"] if "slots" in out else target.shape[0] * (target.shape[1] - 1)
            now = time.perf_counter()
            self._pending.append((out, slots, now - tick))  # added up by `flush`
            tick = now
            if i % self.config.log_every == 0:
                self.flush()
                self.progress.update(epoch, int(self.position), *_averages(self.epoch_sums))
                self._check_and_log(on_log)
            if on_step is not None:
                on_step(self, {"step_loss": out["loss"], "finite": out["finite"]})
            if self._should_stop(start):
                finished = False
                break
        self.flush()
        self._check_and_log(on_log)
        logs, tokens_per_s = _averages(self.epoch_sums)
        return logs, tokens_per_s, finished

    def _seconds(self, start):
        """Seconds since `start`: this process's, or under several workers, the chief's as of the
        last step (0 before the first), so that every worker sets the same learning rate."""
        if self._chief is None:
            return time.perf_counter() - start
        return self._chief_seconds

    def _should_stop(self, start):
        """Whether training stops here: `stop_training`, the time budget spent or `max_steps` reached,
        by the chief's decision under several workers (one small all-reduce), so that all stop at the
        same step."""
        stop = self.stop_training or self._reached_max_steps() or _out_of_time(self.config, start)
        if self._chief is None:
            return stop
        self._chief_seconds, stop = self._chief([time.perf_counter() - start, float(stop)])
        return bool(stop)

    def _reached_max_steps(self):
        return self.config.max_steps is not None and self.steps_taken >= self.config.max_steps

    def _check_and_log(self, on_log):
        """Stops the run if `config.max_nonfinite` steps in a row were skipped; calls `on_log` with
        the means since its last call, if there were steps since."""
        total, row, longest = self.nonfinite.numpy().tolist()
        if longest >= self.config.max_nonfinite:
            raise DivergedError(f"{longest} training steps in a row had a non-finite loss (NaN or infinity; "
                                f"--max-nonfinite {self.config.max_nonfinite}), the last one after step {self.step}")
        self.nonfinite.assign([total, row, row])
        if on_log is not None and float(self._interval[4]) > 0:
            on_log(self, self.interval_logs())
        self._interval.assign(tf.zeros([8]))

    def interval_logs(self):
        """The means since the last `on_log`: `loss`, `accuracy` (over the updates made),
        `padding_fraction`, `tokens_per_s`, `grad_norm`, `learning_rate`, `nonfinite_steps`
        (skipped since then) and, with loss scaling, `loss_scale`."""
        loss, accuracy, tokens, slots, seconds, norms, updates, skipped = self._interval.numpy().tolist()
        logs = {"loss": loss / tokens if tokens else math.nan, "accuracy": accuracy / tokens if tokens else math.nan,
                "padding_fraction": 1.0 - tokens / slots if slots else 0.0, "tokens_per_s": tokens / max(seconds, 1e-9),
                "grad_norm": norms / updates if updates else math.nan,
                "learning_rate": float(keras.ops.convert_to_numpy(self.optimizer.learning_rate)),
                "nonfinite_steps": skipped}
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            logs["loss_scale"] = float(self.optimizer.dynamic_scale.numpy())
        return logs


    def flush(self):
        """Adds the steps trained since the last call to `position`, `epoch_sums`, the interval sums
        and the counts of skipped steps. Their outputs are read back from the device here, in one
        read, once every `config.log_every` steps. Call it before reading those
        variables, or saving them, in the middle of an epoch (`tfattn.runs.train` does before
        each checkpoint)."""
        if not self._pending:
            return
        steps, self._pending = self._pending, []
        outputs = tf.stack([tf.stack([tf.cast(out[key], tf.float32) for key in ("loss", "accuracy", "tokens",
                                                                               "grad_norm", "finite")])
                            for out, _, _ in steps]).numpy().tolist()  # (steps, 5): one read
        total, row, longest = self.nonfinite.numpy().tolist()
        epoch, interval = [0.0] * 5, [0.0] * 8  # as `epoch_sums` and `_interval`
        for (loss, accuracy, tokens, norm, finite), (_, slots, seconds) in zip(outputs, steps):
            ok = bool(finite) and math.isfinite(loss)  # the step made an update
            step = [loss * tokens, accuracy * tokens, tokens, float(slots)] if ok else [0.0] * 4
            step.append(seconds)
            epoch = [a + b for a, b in zip(epoch, step)]
            interval = [a + b for a, b in zip(interval, [*step, norm if ok else 0.0, float(ok), float(not ok)])]
            row = 0 if ok else row + 1
            total, longest = total + (not ok), max(longest, row)
        self.position.assign_add(len(steps))
        self.epoch_sums.assign_add(epoch)
        self._interval.assign_add(interval)
        self.nonfinite.assign([total, row, longest])


def _resolved_precision(config, model):
    """`config` with a `precision` of `"auto"` made the model's own dtype policy (a Trainer trains the
    model it is given: the machine's choice is made before the model, `tfattn.runs`)."""
    if config.precision != "auto":
        return config
    policy = ensure_built(model).dtype_policy.name
    return dataclasses.replace(config, precision=check_precision(policy, auto=False), precision_asked="auto")


def _check_policy(model, precision):
    """Refuses a model whose layers compute in another dtype than `precision` asks."""
    policy = keras.dtype_policies.get(precision)
    if ensure_built(model).compute_dtype != policy.compute_dtype:
        raise ValueError(f"The model computes in {model.compute_dtype}, and precision {precision!r} computes in "
                         f"{policy.compute_dtype}: make the model inside tfattn.training.precision.precision_scope"
                         f"({precision!r}). Received: precision={precision!r}")


def budget_learning_rate(config, elapsed, step=0):
    """The learning rate `elapsed` seconds and `step` steps into a `decay_to_budget` run: a cosine
    from `config.learning_rate` down to `config.decay_alpha` of it at `config.time_budget` (or at
    `config.decay_steps` steps, if set and reached first), then that; during `config.warmup_steps`
    steps, that times `step / warmup_steps`."""
    fraction = elapsed / config.time_budget
    if config.decay_steps:
        fraction = max(fraction, step / config.decay_steps)
    fraction = min(max(fraction, 0.0), 1.0)
    alpha = config.decay_alpha
    rate = config.learning_rate * (alpha + (1.0 - alpha) * 0.5 * (1.0 + math.cos(math.pi * fraction)))
    return rate * min(step / config.warmup_steps, 1.0) if config.warmup_steps else rate


def _averages(sums):
    """`({"loss", "accuracy", "padding_fraction"}, tokens per second)` from `Trainer.epoch_sums`."""
    loss, accuracy, tokens, slots, seconds = sums.numpy().tolist()
    logs = {"loss": loss / tokens, "accuracy": accuracy / tokens} if tokens else {
        "loss": float("nan"), "accuracy": float("nan")}
    logs["padding_fraction"] = 1.0 - tokens / slots if slots else 0.0
    return logs, tokens / max(seconds, 1e-9)


def fit(model, dataset, config=None, validation=None, quiet=False, callbacks=()):
    """Trains `model` on `dataset` with teacher forcing; returns the history dict.

    A shortcut for `Trainer(model, config, quiet).fit(dataset, validation, callbacks)`; see `Trainer`.
    """
    return Trainer(model, config, quiet).fit(dataset, validation, callbacks)


def _out_of_time(config, start):
    return config.time_budget is not None and time.perf_counter() - start >= config.time_budget
