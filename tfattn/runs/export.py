"""A run's checkpoint exported as a SavedModel (`tfattn export`), and translation through one."""

import os

import tensorflow as tf

from tfattn import files
from tfattn.model import make_model
from tfattn.runs.config import RunConfig
from tfattn.runs.directory import Run, checkpoint_present, damage_of, step_of
from tfattn.serving.litert import export_litert
from tfattn.serving.translator import Translator, export, non_finite_weights
from tfattn.training.trainer import restore_weights


def export_run(run_dir, out, checkpoint="best", accel=None, echo=print, replace_unknown=False, tokenizer_ops="core",
               format="savedmodel"):
    """Exports a run's best (or latest) checkpoint as a SavedModel at `out`; returns `out`.

    The newest checkpoint in `best/` (or, for `"latest"`, in `checkpoints/` or `best/`) that reads
    back whole is used; any newer one is named through `echo`, and so is the step exported. The run
    may be training meanwhile: a checkpoint that it removes while being read (it keeps the last 3)
    is passed over for the newest one then. A checkpoint with a weight that is not finite (a
    diverged run) is refused. `accel=False` exports the reference tier's decoding,
    `replace_unknown=True` replaces output `[UNK]`s by source tokens (see `Translator`), `tokenizer_ops`
    chooses core or tensorflow-text ops for the tokenizers (see `tfattn.serving.translator.export`);
    `format="litert"` writes a LiteRT model instead (`tfattn.serving.litert.export_litert`)."""
    run = Run(run_dir)
    if not run.exists():
        raise FileNotFoundError(f"Not a run directory (no config.json). Received: model={run_dir!r}")
    config = RunConfig.from_dict(run.read_json("config.json"))
    tokenizers = run.tokenizers()
    model = make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    path = _restore_newest(model, run, checkpoint, echo)
    bad = non_finite_weights(model)
    if bad:
        raise ValueError(f"Not exporting {path}: its weight {bad} is not finite (NaN or infinity); the run diverged "
                         f"there. Export another checkpoint (--checkpoint best|latest) or train again with a "
                         f"smaller --learning-rate. Received: checkpoint={checkpoint!r}")
    recovered = files.recover_export(out)
    if recovered:
        echo(f"{out}: {recovered}")
    translator = Translator(model, *tokenizers, config.decode, config=config.to_dict(), accel=accel,
                            replace_unknown=replace_unknown)
    if format == "litert":
        export_litert(translator, out)
    else:
        export(translator, out, tokenizer_ops=tokenizer_ops)
    echo(f"exported step {step_of(path)} of {run_dir} ({path})")
    return out


RESTORE_ATTEMPTS = 20  # rounds of taking the newest checkpoint again, when a training run rotates them away


def _restore_newest(model, run, checkpoint, echo):
    """Restores into `model` the newest checkpoint of `run` (see `export_run`) that reads back whole;
    returns its path. One removed while it is read is passed over without a word."""
    named = set()
    for _ in range(RESTORE_ATTEMPTS):
        paths, gone = _checkpoints_of(run, checkpoint), False
        for path in paths:
            problem = damage_of(path)
            if problem is None and _restored(model, path):
                return path
            if not checkpoint_present(path):
                gone = True  # rotated away by the training process: not damaged
            elif path not in named:
                named.add(path)
                echo(f"skipping the checkpoint {path}: it does not read back ({problem})")
        if not paths:
            raise FileNotFoundError(f"No {checkpoint} checkpoint in {run.out}. Received: checkpoint={checkpoint!r}")
        if not gone:
            raise ValueError(f"No {checkpoint} checkpoint reads back whole (the {len(paths)} named above); "
                             f"{_instead(run, checkpoint, paths)}. Received: newest={paths[0]!r}")
    raise OSError(f"The checkpoints of {run.out} were removed faster than they could be read ({RESTORE_ATTEMPTS} "
                  f"times); export once training has ended, or pass --checkpoint best. Received: "
                  f"checkpoint={checkpoint!r}")


def _instead(run, checkpoint, damaged):
    """What to do when none of the `damaged` checkpoints reads back: export the latest one, if a
    checkpoint outside best/ is intact, or else train again."""
    others = [p for p in _checkpoints_of(run, "latest") if p not in damaged]
    if checkpoint == "best" and any(damage_of(p) is None for p in others):
        return ("the latest checkpoints are intact: export one with --checkpoint latest (the newest state, "
                "not the best by validation), or train the run again into a new --out")
    return "train the run again into a new --out"


def _checkpoints_of(run, checkpoint):
    best = run.path("best")
    return [p for _, p in run.checkpoint_files() if checkpoint != "best" or os.path.dirname(p) == best]


def _restored(model, path):
    """Restores the weights of the checkpoint at `path` into `model`: True; False if the checkpoint
    was removed meanwhile (a failure of a checkpoint still there is raised)."""
    try:
        restore_weights(model, path)
    except (tf.errors.OpError, OSError, ValueError, AssertionError):
        if checkpoint_present(path):
            raise
        return False
    return True


def translate_texts(translate, texts, batch_size=64, **inputs):
    """Translates a list of str with a loaded signature, `batch_size` at a time; returns str list."""
    out = []
    for i in range(0, len(texts), batch_size):
        result = translate(text=tf.constant(texts[i : i + batch_size], tf.string), **inputs)
        out.extend(t.decode("utf-8") for t in result["text"].numpy())
    return out
