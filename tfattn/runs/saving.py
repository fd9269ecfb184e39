"""What a run keeps: its checkpoints (the latest states and the best one) and what it does with each
validation (the best state saved, early stopping)."""

import json
import math
import os

import tensorflow as tf

from tfattn import files
from tfattn.runs.directory import newest_readable, remove_failed_save
from tfattn.serving.translator import non_finite_weights
from tfattn.training.trainer import DivergedError, check_weights_match
from tfattn.training.validation import score_of


class Validations:
    """What a run does with its validations: TensorBoard and the log, the best state by
    `ValidationConfig.best_by` saved in `best/`, and early stopping; every `every` steps if set
    (`after_step`), else at each epoch's end (`record`, from the epoch's logs)."""

    def __init__(self, run, config, trainer, saver, validator, board, echo):
        self.run, self.config, self.trainer, self.saver = run, config, trainer, saver
        self.validator, self.board, self.echo = validator, board, echo
        self.validated_at = None  # `trainer.steps_taken` at the last validation

    def after_step(self):
        taken = self.trainer.steps_taken
        if self.config.every and taken % self.config.every == 0 and taken != self.validated_at and taken:
            self.record(self.validator(self.trainer))

    def record(self, logs):
        step, saver, config = self.trainer.step, self.saver, self.config
        self.validated_at = self.trainer.steps_taken
        if self.board is not None:
            self.board.validation(logs, step, self.validator.last, config.examples)
        if config.every:
            self.run.log(event="validation", step=step, **logs)
        if config.better(logs, float(saver.best_score.numpy())):
            saver.best_score.assign(score_of(logs, config.best_by))
            saver.best_loss.assign(logs["val_loss"])
            saver.since_best.assign(0)
            saver.save(saver.best)
            return
        saver.since_best.assign_add(1)
        if config.early_stopping and int(saver.since_best) >= config.early_stopping:
            self.trainer.stop_training = True
            self.echo(f"early stopping at step {step}: no better validation {config.best_by} in "
                      f"{config.early_stopping} validations (--early-stopping {config.early_stopping})")
            self.run.log(event="early_stopping", step=step, validations=int(saver.since_best))


class Saver:
    """The run's checkpoints: the latest state in `checkpoints/` (the last 3), the best in `best/`.

    Each state holds the weights, the optimizer, the epoch, data position and epoch sums
    (`Trainer.state`), the best validation loss so far and the history up to it, and is named by its
    step. A state is not saved twice at one step: when a step save falls on an epoch's last batch,
    the epoch's end keeps it (and `best/` may hold the same step after the epoch's end); a run resumed
    from it trains no batch of that epoch and validates it again.
    """

    # Parts a checkpoint of an earlier version may lack.
    OPTIONAL = ("history", "epoch_sums", "nonfinite", "best_score", "since_best")

    def __init__(self, run, trainer, every, validation=None):
        self.run, self.trainer, self.every = run, trainer, every
        self.saved_step, self.saved_this_session = None, False
        self.saved_at = 0  # `trainer.steps_taken` at the last save
        self.best_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False, name="best_val_loss")
        # The best validation's score (`tfattn.training.validation.score_of`) and the validations since.
        self.best_score = tf.Variable(float("-inf"), dtype=tf.float64, trainable=False, name="best_score")
        self.since_best = tf.Variable(0, dtype=tf.int64, trainable=False, name="since_best")
        self.history = tf.Variable("", dtype=tf.string, trainable=False, name="history")
        self.parts = {**trainer.state(), "best_val_loss": self.best_loss, "history": self.history,
                      "best_score": self.best_score, "since_best": self.since_best}
        self.checkpoint = tf.train.Checkpoint(**self.parts)
        keep = max(3, (validation.average_checkpoints or 0) if validation else 0)  # the last K are averaged
        self.latest = tf.train.CheckpointManager(self.checkpoint, run.path("checkpoints"), max_to_keep=keep)
        self.best = tf.train.CheckpointManager(self.checkpoint, run.path("best"), max_to_keep=1)

    def history_now(self):
        return {**self.trainer.history, "seconds": self.trainer.seconds}

    def after_step(self, loss):
        """Saves the latest state if it is due: at this session's first step (so that a directory that
        cannot be written stops the run at once), then `every` steps after the last save, counted
        on the host (`Trainer.steps_taken`). A step skipped for a non-finite loss is not saved: the
        next one that is not skipped is."""
        if not self.saved_this_session or self.trainer.steps_taken >= self.saved_at + self.every:
            loss = float(loss)  # a step's loss is read only when saved
            if math.isfinite(loss):
                self.save_latest("checkpoint", loss=loss)

    def save_latest(self, event=None, **record):
        """Saves the latest state (unless saved at this step already); logs `event` if given."""
        step = self.trainer.step
        if step != self.saved_step:
            self.save(self.latest)
            self.saved_step, self.saved_this_session = step, True
            self.saved_at = self.trainer.steps_taken
        if event:
            self.run.log(event=event, step=step, epoch=int(self.trainer.epoch),
                         position=int(self.trainer.position), **{k: float(v) for k, v in record.items()})

    def save(self, manager):
        """Saves the state in `manager`; refuses weights that are not finite (`DivergedError`)."""
        self.trainer.flush()  # the data position and epoch sums up to this step
        step = self.trainer.step
        bad = non_finite_weights(self.trainer.model)
        if bad:
            raise DivergedError(f"At step {step} the weight {bad} is not finite")
        self.history.assign(files.strict_json(self.history_now()))
        try:
            manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as error:
            remove_failed_save(manager.directory, step)
            raise files.write_error(f"the checkpoint of step {step}", manager.directory, error,
                                    f"The earlier checkpoints are untouched; {files.once_fixed(error)}, continue "
                                    f"with: tfattn train --resume --out {self.run.out}") from None

    def restore(self, config, echo):
        """Goes on from the newest state that reads back whole, its history with it."""
        path = newest_readable([p for _, p in self.run.checkpoint_files()], echo)
        if path is None:
            echo("no checkpoint yet: training from the start")
            return
        held = {name.split("/")[0] for name in tf.train.load_checkpoint(path).get_variable_to_shape_map()}
        parts = {name: part for name, part in self.parts.items() if name in held or name not in self.OPTIONAL}
        check_weights_match(self.trainer.model, path, self.run.path("config.json"))
        tf.train.Checkpoint(**parts).restore(path).assert_existing_objects_matched()
        if "best_score" not in held and math.isfinite(self.best_loss.numpy()):  # an earlier version's run
            self.best_score.assign(-self.best_loss.numpy())  # was kept by its loss
        self.saved_step = self.saved_at = self.trainer.step
        self.trainer.history = _history_at(self.run, self.history.numpy().decode("utf-8"), int(self.trainer.epoch))
        self.run.write_json("history.json", self.trainer.history)
        echo(f"resumed from step {self.trainer.step} (epoch {int(self.trainer.epoch)}, batch "
             f"{int(self.trainer.position)})" + ("" if os.path.dirname(path) == self.run.path("checkpoints")
                                                else f", the state in {path}"))
        self.run.log(event="resume", step=self.trainer.step)
        if int(self.trainer.epoch) > config.train.epochs:
            echo(f"the run has trained its {config.train.epochs} epochs; pass --epochs to train longer")


def _history_at(run, saved, epoch):
    """The history a checkpoint saved; for a checkpoint without one (written by an earlier version),
    `history.json` cut back to the `epoch - 1` epochs finished before it."""
    if saved:
        return json.loads(saved)
    if not os.path.exists(run.path("history.json")):
        return {}
    history = run.read_json("history.json")
    return {k: v[: epoch - 1] if isinstance(v, list) else v for k, v in history.items()}
