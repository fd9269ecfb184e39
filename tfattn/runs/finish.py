"""How a run ends: the best weights restored (or the average of the last checkpoints', when it
validates better), exported in float32 beside the run, and the summary written."""

import math
import os

import tensorflow as tf

from tfattn import files
from tfattn.core import ensure_built
from tfattn.model import make_model
from tfattn.runs.directory import damage_of, step_of
from tfattn.serving.translator import Translator, export
from tfattn.training.precision import precision_scope
from tfattn.training.trainer import restore_weights, weights_checkpoint
from tfattn.training.validation import average_weights, score_of


def finish(run, config, trainer, tokenizers, echo, validator=None, checks=None):
    """Restores the best weights (or their average with the last checkpoints', if it validates
    better), exports them in float32, and writes the summary."""
    best = [p for _, p in run.checkpoint_files() if os.path.dirname(p) == run.path("best")]
    problem = damage_of(best[0]) if best else None
    if problem:
        echo(f"{best[0]} does not read back ({problem}); exporting the last weights instead")
    elif best:
        restore_weights(trainer.model, best[0])
    averaged = None
    if config.validation.average_checkpoints and validator is not None:
        averaged = _average(run, config.validation, trainer.model, validator, echo)
    model = _float32_model(trainer.model, config, tokenizers)
    translator = Translator(model, *tokenizers, config.decode, config=config.to_dict())
    try:
        path = export(translator, run.path("export"))
    except files.WriteError as error:
        raise files.WriteError(f"{error} The run's checkpoints are complete: once the export can be written, "
                               f"write it with: tfattn train --resume --out {run.out}") from None
    history = trainer.history
    summary = {
        "run": run.out,
        "export": path,
        "steps": trainer.step,
        "epochs": len(history.get("loss", [])),
        "best_val_loss": min(history.get("val_loss", [float(checks.saver.best_loss.numpy()) if checks else math.nan])),
        "padding_fraction": round(history["padding_fraction"][-1], 4) if history.get("loss") else None,
        "seconds": round(history["seconds"], 1),
        "nonfinite_steps": trainer.nonfinite_steps,
    }
    if checks is not None:
        summary.update(best_by=config.validation.best_by, early_stopped=trainer.stop_training)
        if config.validation.best_by == "bleu":
            summary["best_val_bleu"] = float(checks.saver.best_score.numpy())
    if averaged is not None:
        summary["averaged"] = averaged
    run.write_json("summary.json", summary)
    return summary


def _average(run, config, model, validator, echo):
    """Averages the last `config.average_checkpoints` checkpoints' weights; keeps the average in
    `model` (and in `RUN/averaged/`) if it validates better than the weights `model` holds, else
    puts those back. Returns what it did, for the summary."""
    paths = [p for _, p in run.checkpoint_files() if os.path.dirname(p) == run.path("checkpoints")]
    paths = paths[: config.average_checkpoints]
    held = [v.numpy() for v in model.variables]
    before = validator()
    average_weights(model, paths)
    after = validator()
    better = config.better(after, score_of(before, config.best_by))
    steps = [int(step_of(p)) for p in paths]
    what = {"steps": steps, "exported": better, **{f"{k}_average": v for k, v in after.items()},
            **{f"{k}_best": v for k, v in before.items()}}
    name = "BLEU" if config.best_by == "bleu" else "loss"
    scores = f"{name} {_score_text(after, config.best_by)} against {_score_text(before, config.best_by)}"
    if better:
        weights_checkpoint(model).write(run.path("averaged", "ckpt"))
        echo(f"the average of the checkpoints of steps {steps} validates better ({scores}): it is exported "
             f"(and kept in {run.path('averaged')})")
    else:
        for variable, value in zip(model.variables, held):
            variable.assign(value)
        echo(f"the average of the checkpoints of steps {steps} does not validate better ({scores}): the best "
             f"checkpoint is exported")
    run.log(event="average", **what)
    return what


def _score_text(logs, best_by):
    return f"{logs['val_bleu']:.2f}" if best_by == "bleu" else f"{logs['val_loss']:.4f}"


def _float32_model(model, config, tokenizers):
    """`model` itself if it computes in float32 on one device, else a float32 model holding its
    weights in plain variables: an export of a mixed-precision run serves in float32, and one of a
    run under a strategy holds no mirrored variables."""
    mirrored = isinstance(model.variables[0].value, tf.distribute.DistributedValues)
    if model.compute_dtype == "float32" and not mirrored:
        return model
    with precision_scope("float32"):
        twin = ensure_built(make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size))
    for mine, theirs in zip(twin.variables, model.variables):
        mine.assign(theirs)
    return twin
