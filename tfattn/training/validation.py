"""Validation during training: the loss, and BLEU and chrF of greedy translations of a fixed sample.

Each validation runs the teacher-forced eval step over the whole validation split (`val_loss`,
`val_accuracy`) and translates a fixed sample of it greedily (`val_bleu`, `val_chrf`, with
sacrebleu as `tfattn evaluate` scores them), so its cost is known: `sample` sentences of greedy
decoding, whatever the split's size. The sample is the same at every validation (evenly spaced
pairs of the split), so the scores of two validations compare.

What the run does with the scores (the best checkpoint, early stopping, checkpoint averaging) is
in `tfattn.runs`; `ValidationConfig` holds its settings.
"""

import dataclasses

import keras
import tensorflow as tf

from tfattn.training.callbacks import TranslationMetrics
from tfattn.training.trainer import evaluate_loss

BEST_BY = ("loss", "bleu")


@dataclasses.dataclass
class ValidationConfig:
    """When a run validates, what it keeps and when it stops.

    Attributes:
        every: validate every this many steps; None: at each epoch's end.
        sample: validation sentences translated greedily for BLEU and chrF at each validation
            (0: none; then `best_by` must be `"loss"`).
        best_by: `"loss"` (the lowest validation loss) or `"bleu"` (the highest BLEU) chooses the
            checkpoint kept in `best/` and exported.
        early_stopping: stop after this many validations in a row without a better `best_by`
            score (None: never).
        average_checkpoints: at the end, average the weights of the last this many checkpoints; the
            average is exported instead of the best checkpoint when it validates better (None: no).
        examples: sentences of the sample whose attention and translation TensorBoard shows.
    """

    every: int | None = None
    sample: int = 200
    best_by: str = "loss"
    early_stopping: int | None = None
    average_checkpoints: int | None = None
    examples: int = 3

    def __post_init__(self):
        for name in ("every", "early_stopping", "average_checkpoints"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be None or an int >= 1. Received: {name}={value!r}")
        for name in ("sample", "examples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0. Received: {name}={value!r}")
        if self.best_by not in BEST_BY:
            raise ValueError(f"best_by must be one of {BEST_BY}. Received: best_by={self.best_by!r}")
        if self.best_by == "bleu" and not self.sample:
            raise ValueError(f"best_by='bleu' needs a BLEU sample: sample must be >= 1. Received: sample={self.sample!r}")

    def better(self, logs, best):
        """Whether the validation `logs` beat the score `best` (`score_of` of the best so far)."""
        return score_of(logs, self.best_by) > best


def score_of(logs, best_by):
    """The score by which validations compare, higher is better: BLEU, or minus the loss."""
    return logs["val_bleu"] if best_by == "bleu" else -logs["val_loss"]


class Validator:
    """Validates a model: `validator(trainer)` returns `{"val_loss", "val_accuracy", "val_bleu", "val_chrf"}`.

    The loss comes from the trainer's eval step; BLEU and chrF from a
    `tfattn.training.callbacks.TranslationMetrics` (`metrics`), the callback `model.fit` users give
    Keras, so that both score the same way.

    Args:
        model: the `Seq2Seq` model being trained.
        eval_step: the trainer's eval step (`tfattn.training.step.make_eval_step`).
        dataset: the validation batches, for the loss.
        pairs: the validation split's `(source, reference)` texts; `sample` of them are translated.
        tokenizers: `(source, target)` tokenizers.
        decode_config: `DecodeConfig` of the greedy translations.
        sample: int. Sentences translated (0: none, no BLEU). Defaults to 200.
        accel: bool. The tier that decodes (the trainer's). Defaults to `False`.
        batch_size: int. Sentences decoded at a time. Defaults to 64.

    After a call, `last` holds the sample's translations: `sources`, `references`, `hypotheses`
    (str lists), and per sentence `attention (t_out, t_in)`, `input_tokens` and `output_tokens`.
    """

    def __init__(self, model, eval_step, dataset, pairs, tokenizers, decode_config, sample=200, accel=False,
                 batch_size=64):
        self.model, self.eval_step, self.dataset = model, eval_step, dataset
        self.metrics = None
        if sample and pairs:
            self.metrics = TranslationMetrics(pairs, *tokenizers, decode_config, sample=sample,
                                              batch_size=batch_size, accel=accel, model=model)
        self.pairs = self.metrics.pairs if self.metrics else []

    @property
    def last(self):
        return self.metrics.last if self.metrics else None

    def __call__(self, trainer=None):
        logs = {f"val_{k}": v for k, v in evaluate_loss(self.eval_step, self.dataset).items()}
        if self.metrics:
            logs.update(self.metrics.scores())
        return logs

    def translate(self, sources):
        """Greedy translations of a list of str, with their attention and tokens (see `last`)."""
        return self.metrics.translate(sources)


def average_weights(model, paths):
    """Sets `model`'s float weights to their mean over the checkpoints at `paths` (written by a run or
    `Trainer.checkpoint`, the weights under `weights/`); other variables (integer seeds) keep the
    first checkpoint's value. Returns `model`."""
    readers = [tf.train.load_checkpoint(path) for path in paths]
    if not readers:
        raise ValueError(f"No checkpoint to average. Received: paths={paths!r}")
    for i, variable in enumerate(model.variables):
        key = f"weights/{i}/.ATTRIBUTES/VARIABLE_VALUE"
        values = [reader.get_tensor(key) for reader in readers]
        if keras.backend.is_float_dtype(variable.dtype):
            variable.assign(sum(v.astype("float64") for v in values) / len(values))
        else:
            variable.assign(values[0])
    return model
