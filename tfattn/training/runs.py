"""Training runs on real corpora: one directory holds the config, checkpoints, history and export.

The directory's layout, its lock and its checkpoint files are in `tfattn.training.rundir`.

A killed run continues with `resume=True` (`tfattn train --resume --out RUN`): the newest checkpoint
that reads back whole puts the model, the optimizer, the data position and the history back, and
each epoch's batches come in a fixed order (seeded by the epoch), so training goes on from the batch
after that checkpoint. The latest state is saved every `checkpoint_every` steps and at every epoch's
end, so a kill loses at most one checkpoint interval or one epoch of training, whichever is shorter.
"""

import contextlib
import dataclasses
import datetime
import glob
import hashlib
import json
import math
import os
import signal
import threading

import keras
import tensorflow as tf

from tfattn import files
from tfattn.data import corpora
from tfattn.data.pipeline import DataConfig, batch_rows, count_rows, tokenize_pairs, too_long, with_count
from tfattn.decoding.search import DecodeConfig
from tfattn.serving.translator import Translator, export, non_finite_weights
from tfattn.model import ModelConfig, make_model
from tfattn.data.text import Tokenizer
from tfattn.training.rundir import Run, Terminated, damage_of, newest_readable, remove_failed_save
from tfattn.model import ensure_built
from tfattn.training import distributed
from tfattn.training.distributed import DistributeConfig
from tfattn.training.precision import precision_scope
from tfattn.training.trainer import (DivergedError, TrainConfig, Trainer, check_weights_match, restore_weights,
                                     weights_checkpoint)
from tfattn.training.validation import ValidationConfig, Validator, average_weights, score_of


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
        fingerprint: a local corpus file's `{"size", "mtime", "sha256"}` (see `fingerprint`), taken
            when the run started; a resumed run or `evaluate` refuses a file that does not match it.
            None for URLs, TFDS, directories and runs of earlier versions.
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
    fingerprint: dict | None = None


@dataclasses.dataclass
class TokenizerConfig:
    """How one side is tokenized: `level` `"char"`, `"word"` or `"wordpiece"`, vocabulary size
    (reserved ids included), maximum tokens per sentence (markers included), case folding."""

    level: str = "word"
    max_tokens: int | None = 8000
    max_length: int = 40
    lowercase: bool = True


# The warm-up of a run whose `TrainConfig.warmup_steps` is None: at the recipe's 2e-3, a model with
# multi-head attention (the Transformer, a self-attention encoder, a multi-head Luong decoder) can stay
# at the unigram loss from its first steps on; 1,000 steps of warm-up avoid it (docs/models.md).
WARMUP_MULTIHEAD = 1000


def default_warmup(model):
    """The warm-up steps a `ModelConfig` trains with by default: `WARMUP_MULTIHEAD` with multi-head
    attention, else 0."""
    return WARMUP_MULTIHEAD if model.heads > 1 or model.self_attention_encoder else 0


@dataclasses.dataclass
class RunConfig:
    """Everything a training run needs; saved as `RUN/config.json`.

    `tensorboard` is where the run writes its TensorBoard summaries: `""` for `RUN/tensorboard`,
    None for nowhere (`tfattn.training.tensorboard`). `distribute` is the `tf.distribute` strategy
    it trains under (`tfattn.training.distributed`); `data.batch_size` is the global batch's. A
    `train.warmup_steps` of None becomes `default_warmup(model)`."""

    corpus: CorpusConfig = dataclasses.field(default_factory=CorpusConfig)
    source_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    target_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    checkpoint_every: int = 500
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    tensorboard: str | None = ""
    distribute: DistributeConfig = dataclasses.field(default_factory=DistributeConfig)

    def __post_init__(self):
        if self.train.warmup_steps is None:  # the model's own default, written into config.json
            self.train = dataclasses.replace(self.train, warmup_steps=default_warmup(self.model))

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The `RunConfig` of a dict read from `config.json`.

        Raises:
            ValueError: naming the first field that is unknown, missing, of the wrong type or refused.
        """
        fields = _fields_of(cls, d, "")
        for name in ("corpus", "model"):
            if name not in fields:
                raise ValueError(f"it has no field {name!r}")
        fields["corpus"].splits = tuple(fields["corpus"].splits)
        return cls(**fields)


def read_run_config(path):
    """The `RunConfig` in the file `path` (a run's `config.json`); one line naming the file and the
    field if it is not JSON or not a run's config."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is damaged, not JSON ({error}). Put back the config.json the run wrote. "
                         f"Received: {path!r}") from None
    try:
        return RunConfig.from_dict(d)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a run's config.json that tfattn reads: {error}. Put back the one the run "
                         f"wrote. Received: {path!r}") from None


def _fields_of(kind, d, where):
    """The constructor arguments of the dataclass `kind` from the JSON object `d`, each field checked
    (name and type, its section's own checks); `where` prefixes a field's name in errors."""
    if not isinstance(d, dict):
        raise _FieldError(f"{where.rstrip('.') or 'the file'} is a JSON {type(d).__name__}, not an object")
    known, fields = {f.name: f for f in dataclasses.fields(kind)}, {}
    for name, value in d.items():
        field = known.get(name)
        if field is None:
            raise _FieldError(f"unknown field {where}{name}")
        if dataclasses.is_dataclass(field.default_factory):
            section = field.default_factory
            arguments = _fields_of(section, _without_retired(name, value), f"{where}{name}.")
            try:
                value = section(**arguments)
            except (TypeError, ValueError) as error:  # the section's own checks (`__post_init__`)
                raise _FieldError(f"{where}{name}: {error}") from None
        elif not _fits(field.type, value):
            raise _FieldError(f"field {where}{name} is {value!r}, not {_type_name(field.type)}")
        fields[name] = value
    return fields


class _FieldError(ValueError):
    """A field of a config.json that is unknown or of the wrong kind (the message names it)."""


_JSON_KINDS = {"str": str, "bool": bool, "int": int, "float": (int, float), "tuple": (list, tuple), "dict": dict,
               "None": type(None)}


def _type_name(annotation):
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _fits(annotation, value):
    """Whether the JSON value `value` fits a field annotated `annotation` (`int`, `float | None`, ...)."""
    names = [name.strip() for name in _type_name(annotation).split("|")]
    if any(name not in _JSON_KINDS for name in names):
        return True  # a kind this check does not know
    if isinstance(value, bool) and "bool" not in names:
        return False
    return any(isinstance(value, _JSON_KINDS[name]) for name in names)


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
    check_fingerprint(c)
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


MEGABYTE = 1 << 20


def with_fingerprint(corpus):
    """`corpus` (a `CorpusConfig`) with its path made absolute and, for a local file, its fingerprint."""
    spec = corpus.corpus
    if not spec or spec.startswith("tfds:") or corpora._is_url(spec):
        return corpus
    path = os.path.abspath(spec)
    return dataclasses.replace(corpus, corpus=path, fingerprint=fingerprint(path) if os.path.isfile(path) else None)


def fingerprint(path):
    """`{"size", "mtime", "sha256"}` of a file: its size in bytes, its modification time, and the SHA-256
    of its first and last megabytes (of all of it, up to 2 MB)."""
    size, digest = os.path.getsize(path), hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(MEGABYTE))
        f.seek(max(size - MEGABYTE, MEGABYTE))
        digest.update(f.read(MEGABYTE))
    return {"size": size, "mtime": os.path.getmtime(path), "sha256": digest.hexdigest()}


def check_fingerprint(corpus):
    """Refuses a corpus file that is gone or is not the one fingerprinted in `corpus` (another size
    or other content); a new modification time alone (a copy) is accepted."""
    was, path = corpus.fingerprint, corpus.corpus
    if not was:
        return
    if not os.path.isfile(path):
        raise FileNotFoundError(f"The run's corpus {path} is gone (moved or deleted?); pass --corpus with where it is "
                                f"now, which is checked to be the same file ({was.get('size', 0):,} bytes, modified "
                                f"{_when(was.get('mtime'))}). Received: corpus={path!r}")
    now = fingerprint(path)
    if now["size"] != was.get("size"):
        change = f"it has {now['size']:,} bytes, the run's corpus had {was.get('size', 0):,}"
    elif now["sha256"] != was.get("sha256"):
        change = "it has the run's corpus's size but other content"
    else:
        return
    if now["mtime"] != was.get("mtime"):
        change += f"; modified {_when(now['mtime'])}, the run's at {_when(was.get('mtime'))}"
    raise ValueError(f"{path} is not the corpus this run trained on: {change}. Pass --corpus with the run's file "
                     f"where it is now. Received: corpus={path!r}")


def _when(mtime):
    return datetime.datetime.fromtimestamp(mtime or 0).isoformat(sep=" ", timespec="seconds")


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

def train_run(config, out, resume=False, quiet=False, echo=print, epochs=None, time_budget=None, corpus=None,
              distribute=None):
    """Trains (or resumes) a run in directory `out`; returns the summary dict.

    The run holds `out`'s lock from start to end (see `tfattn.training.rundir`). Nothing else is
    written to `out` until the corpus has loaded and the length limits leave training and
    validation pairs; then the latest state is saved every `checkpoint_every` steps, at every
    epoch's end, at the end, and when the run is interrupted (Ctrl-C, or SIGTERM, which raises
    `tfattn.training.rundir.Terminated` here). A resumed run goes on from the newest state that reads
    back whole, its history cut back to that state, on the corpus file it started with (its
    absolute path and fingerprint are in `config.json`).

    Under `config.distribute`'s `"multiworker"` strategy, every worker calls this with the same
    arguments; the chief does all of the above, and the others train with it and write nothing
    (`_train_with_chief`).

    Args:
        config: `RunConfig` of a new run; ignored when resuming (the run's `config.json` holds it).
        out: the run directory: absent or empty for a new run.
        resume: continue the run in `out` from its latest checkpoint.
        quiet: no progress bar.
        echo: where one-line messages go.
        epochs: when resuming, train up to this many epochs in all (default: the run's own).
        time_budget: when resuming, this session's budget in seconds (default: the run's own, again).
        corpus: when resuming, where the run's corpus file is now (checked against its fingerprint).
        distribute: when resuming, a `DistributeConfig` to go on under (default: the run's own); a
            checkpoint restores under any strategy.

    Raises:
        tfattn.files.WriteError: a checkpoint, log or export could not be written (disk full,
            read-only); what was saved before is untouched.
        tfattn.training.trainer.DivergedError: the loss went non-finite; the last good state is kept.
    """
    run = Run(out)
    if not distributed.is_chief(_strategy_name(run, config, resume, distribute)):
        return _train_with_chief(run, config, resume, epochs, time_budget, corpus, distribute, echo)
    with _sigterm_as_interrupt(), run.claim(resume, echo):
        if resume:
            config = _resumed_config(run, epochs, time_budget, corpus, distribute)
        else:
            config = dataclasses.replace(config, corpus=with_fingerprint(config.corpus))
        strategy = distributed.make_strategy(config.distribute.strategy, config.distribute.replicas)
        tokenizers, datasets, trainer = _prepare(config, run.tokenizers() if resume else None, strategy, quiet, echo)
        if not resume:
            run.write_json("tokenizers.json", {"source": tokenizers[0].get_config(),
                                               "target": tokenizers[1].get_config()})
        run.write_json("config.json", config.to_dict())
        return _train(run, config, trainer, datasets, tokenizers, resume, echo)


def _strategy_name(run, config, resume, distribute):
    """The strategy a run trains under: `distribute`'s, else the run's (`config.json`, when resuming)."""
    if distribute is not None:
        return distribute.strategy
    if resume and run.exists():
        return read_run_config(run.path("config.json")).distribute.strategy
    return config.distribute.strategy


def _prepare(config, tokenizers, strategy, quiet, echo):
    """Loads the corpus and makes `(tokenizers, datasets, trainer)`: the tokenizers learned from
    the training pairs unless given, the model made in the strategy's scope (if any), its weights
    built before anything is written. Under several workers, refuses settings or a corpus that
    differ from the other workers'."""
    parts, summary = load_splits(config.corpus)
    _require_pairs(config, parts, summary)
    echo(summary)
    tokenizers = tokenizers or make_tokenizers(config, parts["train"])
    check_memory(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)  # before anything is written
    datasets = _datasets(config, parts, tokenizers, echo)
    distributed.check_same_everywhere(strategy, _what_workers_share(config, tokenizers),
                                      "settings, corpus or vocabularies")
    keras.utils.set_random_seed(config.train.seed)  # the first weights and dropout seeds come from it
    with precision_scope(config.train.precision), distributed.scope(strategy):  # the run's precision
        model = ensure_built(make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size))
    return tokenizers, datasets, Trainer(model, config.train, quiet=quiet, strategy=strategy)


def _what_workers_share(config, tokenizers):
    """A run's settings, corpus content and vocabularies as text, the same on every worker of a run:
    not the paths, which may differ between machines, nor the file's modification time."""
    shared = {**config.to_dict(), "corpus": {**dataclasses.asdict(config.corpus), "corpus": None,
                                              "fingerprint": {k: v for k, v in (config.corpus.fingerprint or {}).items()
                                                              if k != "mtime"}},
              "tensorboard": None, "tokenizers": [t.get_config() for t in tokenizers]}
    return json.dumps(shared, sort_keys=True, default=str)


def _train_with_chief(run, config, resume, epochs, time_budget, corpus, distribute, echo):
    """A worker of a multiworker run that is not its chief: trains in step with the chief and writes
    nothing. A new run takes `config` (the same as the chief's); a resumed one reads the run's
    config.json and tokenizers.json at `run` (the chief's directory on a shared file system, or a
    copy of the two files), and goes on from the chief's state, which the chief restores."""
    if resume and not run.exists():
        raise FileNotFoundError(f"This worker resumes the run with its chief, and reads the run's config.json and "
                                f"tokenizers.json in --out, which has no config.json: point --out at the chief's run "
                                f"directory on a shared file system, or copy the two files there. Received: "
                                f"out={run.out!r}")
    if resume:
        config = _resumed_config(run, epochs, time_budget, corpus, distribute)
    else:
        config = dataclasses.replace(config, corpus=with_fingerprint(config.corpus))
    strategy = distributed.make_strategy(config.distribute.strategy, config.distribute.replicas)  # first
    tokenizers, task = run.tokenizers() if resume else None, distributed.task_name()
    _, datasets, trainer = _prepare(config, tokenizers, strategy, True, lambda line: echo(f"{task}: {line}"))
    with _sigterm_as_interrupt():
        trainer.fit(datasets["train"])
    echo(f"{task}: trained {trainer.step} steps with the chief; it writes the run")
    return {"task": task, "chief": False, "steps": trainer.step, "nonfinite_steps": trainer.nonfinite_steps}


def check_memory(model, source_vocab_size, target_vocab_size):
    """Refuses a `ModelConfig` whose training state cannot fit in the memory this process may use.

    The estimate is a lower bound: the weight matrices only (embeddings, one direction of each
    encoder layer, the decoder RNN, the attention and output layers), 16 bytes each to train (float32
    weights, gradients and Adam's two moments). The memory is the machine's, less what `RLIMIT_AS`
    or a cgroup allows, less what the process already maps."""
    import resource

    c, gates = model, 4 if model.rnn == "lstm" else 3
    rnn = lambda inputs: gates * (inputs + c.units + 2) * c.units  # noqa: E731
    weights = ((source_vocab_size + target_vocab_size) * c.embedding_dim + rnn(c.embedding_dim)
               + (c.num_layers - 1) * rnn(c.units) + rnn(c.embedding_dim) + c.units * c.units
               + c.units * target_vocab_size)
    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        with open("/proc/self/statm") as f:
            limits.append(soft - int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE"))
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limits.append(int(f.read()))
    except (OSError, ValueError):  # no cgroup v2 limit ("max")
        pass
    if 16 * weights > min(limits):
        raise ValueError(f"The model does not fit in memory: its {weights:,} weights need at least "
                         f"{files.human_bytes(16 * weights)} to train, and {files.human_bytes(max(min(limits), 0))} "
                         f"is available. Choose a smaller --units, --layers, --embedding-dim or --vocab-size. "
                         f"Received: units={c.units}, layers={c.num_layers}, embedding_dim={c.embedding_dim}")


def _resumed_config(run, epochs, time_budget, corpus=None, distribute=None):
    config = read_run_config(run.path("config.json"))
    if distribute is not None:  # a checkpoint restores under any strategy
        config.distribute = distribute
    if corpus is not None:  # the run's file, moved: checked against its fingerprint when loaded
        config.corpus.corpus = os.path.abspath(corpus)
    if not config.corpus.fingerprint:  # a run of an earlier version: from now on, this file's
        config.corpus = with_fingerprint(config.corpus)
    if epochs is not None:
        config.train.epochs = epochs
    if time_budget is not None:
        config.train.time_budget = time_budget
    return config


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While the block runs, SIGTERM (docker stop, systemd, `timeout`, SLURM) raises `Terminated`, a
    `KeyboardInterrupt`, so that a run saves its state as on Ctrl-C; a second SIGTERM during that
    save is ignored. Left alone outside the main thread, or where the program set its own handler."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _require_pairs(config, parts, summary):
    for split in ("train", "validation"):
        if not parts[split]:
            raise ValueError(f"The {split} split of {config.corpus.corpus} has no sentence pairs ({summary}); "
                             f"training needs both train and validation pairs. Received: "
                             f"corpus={config.corpus.corpus!r}")


def _datasets(config, parts, tokenizers, echo):
    """The training batches (a function of the epoch) and the validation batches; refuses a split
    that the length limits leave empty."""
    rows = {}
    for split in ("train", "validation"):
        split_rows = tokenize_pairs(parts[split], *tokenizers)
        count = count_rows(split_rows)  # a first pass, which also fills the split's cache
        _check_lengths(split, parts[split], count, tokenizers, echo)
        rows[split] = with_count(split_rows, count)  # known to tf.data: the size of a whole-split shuffle

    def train(epoch):  # a fixed order per epoch, so that a resumed run sees the same batches
        epoch_config = dataclasses.replace(config.data, seed=config.data.seed + epoch)
        return batch_rows(rows["train"], epoch_config, max_lengths=limits)

    limits = tuple(tokenizer.max_length for tokenizer in tokenizers)
    return {"train": train, "validation": batch_rows(rows["validation"], config.data, shuffle=False, max_lengths=limits),
            "validation_pairs": parts["validation"]}


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
    saver = _Saver(run, trainer, config.checkpoint_every, config.validation)
    if resume:
        saver.restore(config, echo)
    validator = Validator(trainer.model, trainer.eval_step, datasets["validation"], datasets["validation_pairs"],
                          tokenizers, config.decode, config.validation.sample, trainer.config.accel)
    board = _summaries(run, config)
    checks = _Validations(run, config.validation, trainer, saver, validator, board, echo)

    def on_step(trainer, logs):
        saver.after_step(logs["step_loss"])
        checks.after_step()

    def on_epoch(epoch, logs):
        if "val_loss" in logs:
            checks.record(logs)
        saver.save_latest()  # every epoch's end, so that a kill loses at most one epoch
        run.write_json("history.json", saver.history_now())
        run.log(event="epoch", epoch=epoch, step=trainer.step, **logs)

    def on_log(trainer, logs):
        if board is not None:
            board.train(trainer, logs)
        if logs["nonfinite_steps"]:
            echo(f"skipped {logs['nonfinite_steps']:.0f} step(s) with a non-finite loss before step {trainer.step} "
                 f"({trainer.nonfinite_steps} in all)")
            run.log(event="nonfinite", step=trainer.step, skipped=logs["nonfinite_steps"],
                    total=trainer.nonfinite_steps)

    try:
        trainer.fit(datasets["train"], validation=None if config.validation.every else validator,
                    callbacks=[on_epoch], on_step=on_step, on_log=on_log)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (`Terminated`)
        how = "terminated" if isinstance(stop, Terminated) else "interrupted"
        saver.save_latest(how)
        echo(f"{how} at step {trainer.step}; saved. Continue with: tfattn train --resume --out {run.out}")
        raise
    except DivergedError as error:
        kept = f"the last good state, step {saver.saved_step}, is kept" if saver.saved_step else "no state was saved"
        raise DivergedError(f"{error}: the run diverged and stops; {kept}. Train a new run with a smaller "
                            f"--learning-rate or --clip-norm. Received: learning_rate={config.train.learning_rate}, "
                            f"clip_norm={config.train.clip_norm}") from None
    finally:
        if board is not None:
            board.close()
    saver.save_latest("end")
    run.write_json("history.json", trainer.history)
    return _finish(run, config, trainer, tokenizers, echo, validator, checks)


def _summaries(run, config):
    """The run's TensorBoard writer (`config.tensorboard`: "" for RUN/tensorboard, None for none)."""
    if config.tensorboard is None:
        return None
    from tfattn.training.tensorboard import Summaries

    return Summaries(config.tensorboard or run.path("tensorboard"), config.to_dict())


class _Validations:
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


class _Saver:
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


def _finish(run, config, trainer, tokenizers, echo, validator=None, checks=None):
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
    steps = [int(_step_of(p)) for p in paths]
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
    from tfattn.serving.translator import non_finite_weights

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
        from tfattn.serving.litert import export_litert

        export_litert(translator, out)
    else:
        export(translator, out, tokenizer_ops=tokenizer_ops)
    echo(f"exported step {_step_of(path)} of {run_dir} ({path})")
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
            if not _present(path):
                gone = True  # rotated away by the training process: not damaged
            elif path not in named:
                named.add(path)
                echo(f"skipping the checkpoint {path}: it does not read back ({problem})")
        if not paths:
            raise FileNotFoundError(f"No {checkpoint} checkpoint in {run.out}. Received: checkpoint={checkpoint!r}")
        if not gone:
            raise ValueError(f"No checkpoint reads back whole (the {len(paths)} named above); train the run again "
                             f"into a new --out. Received: newest={paths[0]!r}")
    raise OSError(f"The checkpoints of {run.out} were removed faster than they could be read ({RESTORE_ATTEMPTS} "
                  f"times); export once training has ended, or pass --checkpoint best. Received: "
                  f"checkpoint={checkpoint!r}")


def _checkpoints_of(run, checkpoint):
    best = run.path("best")
    return [p for _, p in run.checkpoint_files() if checkpoint != "best" or os.path.dirname(p) == best]


def _restored(model, path):
    """Restores the weights of the checkpoint at `path` into `model`: True; False if the checkpoint
    was removed meanwhile (a failure of a checkpoint still there is raised)."""
    try:
        restore_weights(model, path)
    except (tf.errors.OpError, OSError, ValueError, AssertionError):
        if _present(path):
            raise
        return False
    return True


def _present(path):
    return os.path.exists(path + ".index") and bool(glob.glob(glob.escape(path) + ".data-*"))


def _step_of(path):
    return os.path.basename(path).removeprefix("ckpt-")


def run_config_of(model_dir):
    """The `RunConfig` of a run directory, or of the run whose `export/` `model_dir` is; None if
    unknown. A `config.json` beside an export that is not a run's `export/` is not read."""
    parent = os.path.dirname(os.path.abspath(model_dir))
    candidates = [model_dir] + ([parent] if os.path.isfile(os.path.join(parent, "tokenizers.json")) else [])
    for path in (os.path.join(directory, "config.json") for directory in candidates):
        if os.path.isfile(path):
            return read_run_config(path)
    return None


def translate_texts(translate, texts, batch_size=64, **inputs):
    """Translates a list of str with a loaded signature, `batch_size` at a time; returns str list."""
    out = []
    for i in range(0, len(texts), batch_size):
        result = translate(text=tf.constant(texts[i : i + batch_size], tf.string), **inputs)
        out.extend(t.decode("utf-8") for t in result["text"].numpy())
    return out
