"""Training runs on real corpora: one directory holds the config, checkpoints, history and export.

The directory's layout, its lock and its checkpoint files are in `tfattn.training.rundir`.

A killed run continues with `resume=True` (`tfattn train --resume --out RUN`): the newest checkpoint
that reads back whole puts the model, the optimizer, the data position and the history back, and
each epoch's batches come in a fixed order (seeded by the epoch), so training goes on from the batch
after that checkpoint. The latest state is saved every `checkpoint_every` steps and at every epoch's
end, so a kill loses at most one checkpoint interval or one epoch of training, whichever is shorter.
"""

import dataclasses
import json
import os

import keras
import tensorflow as tf

from tfattn import files
from tfattn.data import corpora
from tfattn.data.pipeline import DataConfig, batch_rows, count_rows, tokenize_pairs, too_long
from tfattn.decoding.search import DecodeConfig
from tfattn.serving.translator import Translator, export
from tfattn.model import ModelConfig, make_model
from tfattn.data.text import Tokenizer
from tfattn.training.rundir import Run, damage_of, newest_readable, remove_failed_save
from tfattn.training.trainer import TrainConfig, Trainer, restore_weights


@dataclasses.dataclass
class CorpusConfig:
    """Where the sentence pairs come from.

    Attributes:
        corpus: a path, a URL of an Anki zip, `tfds:NAME`, or, with `format="parallel"`, a
            directory holding `SPLIT.LANG` files (Multi30k's `train.en`, `train.de`, ...).
        format: `"anki"`, `"tsv"`, `"parallel"` or None (guessed from `corpus`).
        strict: stop at the first bad line instead of skipping it.
        direction: Anki files: `"to_english"` (default) or `"from_english"`.
        source_lang, target_lang: parallel files: the file suffixes.
        splits: names of the train, validation and test splits for parallel files and TFDS. A
            single file is split by line index (TEST `i % 50 == 0`, VALIDATION `i % 50 == 1`).
        data_dir: TFDS data directory.
        max_pairs: keep only this many training pairs (every k-th), for quick runs.
    """

    corpus: str = ""
    format: str | None = None
    strict: bool = False
    direction: str = "to_english"
    source_lang: str | None = None
    target_lang: str | None = None
    splits: tuple = ("train", "validation", "test")
    data_dir: str | None = None
    max_pairs: int | None = None


@dataclasses.dataclass
class TokenizerConfig:
    """How one side is tokenized: `level` `"char"`, `"word"` or `"wordpiece"`, vocabulary size
    (reserved ids included), maximum tokens per sentence (markers included), case folding."""

    level: str = "word"
    max_tokens: int | None = 8000
    max_length: int = 40
    lowercase: bool = True


@dataclasses.dataclass
class RunConfig:
    """Everything a training run needs; saved as `RUN/config.json`."""

    corpus: CorpusConfig = dataclasses.field(default_factory=CorpusConfig)
    source_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    target_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    checkpoint_every: int = 500

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        kinds = {f.name: f.default_factory for f in dataclasses.fields(cls)
                 if dataclasses.is_dataclass(f.default_factory)}
        d = {name: _without_retired(name, value) for name, value in d.items()}
        fields = {name: kinds[name](**value) if name in kinds else value for name, value in d.items()}
        fields["corpus"].splits = tuple(fields["corpus"].splits)
        return cls(**fields)


# Fields that earlier versions wrote into config.json and that no longer exist, so that their runs
# still resume and their exports still load: {section: {field, ...}}.
_RETIRED = {"data": {"bucket_width"},  # length bins, replaced by sorted pools (`pool_batches`)
            "decode": {"slices"},  # the fast tier's row slices, now its own (`tfattn.accel.decoding`)
            "model": {"projection_dtype"}}  # bfloat16 output layers in training, removed


def _without_retired(section, value):
    retired = _RETIRED.get(section, ())
    return {k: v for k, v in value.items() if k not in retired} if isinstance(value, dict) else value


# -- data ------------------------------------------------------------------------------------------

def load_splits(config):
    """`CorpusConfig` -> `({"train": pairs, "validation": pairs, "test": pairs}, summary line)`."""
    c = config
    if not c.corpus:
        raise ValueError("No corpus given: pass --corpus PATH|URL|tfds:NAME. Received: corpus=''")
    if c.corpus.startswith("tfds:") or c.format == "parallel":
        loaded = {name: _load_split(c, split) for name, split in zip(corpora.SPLITS, c.splits)}
        parts = {name: corpus.pairs for name, corpus in loaded.items()}
        summary = "; ".join(corpus.summary() for corpus in loaded.values())
    else:
        kw = {"direction": c.direction} if c.format in (None, "anki") else {}
        corpus = corpora.load_corpus(c.corpus, format=c.format, strict=c.strict, **kw)
        parts, summary = corpora.split_pairs(corpus), corpus.summary()
    if c.max_pairs and len(parts["train"]) > c.max_pairs:
        every = len(parts["train"]) / c.max_pairs
        parts["train"] = [parts["train"][int(i * every)] for i in range(c.max_pairs)]
    return parts, summary


def _load_split(c, split):
    if c.corpus.startswith("tfds:"):
        return corpora.load_corpus(c.corpus, split=split, data_dir=c.data_dir, strict=c.strict)
    return corpora.load_corpus(os.path.join(c.corpus, split), format="parallel", strict=c.strict,
                               source_lang=c.source_lang, target_lang=c.target_lang)


def make_tokenizers(config, train_pairs):
    """Learns source and target vocabularies from the training pairs."""
    make = lambda t, texts: Tokenizer.adapt(texts, max_tokens=t.max_tokens, level=t.level,  # noqa: E731
                                            max_length=t.max_length, lowercase=t.lowercase)
    return (make(config.source_tokenizer, [s for s, _ in train_pairs]),
            make(config.target_tokenizer, [t for _, t in train_pairs]))


# -- training --------------------------------------------------------------------------------------

def train_run(config, out, resume=False, quiet=False, echo=print, epochs=None, time_budget=None):
    """Trains (or resumes) a run in directory `out`; returns the summary dict.

    The run holds `out`'s lock from start to end (see `tfattn.training.rundir`). Nothing else is
    written to `out` until the corpus has loaded and the length limits leave training and
    validation pairs; then the latest state is saved every `checkpoint_every` steps, at every
    epoch's end, at the end, and when the run is interrupted (Ctrl-C). A resumed run goes on from
    the newest state that reads back whole, its history cut back to that state.

    Args:
        config: `RunConfig` of a new run; ignored when resuming (the run's `config.json` holds it).
        out: the run directory: absent or empty for a new run.
        resume: continue the run in `out` from its latest checkpoint.
        quiet: no progress bar.
        echo: where one-line messages go.
        epochs: when resuming, train up to this many epochs in all (default: the run's own).
        time_budget: when resuming, this session's budget in seconds (default: the run's own, again).

    Raises:
        tfattn.files.WriteError: a checkpoint, log or export could not be written (disk full,
            read-only); what was saved before is untouched.
    """
    run = Run(out)
    with run.claim(resume, echo):
        if resume:
            config = _resumed_config(run, epochs, time_budget)
        parts, summary = load_splits(config.corpus)
        _require_pairs(config, parts, summary)
        echo(summary)
        tokenizers = run.tokenizers() if resume else make_tokenizers(config, parts["train"])
        datasets = _datasets(config, parts, tokenizers, echo)
        if not resume:
            run.write_json("tokenizers.json", {"source": tokenizers[0].get_config(),
                                               "target": tokenizers[1].get_config()})
        run.write_json("config.json", config.to_dict())
        keras.utils.set_random_seed(config.train.seed)  # the first weights and dropout seeds come from it
        model = make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
        trainer = Trainer(model, config.train, quiet=quiet)
        return _train(run, config, trainer, datasets, tokenizers, resume, echo)


def _resumed_config(run, epochs, time_budget):
    config = RunConfig.from_dict(run.read_json("config.json"))
    if epochs is not None:
        config.train.epochs = epochs
    if time_budget is not None:
        config.train.time_budget = time_budget
    return config


def _require_pairs(config, parts, summary):
    for split in ("train", "validation"):
        if not parts[split]:
            raise ValueError(f"The {split} split of {config.corpus.corpus} has no sentence pairs ({summary}); "
                             f"training needs both train and validation pairs. Received: "
                             f"corpus={config.corpus.corpus!r}")


def _datasets(config, parts, tokenizers, echo):
    """The training batches (a function of the epoch) and the validation batches; refuses a split
    that the length limits leave empty."""
    rows = {split: tokenize_pairs(parts[split], *tokenizers) for split in ("train", "validation")}
    for split, split_rows in rows.items():  # a first pass, which also fills each split's cache
        _check_lengths(split, parts[split], count_rows(split_rows), tokenizers, echo)

    def train(epoch):  # a fixed order per epoch, so that a resumed run sees the same batches
        epoch_config = dataclasses.replace(config.data, seed=config.data.seed + epoch)
        return batch_rows(rows["train"], epoch_config)

    return {"train": train, "validation": batch_rows(rows["validation"], config.data, shuffle=False)}


def _check_lengths(split, pairs, kept, tokenizers, echo):
    """Says how many pairs of `split` the length limits dropped; refuses if they dropped all."""
    if kept == len(pairs):
        return
    by_source, by_target, _ = too_long(pairs, *tokenizers)
    limits = sorted({tokenizers[0].max_length, tokenizers[1].max_length})
    which = (f"{by_source:,} with a source longer than {tokenizers[0].max_length} tokens, {by_target:,} with a "
             f"target longer than {tokenizers[1].max_length}; [START] and [END] count")
    if not kept:
        raise ValueError(f"No {split} pairs are left: the length limit drops all {len(pairs):,} ({which}). Pass a "
                         f"larger --max-length. Received: max_length={'/'.join(map(str, limits))}")
    echo(f"{split}: the length limit drops {len(pairs) - kept:,} of {len(pairs):,} pairs ({which})")


def _train(run, config, trainer, datasets, tokenizers, resume, echo):
    saver = _Saver(run, trainer, config.checkpoint_every)
    if resume:
        saver.restore(config, echo)

    def on_step(trainer, logs):
        saver.after_step(logs["step_loss"])

    def on_epoch(epoch, logs):
        if logs.get("val_loss", float("inf")) < saver.best_loss.numpy():
            saver.best_loss.assign(logs["val_loss"])
            saver.save(saver.best)
        saver.save_latest()  # every epoch's end, so that a kill loses at most one epoch
        run.write_json("history.json", saver.history_now())
        run.log(event="epoch", epoch=epoch, step=trainer.step, **logs)

    try:
        trainer.fit(datasets["train"], validation=datasets["validation"], callbacks=[on_epoch], on_step=on_step)
    except KeyboardInterrupt:
        saver.save_latest("interrupted")
        echo(f"interrupted at step {trainer.step}; saved. Continue with: tfattn train --resume --out {run.out}")
        raise
    saver.save_latest("end")
    run.write_json("history.json", trainer.history)
    return _finish(run, config, trainer, tokenizers, echo)


class _Saver:
    """The run's checkpoints: the latest state in `checkpoints/` (the last 3), the best in `best/`.

    Each state holds the weights, the optimizer, the epoch, data position and epoch sums
    (`Trainer.state`), the best validation loss so far and the history up to it, and is named by its
    step. A state is not saved twice at one step: when a step save falls on an epoch's last batch,
    the epoch's end keeps it (and `best/` may hold the same step after the epoch's end); a run resumed
    from it trains no batch of that epoch and validates it again.
    """

    OPTIONAL = ("history", "epoch_sums")  # parts a checkpoint of an earlier version may lack

    def __init__(self, run, trainer, every):
        self.run, self.trainer, self.every = run, trainer, every
        self.saved_step, self.saved_this_session = None, False
        self.best_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False, name="best_val_loss")
        self.history = tf.Variable("", dtype=tf.string, trainable=False, name="history")
        self.parts = {**trainer.state(), "best_val_loss": self.best_loss, "history": self.history}
        self.checkpoint = tf.train.Checkpoint(**self.parts)
        self.latest = tf.train.CheckpointManager(self.checkpoint, run.path("checkpoints"), max_to_keep=3)
        self.best = tf.train.CheckpointManager(self.checkpoint, run.path("best"), max_to_keep=1)

    def history_now(self):
        return {**self.trainer.history, "seconds": self.trainer.seconds}

    def after_step(self, loss):
        """Saves the latest state if it is due: at this session's first step (so that a directory that
        cannot be written stops the run at once), then `every` steps after the last save."""
        if not self.saved_this_session or self.trainer.step >= self.saved_step + self.every:
            self.save_latest("checkpoint", loss=loss)  # a step's loss is read only when saved

    def save_latest(self, event=None, **record):
        """Saves the latest state (unless saved at this step already); logs `event` if given."""
        step = self.trainer.step
        if step != self.saved_step:
            self.save(self.latest)
            self.saved_step, self.saved_this_session = step, True
        if event:
            self.run.log(event=event, step=step, epoch=int(self.trainer.epoch),
                         position=int(self.trainer.position), **{k: float(v) for k, v in record.items()})

    def save(self, manager):
        step = self.trainer.step
        self.history.assign(json.dumps(self.history_now()))
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
        tf.train.Checkpoint(**parts).restore(path).assert_existing_objects_matched()
        self.saved_step = self.trainer.step
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


def _finish(run, config, trainer, tokenizers, echo):
    """Restores the best weights, exports them, and writes the summary."""
    best = [p for _, p in run.checkpoint_files() if os.path.dirname(p) == run.path("best")]
    problem = damage_of(best[0]) if best else None
    if problem:
        echo(f"{best[0]} does not read back ({problem}); exporting the last weights instead")
    elif best:
        restore_weights(trainer.model, best[0])
    translator = Translator(trainer.model, *tokenizers, config.decode, config=config.to_dict())
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
        "best_val_loss": min(history.get("val_loss", [float("nan")])),
        "padding_fraction": round(history["padding_fraction"][-1], 4) if history.get("loss") else None,
        "seconds": round(history["seconds"], 1),
    }
    run.write_json("summary.json", summary)
    return summary


def export_run(run_dir, out, checkpoint="best", accel=None, echo=print, replace_unknown=False):
    """Exports a run's best (or latest) checkpoint as a SavedModel at `out`; returns `out`.

    The newest checkpoint in `best/` (or, for `"latest"`, in `checkpoints/` or `best/`) that reads
    back whole is used; any newer one is named through `echo`. `accel=False` exports the reference
    tier's decoding, `replace_unknown=True` replaces output `[UNK]`s by source tokens (see `Translator`)."""
    run = Run(run_dir)
    if not run.exists():
        raise FileNotFoundError(f"Not a run directory (no config.json). Received: model={run_dir!r}")
    config = RunConfig.from_dict(run.read_json("config.json"))
    tokenizers = run.tokenizers()
    model = make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    best = run.path("best")
    path = newest_readable([p for _, p in run.checkpoint_files() if checkpoint != "best" or os.path.dirname(p) == best],
                           echo)
    if path is None:
        raise FileNotFoundError(f"No {checkpoint} checkpoint in {run_dir}. Received: checkpoint={checkpoint!r}")
    restore_weights(model, path)
    translator = Translator(model, *tokenizers, config.decode, config=config.to_dict(), accel=accel,
                            replace_unknown=replace_unknown)
    return export(translator, out)


def run_config_of(model_dir):
    """The `RunConfig` of a run directory, or of the run an export came from; None if unknown."""
    for path in (os.path.join(model_dir, "config.json"), os.path.join(model_dir, "..", "config.json")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return RunConfig.from_dict(json.load(f))
    return None


def translate_texts(translate, texts, batch_size=64, **inputs):
    """Translates a list of str with a loaded signature, `batch_size` at a time; returns str list."""
    out = []
    for i in range(0, len(texts), batch_size):
        result = translate(text=tf.constant(texts[i : i + batch_size], tf.string), **inputs)
        out.extend(t.decode("utf-8") for t in result["text"].numpy())
    return out
