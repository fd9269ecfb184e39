"""Training runs on real corpora: one directory holds the config, checkpoints, history and export.

    RUN/
      config.json       the final RunConfig (flags applied)
      tokenizers.json   both tokenizers, vocabularies included (a resumed run reuses them)
      checkpoints/      every `checkpoint_every` steps: model, optimizer, epoch, data position
      best/             the checkpoint with the lowest validation loss
      log.jsonl         one JSON line per checkpoint and per epoch
      history.json      per-epoch loss, accuracy, validation loss and accuracy, tokens/s
      export/           the SavedModel of the best checkpoint, written at the end

A killed run continues with `resume=True` (`tfattn train --resume --out RUN`): the checkpoint puts
the model, the optimizer and the data position back, and each epoch's batches come in a fixed order
(seeded by the epoch), so training goes on from the batch after the last checkpoint.
"""

import dataclasses
import json
import os

import tensorflow as tf

from tfattn.data import corpora
from tfattn.data.pipeline import DataConfig, batch_rows, make_dataset, tokenize_pairs
from tfattn.decoding.search import DecodeConfig
from tfattn.serving.translator import Translator, export
from tfattn.model import ModelConfig, make_model
from tfattn.data.text import Tokenizer
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


# -- the run directory -----------------------------------------------------------------------------

class Run:
    """A run directory: paths, JSON files and the checkpoint managers."""

    def __init__(self, out):
        self.out = os.fspath(out)

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def exists(self):
        return os.path.exists(self.path("config.json"))

    def write_json(self, name, obj):
        tmp = self.path(name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
        os.replace(tmp, self.path(name))  # never a half-written file

    def read_json(self, name):
        with open(self.path(name), encoding="utf-8") as f:
            return json.load(f)

    def log(self, **record):
        with open(self.path("log.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def tokenizers(self):
        d = self.read_json("tokenizers.json")
        return Tokenizer.from_config(d["source"]), Tokenizer.from_config(d["target"])


def train_run(config, out, resume=False, quiet=False, echo=print, epochs=None, time_budget=None):
    """Trains (or resumes) a run in directory `out`; returns the summary dict.

    Nothing is written to `out` until the corpus has loaded and its training and validation splits
    hold pairs. The latest state is saved every `checkpoint_every` steps, at the end, and when the
    run is interrupted (Ctrl-C); a resumed run goes on from it, its history continued.

    Args:
        config: `RunConfig` of a new run; ignored when resuming (the run's `config.json` holds it).
        out: the run directory.
        resume: continue the run in `out` from its latest checkpoint.
        quiet: no progress bar.
        echo: where one-line messages go.
        epochs: when resuming, train up to this many epochs in all (default: the run's own).
        time_budget: when resuming, this session's budget in seconds (default: the run's own, again).
    """
    run = Run(out)
    if resume:
        config = _resumed_config(run, epochs, time_budget)
    elif run.exists():
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another "
                              f"--out. Received: out={out!r}")
    parts, summary = load_splits(config.corpus)
    echo(summary)
    for split in ("train", "validation"):
        if not parts[split]:
            raise ValueError(f"The {split} split of {config.corpus.corpus} has no sentence pairs ({summary}); "
                             f"training needs both train and validation pairs. Received: "
                             f"corpus={config.corpus.corpus!r}")
    if resume:
        tokenizers = run.tokenizers()
    else:
        tokenizers = make_tokenizers(config, parts["train"])
    datasets = _datasets(config, parts, tokenizers)
    os.makedirs(out, exist_ok=True)
    if not resume:
        run.write_json("tokenizers.json", {"source": tokenizers[0].get_config(), "target": tokenizers[1].get_config()})
    run.write_json("config.json", config.to_dict())
    model = make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    trainer = Trainer(model, config.train, quiet=quiet)
    return _train(run, config, trainer, datasets, tokenizers, resume, echo)


def _resumed_config(run, epochs, time_budget):
    if not run.exists():
        raise FileNotFoundError(f"No run to resume in {run.out} (no config.json). Received: out={run.out!r}")
    config = RunConfig.from_dict(run.read_json("config.json"))
    if epochs is not None:
        config.train.epochs = epochs
    if time_budget is not None:
        config.train.time_budget = time_budget
    return config


def _train(run, config, trainer, datasets, tokenizers, resume, echo):
    best_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False, name="best_val_loss")
    checkpoint = trainer.checkpoint(best_val_loss=best_loss)
    latest = tf.train.CheckpointManager(checkpoint, run.path("checkpoints"), max_to_keep=3,
                                        step_counter=trainer.optimizer.iterations,
                                        checkpoint_interval=config.checkpoint_every)
    best = tf.train.CheckpointManager(checkpoint, run.path("best"), max_to_keep=1)
    if resume and latest.latest_checkpoint:
        _restore(run, config, trainer, checkpoint, latest.latest_checkpoint, echo)

    def save_latest(event, check_interval=False, **record):
        """The latest state, named by step: every `checkpoint_every` steps (`check_interval`), or now."""
        if latest.save(checkpoint_number=trainer.step, check_interval=check_interval):
            run.log(event=event, step=trainer.step, epoch=int(trainer.epoch), position=int(trainer.position),
                    **{k: float(v) for k, v in record.items()})  # a step's loss is read only when saved

    def on_step(trainer, logs):
        save_latest("checkpoint", check_interval=True, loss=logs["step_loss"])

    def on_epoch(epoch, logs):
        if logs.get("val_loss", float("inf")) < best_loss.numpy():
            best_loss.assign(logs["val_loss"])
            best.save(checkpoint_number=trainer.step)
        run.log(event="epoch", epoch=epoch, step=trainer.step, **logs)
        run.write_json("history.json", trainer.history)

    try:
        history = trainer.fit(datasets["train"], validation=datasets["validation"], callbacks=[on_epoch],
                              on_step=on_step)
    except KeyboardInterrupt:
        save_latest("interrupted")
        echo(f"interrupted at step {trainer.step}; saved. Continue with: tfattn train --resume --out {run.out}")
        raise
    save_latest("end")
    run.write_json("history.json", history)
    return _finish(run, config, trainer, tokenizers, best, history)


def _restore(run, config, trainer, checkpoint, path, echo):
    """Restores the run's latest state from the checkpoint at `path`, and its history."""
    checkpoint.restore(path).assert_existing_objects_matched()
    echo(f"resumed from step {trainer.step} (epoch {int(trainer.epoch)}, batch {int(trainer.position)})")
    run.log(event="resume", step=trainer.step)
    if os.path.exists(run.path("history.json")):  # the epochs before, continued
        trainer.history = run.read_json("history.json")
    if int(trainer.epoch) > config.train.epochs:
        echo(f"the run has trained its {config.train.epochs} epochs; pass --epochs to train longer")


def _datasets(config, parts, tokenizers):
    source_tok, target_tok = tokenizers
    rows = tokenize_pairs(parts["train"], source_tok, target_tok)  # tokenized once, then cached

    def train(epoch):  # a fixed order per epoch, so that a resumed run sees the same batches
        epoch_config = dataclasses.replace(config.data, seed=config.data.seed + epoch)
        return batch_rows(rows, epoch_config)

    validation = make_dataset(parts["validation"], source_tok, target_tok, config.data, shuffle=False)
    return {"train": train, "validation": validation}


def _finish(run, config, trainer, tokenizers, best, history):
    """Restores the best weights, exports them, and writes the summary."""
    if best.latest_checkpoint:
        restore_weights(trainer.model, best.latest_checkpoint)
    translator = Translator(trainer.model, *tokenizers, config.decode, config=config.to_dict())
    path = export(translator, run.path("export"))
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


def export_run(run_dir, out, checkpoint="best", accel=True):
    """Exports a run's best (or latest) checkpoint as a SavedModel at `out`; returns `out`.

    `accel=False` exports the reference tier's decoding (see `Translator`)."""
    run = Run(run_dir)
    if not run.exists():
        raise FileNotFoundError(f"Not a run directory (no config.json). Received: model={run_dir!r}")
    config = RunConfig.from_dict(run.read_json("config.json"))
    tokenizers = run.tokenizers()
    model = make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    path = tf.train.latest_checkpoint(run.path("best" if checkpoint == "best" else "checkpoints"))
    if path is None:
        raise FileNotFoundError(f"No {checkpoint} checkpoint in {run_dir}. Received: checkpoint={checkpoint!r}")
    restore_weights(model, path)
    translator = Translator(model, *tokenizers, config.decode, config=config.to_dict(), accel=accel)
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
