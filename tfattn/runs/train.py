"""Training runs on real corpora: one directory holds the config, checkpoints, history and export.

The directory's layout, its lock and its checkpoint files are in `tfattn.runs.directory`; the run's
config in `tfattn.runs.config`; its checkpoints in `tfattn.runs.saving`; how it ends (the best or
averaged weights, exported) in `tfattn.runs.finish`.

A killed run continues with `resume=True` (`tfattn train --resume --out RUN`): the newest checkpoint
that reads back whole puts the model, the optimizer, the data position and the history back, and
each epoch's batches come in a fixed order (seeded by the epoch), so training goes on from the batch
after that checkpoint. The latest state is saved every `checkpoint_every` steps and at every epoch's
end, so a kill loses at most one checkpoint interval or one epoch of training, whichever is shorter.
"""

import contextlib
import dataclasses
import json
import os
import signal
import tempfile
import threading

import keras

from tfattn import files
from tfattn.core import ensure_built
from tfattn.data.pipeline import batch_rows, count_rows, tokenize_pairs, too_long, with_count
from tfattn.model import make_model
from tfattn.runs.config import read_run_config
from tfattn.runs.corpus import load_splits, make_tokenizers, with_fingerprint
from tfattn.runs.directory import Run, Terminated
from tfattn.runs.finish import finish
from tfattn.runs.saving import Saver, Validations
from tfattn.training import distributed
from tfattn.training.precision import auto_precision, precision_scope
from tfattn.training.trainer import DivergedError, Trainer
from tfattn.training.validation import Validator


KEEP = object()  # `train_run(tensorboard=KEEP)`: a resumed run writes its summaries where it did


def train_run(config, out, resume=False, quiet=False, echo=print, epochs=None, time_budget=None, corpus=None,
              distribute=None, tensorboard=KEEP, worker_timeout=None):
    """Trains (or resumes) a run in directory `out`; returns the summary dict.

    The run holds `out`'s lock from start to end (see `tfattn.runs.directory`). Nothing else is
    written to `out` until the corpus has loaded and the length limits leave training and
    validation pairs; then the latest state is saved every `checkpoint_every` steps, at every
    epoch's end, at the end, and when the run is interrupted (Ctrl-C, or SIGTERM, which raises
    `tfattn.runs.directory.Terminated` here). A resumed run goes on from the newest state that reads
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
        tensorboard: when resuming, where its TensorBoard summaries go from now on, as
            `RunConfig.tensorboard` (a directory, "" for RUN/tensorboard, None for none); `KEEP`
            (default): where they went. A directory that cannot be written is refused before
            anything is written, for a new run as for a resumed one.
        worker_timeout: when resuming, the multiworker wait for the other workers, in seconds
            (default: the run's own).

    Raises:
        tfattn.files.WriteError: a checkpoint, log or export could not be written (disk full,
            read-only); what was saved before is untouched.
        tfattn.training.trainer.DivergedError: the loss went non-finite; the last good state is kept.
    """
    run = Run(out)
    overrides = dict(epochs=epochs, time_budget=time_budget, corpus=corpus, distribute=distribute,
                     tensorboard=tensorboard, worker_timeout=worker_timeout)
    if not distributed.is_chief(_strategy_name(run, config, resume, distribute)):
        return _train_with_chief(run, config, resume, overrides, echo)
    if not resume:  # before the run directory is made
        check_tensorboard(config.tensorboard)
        check_replicas(config)
    with _sigterm_as_interrupt(), run.claim(resume, echo):
        config, tokenizers, datasets, trainer = _set_up(run, config, resume, overrides, quiet, echo)
        return _train(run, config, trainer, datasets, tokenizers, resume, echo)


def _set_up(run, config, resume, overrides, quiet, echo):
    """Everything before the first step: the config, the strategy (the wait for the other workers),
    the corpus, tokenizers and model, then tokenizers.json and config.json. Ctrl-C or SIGTERM here
    leave a run that resumes (or, before its config.json, a directory a new run may take), and say so."""
    try:
        if resume:
            config = _resumed_config(run, **overrides)
        else:
            config = dataclasses.replace(config, corpus=with_fingerprint(config.corpus))
        strategy = _strategy(config, echo)
        tokenizers, datasets, trainer = _prepare(config, run.tokenizers() if resume else None, strategy, quiet, echo)
        if not resume:  # once the corpus is read: a corpus refused says only that
            _log_precision(config.train, echo)
            run.write_json("tokenizers.json", {"source": tokenizers[0].get_config(),
                                               "target": tokenizers[1].get_config()})
        run.write_json("config.json", config.to_dict())
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (`Terminated`)
        how = "terminated" if isinstance(stop, Terminated) else "interrupted"
        then = (f"continue with: tfattn train --resume --out {run.out}" if run.exists() else
                f"start it again with the same command")
        echo(f"{how} while setting up, before the first step; nothing was trained. To train, {then}")
        raise
    return config, tokenizers, datasets, trainer


def _strategy(config, echo):
    d = config.distribute
    return distributed.make_strategy(d.strategy, d.replicas, d.worker_timeout, echo)


def check_tensorboard(path, resumed=False):
    """Refuses a TensorBoard directory (`RunConfig.tensorboard`) that cannot be written, before the run
    writes anything: a file, under a file, or where no directory can be made. "" (RUN/tensorboard,
    checked with the run directory) and None (none) pass. The check makes the directory and a file
    in it, and removes what it made."""
    if not path:
        return
    path = os.path.abspath(path)
    try:
        _try_writing_in(path)
    except OSError as error:
        reason = "it is a file" if os.path.isfile(path) else files.reason_of(error)
        if resumed:
            raise ValueError(f"The run's TensorBoard directory {path} (in its config.json) cannot be written: {reason}. "
                             f"Resume with --tensorboard DIR to write its summaries there instead, or with "
                             f"--no-tensorboard. Received: tensorboard={path!r}") from None
        raise ValueError(f"--tensorboard {path} cannot be written: {reason}; pass a directory this process can "
                         f"write, or --no-tensorboard. Received: --tensorboard {path!r}") from None


def _try_writing_in(path):
    made, parent = [], path
    while not os.path.lexists(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    finally:
        for directory in made:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def check_replicas(config):
    """Refuses more mirrored replicas than devices or than rows in a batch, before any setup."""
    d = config.distribute
    if d.strategy == "mirrored" and d.replicas is not None:
        distributed.check_replicas(d.replicas, config.data.batch_size)


def _log_precision(train, echo):
    """One line: the precision a new run trains in, and why when it was the machine's choice."""
    if train.precision_asked == "auto":
        echo(f"precision: {train.precision} (auto: {auto_precision()[1]})")


def _strategy_name(run, config, resume, distribute):
    """The strategy a run trains under: `distribute`'s, else the run's (`config.json`, when resuming)."""
    if distribute is not None:
        return distribute.strategy
    if resume and run.exists():
        return read_run_config(run.path("config.json")).distribute.strategy
    return "default" if config is None else config.distribute.strategy  # (None: a resume of no run, refused next)


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


def _train_with_chief(run, config, resume, overrides, echo):
    """A worker of a multiworker run that is not its chief: trains in step with the chief and writes
    nothing. A new run takes `config` (the same as the chief's); a resumed one reads the run's
    config.json and tokenizers.json at `run` (the chief's directory on a shared file system, or a
    copy of the two files), and goes on from the chief's state, which the chief restores. Ctrl-C
    and SIGTERM end it in any phase, the wait for the other workers included."""
    if resume and not run.exists():
        raise FileNotFoundError(f"This worker resumes the run with its chief, and reads the run's config.json and "
                                f"tokenizers.json in --out, which has no config.json: point --out at the chief's run "
                                f"directory on a shared file system, or copy the two files there. Received: "
                                f"out={run.out!r}")
    with _sigterm_as_interrupt():
        if resume:
            config = _resumed_config(run, **{**overrides, "tensorboard": KEEP})  # (the chief writes them)
        else:
            config = dataclasses.replace(config, corpus=with_fingerprint(config.corpus))
        task = distributed.task_name()
        strategy = _strategy(config, lambda line: echo(f"{task}: {line}"))  # first
        tokenizers = run.tokenizers() if resume else None
        _, datasets, trainer = _prepare(config, tokenizers, strategy, True, lambda line: echo(f"{task}: {line}"))
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


def _resumed_config(run, epochs=None, time_budget=None, corpus=None, distribute=None, tensorboard=KEEP,
                    worker_timeout=None):
    config = read_run_config(run.path("config.json"))
    if distribute is not None:  # a checkpoint restores under any strategy
        config.distribute = distribute
    if worker_timeout is not None:
        config.distribute = dataclasses.replace(config.distribute, worker_timeout=worker_timeout)
    if tensorboard is not KEEP:
        config.tensorboard = tensorboard
    check_tensorboard(config.tensorboard, resumed=True)
    check_replicas(config)
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
    saver = Saver(run, trainer, config.checkpoint_every, config.validation)
    if resume:
        saver.restore(config, echo)
    validator = Validator(trainer.model, trainer.eval_step, datasets["validation"], datasets["validation_pairs"],
                          tokenizers, config.decode, config.validation.sample, trainer.config.accel)
    board = _summaries(run, config)
    checks = Validations(run, config.validation, trainer, saver, validator, board, echo)

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
    return finish(run, config, trainer, tokenizers, echo, validator, checks)


def _summaries(run, config):
    """The run's TensorBoard writer (`config.tensorboard`: "" for RUN/tensorboard, None for none)."""
    if config.tensorboard is None:
        return None
    from tfattn.training.tensorboard import Summaries

    return Summaries(config.tensorboard or run.path("tensorboard"), config.to_dict())
