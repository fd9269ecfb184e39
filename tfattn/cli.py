"""The `tfattn` command line: demo, train, evaluate, translate, export, plot.

    tfattn demo [--attention luong|bahdanau]
    tfattn train --corpus PATH|URL|tfds:NAME [--format anki|tsv|parallel] --out RUN [--time-budget 15m]
    tfattn evaluate --model RUN|EXPORT [--corpus ...] --split test [--threads 2,1]
    tfattn translate --model RUN|EXPORT "una frase" [--plot attention.png] [--html attention.html] [--alignments]
                     [--replace-unknown]
    tfattn export --model RUN --out DIR [--replace-unknown] [--tokenizer-ops core|text] [--format litert]
    tfattn plot --history RUN/history.json | --bleu-by-length EVAL.json ... --out FIG.png

A SavedModel is a program, not data: loading one runs its graph, which can read and write files.
Give translate and evaluate only exports you trust (your own, or from someone you trust); they warn
when an export has no tfattn_config.json, that is, when tfattn export did not write it.

Errors a user can fix (a missing file, a directory that is not an export, a bad flag value) print
one line, `tfattn: error: ...`, and exit with status 2; a file that cannot be written (disk full,
read-only) prints one line and exits with status 1. Never a traceback.

exit status:
  0    done
  1    the machine's fault: a file could not be written (disk full, read-only), out of memory, or the
       reader of stdout went away (a broken pipe)
  2    the command's fault: a bad flag or value, a missing or wrong file, a run that diverged
  130  interrupted (Ctrl-C); a training run saves its state first
  143  terminated (SIGTERM); a training run saves its state first
"""

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import re
import shlex
import sys
import types

from tfattn.layers import options  # the models' option lists; no Keras


# -- commands --------------------------------------------------------------------------------------

def _demo(args):
    from tfattn.demo import DemoConfig, main

    config = DemoConfig(attention=args.attention, n_train=args.n_train, n_validation=args.n_validation,
                        n_test=args.n_test, max_steps=args.max_steps, validate_every=args.validate_every,
                        stop_at=args.stop_at, out_dir=args.out_dir, seed=args.seed)
    main(config, quiet=args.quiet)


def _train(args):
    if args.resume:
        _check_resume_flags(args)  # before TensorFlow loads
    from tfattn.runs.train import train_run

    given = args.strategy is not None or args.replicas is not None
    resumed = {}
    if args.resume:
        from tfattn.runs.train import KEEP

        resumed = dict(corpus=args.corpus, distribute=_distribute_config(args) if given else None,
                       worker_timeout=args.worker_timeout, tensorboard=KEEP if not (
                           args.tensorboard or args.no_tensorboard) else _tensorboard_path(args))
    with _out_of_memory_hint("training"), _keras_quiet(args.quiet):
        summary = train_run(None if args.resume else run_config(args), args.out, resume=args.resume,
                            quiet=args.quiet, echo=lambda line: print(line, file=sys.stderr), epochs=args.epochs,
                            time_budget=args.time_budget, **resumed)
    from tfattn.files import strict_json

    print(strict_json(summary))


# What `train --resume` may be given; --corpus names where the run's corpus file is now (if moved),
# --strategy, --replicas and --worker-timeout where it goes on training (a checkpoint restores under
# any strategy), --tensorboard and --no-tensorboard where its summaries go from now on.
RESUME_FLAGS = ("out", "resume", "epochs", "time_budget", "quiet", "corpus", "strategy", "replicas",
                "worker_timeout", "tensorboard", "no_tensorboard")


def given_flags(args):
    """`{dest: action}` of the `train` flags given on the command line (`args.argv`), in the order of
    --help. A flag counts as given when it is on the command line, even with its default value: the
    train parser parses `args.argv` again with every default suppressed, so only given flags are set."""
    parser = _add_train_parser(argparse.ArgumentParser().add_subparsers())
    for action in parser._actions:
        action.default = argparse.SUPPRESS  # (not `set_defaults`: it would pass SUPPRESS through `type`)
    argv = list(getattr(args, "argv", None) or ())  # (set by `main`; without it, nothing counts as given)
    if "train" not in argv:
        return {}
    given = vars(parser.parse_args(argv[argv.index("train") + 1:]))
    return {action.dest: action for action in parser._actions if action.dest in given}


def _typed(action, argv):
    """The option string of `action` as the command line has it (`--no-scale` rather than `--scale`)."""
    typed = [arg.partition("=")[0] for arg in argv if arg.partition("=")[0] in action.option_strings]
    return typed[-1] if typed else action.option_strings[-1]


def _check_resume_flags(args):
    """Refuses the flags that `train --resume` would ignore: the run's config.json holds its settings."""
    refused = []
    for dest, action in given_flags(args).items():
        if dest not in RESUME_FLAGS:
            flag, value = _typed(action, args.argv), getattr(args, dest)
            refused.append(flag if action.nargs == 0 else f"{flag} {shlex.quote(str(value))}")
    if refused:
        raise ValueError("--resume continues the run with its own settings (config.json); it takes only "
                         f"--epochs, --time-budget, --quiet, --corpus (its corpus file, if moved), --strategy, "
                         f"--replicas, --worker-timeout, --tensorboard and --no-tensorboard. Received: "
                         f"{' '.join(refused)}")


def find_export(model_dir, echo=None):
    """A run directory or an export directory -> the export directory; clear error otherwise.

    What a killed `tfattn export` left there is finished or removed first (`recover_export`), and
    said through `echo` (stderr by default). A run without an export says how to make one."""
    from tfattn.files import reading_export

    echo = echo or (lambda line: print(line, file=sys.stderr))
    for candidate in (model_dir, os.path.join(model_dir, "export")):
        _recover_export(candidate, echo)
        with reading_export(candidate):  # not while an export replaces it (its saved_model.pb is moved)
            if os.path.isfile(os.path.join(candidate, "saved_model.pb")):
                return candidate
    if os.path.isfile(os.path.join(model_dir, "config.json")):
        raise FileNotFoundError(_no_export_yet(model_dir))
    raise FileNotFoundError(f"Not an export or a run directory with an export (no saved_model.pb in it or "
                            f"in its export/). Received: model={model_dir!r}")


def _recover_export(path, echo):
    from tfattn import files

    try:
        done = files.recover_export(path)
    except OSError as error:
        echo(f"{path}: could not finish what a killed tfattn export left ({files.reason_of(error)})")
        return
    if done:
        echo(f"{path}: {done}")


def _no_export_yet(run):
    """What `translate` or `evaluate` says of a run without an export: in progress, or stopped early."""
    from tfattn.runs.directory import LOCK, RunInUseError, _Lock

    quoted = shlex.quote(run)
    try:
        _Lock(os.path.join(run, LOCK)).refuse_if_held(run)
    except RunInUseError as error:
        holder = str(error).partition(" is in use by ")[2].partition("; ")[0]
        return (f"{run} is a run in progress ({holder}) and has no export yet: it writes one when training ends. "
                f"To translate with it now, export its latest checkpoint: tfattn export --model {quoted} --out "
                f"EXPORT --checkpoint latest, then pass --model EXPORT. Received: model={run!r}")
    return (f"{run} is a run without an export (its training stopped before the end): export its best checkpoint "
            f"with tfattn export --model {quoted} --out EXPORT, or finish it with tfattn train --resume --out "
            f"{quoted}. Received: model={run!r}")


def _evaluate(args):
    from tfattn import evaluate
    path = find_export(args.model)
    if args.output:
        _check_output_file(args.output, "--output")  # before the evaluation, not after it
    from tfattn.runs.export import translate_texts

    from tfattn.progress import SentenceProgress, wanted

    pairs = _evaluation_pairs(args)
    signature, inputs = _signature(path, args.beam)
    progress, hyps = SentenceProgress(len(pairs), wanted(args.quiet, args.progress)), []
    with _out_of_memory_hint("translating"):
        for batch in _batches([s for s, _ in pairs], args.batch_size):
            hyps += translate_texts(signature, batch, args.batch_size, **inputs)
            progress.add(len(batch))
    progress.close()
    result = evaluate.evaluate_texts([s for s, _ in pairs], hyps, [t for _, t in pairs])
    result.update({"split": args.split, "model": path, "beam": _beam_used(signature, inputs, args.beam)})
    from tfattn import files

    if args.output:
        files.write_json(args.output, result)  # whole or not at all; strict JSON (null where not finite)
    print(files.strict_json(result))


def _evaluation_pairs(args):
    """The `(source, reference)` pairs `evaluate` scores; an empty corpus or split is refused."""
    from tfattn.data.corpora import SPLITS
    from tfattn.runs.config import run_config_of
    from tfattn.runs.corpus import load_splits

    corpus = _corpus_config(args) if args.corpus else getattr(run_config_of(args.model), "corpus", None)
    if corpus is None:
        raise ValueError(f"No corpus: pass --corpus (the model directory has no run config). Received: "
                         f"model={args.model!r}")
    parts, _ = load_splits(dataclasses.replace(corpus, max_pairs=None))
    pairs = parts[dict(zip(("train", "validation", "test", "val"), SPLITS + ("validation",)))[args.split]]
    if not pairs:
        sizes = ", ".join(f"{name} {len(parts[name])}" for name in SPLITS)
        raise ValueError(f"Nothing to evaluate: the {args.split} split of {corpus.corpus} has no pairs ({sizes}); "
                         f"pass a larger corpus or another --split. Received: --split {args.split}")
    return pairs[: args.limit] if args.limit else pairs


def _beam_used(signature, inputs, beam):
    """The beam width the signature decodes with (`translate_beam` clamps it); `beam` (0 or 1) for greedy."""
    import tensorflow as tf

    if "beam_width" not in inputs:
        return beam
    return int(signature(text=tf.constant(["x"]), **inputs)["nbest_text"].shape[1])


def _check_output_file(path, flag):
    """Refuses an output file that cannot be written: a directory, or in a missing or unwritable folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory; pass a file path. Received: {flag} {path!r}")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"No such directory: {folder}; create it first. Received: {flag} {path!r}")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise PermissionError(f"Cannot write {path}: permission denied. Received: {flag} {path!r}")


def _signature(path, beam, heads=False):
    """The signature to translate with, and its inputs besides `text`: `translate_beam` for a `beam` over 1,
    else `translate_heads` if `heads` and the export has it (every head of a multi-head model), else `translate`."""
    import tensorflow as tf

    from tfattn.files import reading_export
    from tfattn.serving.translator import CONFIG_FILE, load

    with reading_export(path):  # not while an export replaces it
        has_config = os.path.isfile(os.path.join(path, CONFIG_FILE))
    if not has_config:
        print(f"tfattn: warning: {path} has no {CONFIG_FILE}, so tfattn export did not write it. A SavedModel "
              f"is a program: load only exports you trust.", file=sys.stderr)
    loaded = load(path)
    if beam and beam > 1:
        if "translate_beam" not in loaded.signatures:
            raise ValueError(f"This export has no translate_beam signature. Received: --beam {beam}")
        inputs = {"beam_width": tf.constant(beam, tf.int32), "length_penalty": tf.constant(0.6)}
        return loaded.signatures["translate_beam"], inputs
    if heads and "translate_heads" in loaded.signatures:
        return loaded.signatures["translate_heads"], {}
    return loaded.signatures["translate"], {}


def _translate(args):
    path = find_export(args.model)  # before TensorFlow loads: a wrong path fails fast
    if args.plot:
        _check_image_path(args.plot, "--plot")  # before any translating
    if args.html:
        _check_output_file(args.html, "--html")
    import tensorflow as tf

    from tfattn.serving.translator import blank_empty_sources

    from tfattn.progress import SentenceProgress, wanted

    signature, inputs = _signature(path, args.beam, heads=bool(args.html))
    replace = _unknown_replacer(path) if args.replace_unknown else None
    texts = (os.fsencode(text) for text in args.text) if args.text else _stdin_lines()  # bytes: any encoding goes
    progress = SentenceProgress(None, not args.text and wanted(args.quiet, args.progress, beside=sys.stdout))
    first, page = None, []
    for batch in _batches(texts, args.batch_size):  # each batch written as soon as it is translated
        with _out_of_memory_hint("translating"):
            out = blank_empty_sources(signature(text=tf.constant(batch, tf.string), **inputs))  # older exports too
        if replace is not None:
            out = replace(out)
        sys.stdout.write("".join(_output_lines(out, args.alignments)))
        sys.stdout.flush()
        progress.add(len(batch))
        if first is None:
            first = {key: out[key][0].numpy() for key in ("attention", "input_tokens", "tokens")}
        if args.html:
            page.append((batch, {key: value.numpy() for key, value in out.items()}))
    progress.close()
    if args.plot:
        _plot_first(first, args.plot)
    if args.html:
        _write_explorer(page, args.html, path)


def _write_explorer(batches, path, model):
    """`translate --html`: every sentence's translation and attention as one page (`tfattn.explore`):
    with --beam, each hypothesis' own attention if the export returns it, else every head of a
    multi-head model if it returns them; or one line saying why there is no page."""
    if not batches:
        print(f"tfattn: no attention page written: there was nothing to translate (no text given). "
              f"Received: --html {path!r}", file=sys.stderr)
        return
    from tfattn import files
    from tfattn.explore import Explorer, explore

    sentences = []
    for texts, out in batches:
        sources = [text.decode("utf-8", errors="replace") for text in texts]
        sentences += explore(out, sources).data["sentences"]
    page = Explorer({"title": f"tfattn translate --model {model}", "sentences": sentences})
    files.write_text(path, page.html(), "the attention page")
    print(f"attention page: {path}", file=sys.stderr)


def _plot_first(first, path):
    """`translate --plot`: the first sentence's attention heatmap, or one line saying why there is none."""
    if first is None or not (first["tokens"] != b"").any():
        what = "there was nothing to translate (no text given)" if first is None else "the first sentence is empty"
        print(f"tfattn: no attention plot written: {what}. Received: --plot {path!r}", file=sys.stderr)
        return
    from tfattn.plot import plot_attention, save_figure

    fig = plot_attention(first["attention"], first["input_tokens"], first["tokens"])
    print(f"attention plot: {save_figure(fig, path)}", file=sys.stderr)


def _check_image_path(path, flag):
    """Refuses an image path whose extension matplotlib cannot write (no extension: .png is added)."""
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise ValueError(f"{flag} {path}: cannot write .{suffix} images; use one of "
                         f"{', '.join('.' + f for f in sorted(formats))}. Received: {flag} {path!r}")


@contextlib.contextmanager
def _keras_quiet(quiet):
    """No progress lines from Keras (`download_anki`'s download) while training with --quiet, and
    Keras's setting as it was afterwards: `main` called from a notebook or a test changes nothing else."""
    import keras

    was = keras.utils.is_interactive_logging_enabled()
    if quiet:
        keras.utils.disable_interactive_logging()
    try:
        yield
    finally:
        if was:
            keras.utils.enable_interactive_logging()


@contextlib.contextmanager
def _out_of_memory_hint(doing):
    """Turns TensorFlow's out-of-memory error (or Python's) while `doing` into one line with a hint."""
    import tensorflow as tf

    try:
        yield
    except (tf.errors.ResourceExhaustedError, MemoryError) as error:
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise MemoryError(f"Out of memory while {doing} ({reason}): try a smaller --batch-size, --beam or "
                          f"--units") from None


def _output_lines(out, alignments):
    """One line per sentence of a signature's outputs: the translation, with `alignments` a tab and
    its Pharaoh alignment (`tfattn.serving.alignments.sentence_alignment`). A translation holds no
    tab or line break: the tokenizers turn every kind of space into a plain one."""
    texts = [text.decode("utf-8", errors="replace") for text in out["text"].numpy()]
    if not alignments:
        return [text + "\n" for text in texts]
    from tfattn.serving.alignments import sentence_alignment

    attention, sources, targets = (out[key].numpy() for key in ("attention", "input_tokens", "tokens"))
    return [f"{text}\t{sentence_alignment(a, s, t)}\n" for text, a, s, t in zip(texts, attention, sources, targets)]


def _unknown_replacer(path):
    """For `translate --replace-unknown`: outputs -> the same with each `[UNK]` of `tokens` replaced by
    the source token it attends to most and `text` joined again where tokens changed, as an export
    made with `Translator(replace_unknown=True)` does in its graph (any export: this runs after it)."""
    import tensorflow as tf

    from tfattn.data.text import Tokenizer
    from tfattn.serving.alignments import replace_unknown
    from tfattn.serving.translator import CONFIG_FILE

    config_path = os.path.join(path, CONFIG_FILE)
    config = _read_json(config_path, "--model", f"an export's {CONFIG_FILE}")
    settings = config.get("target_tokenizer") if isinstance(config, dict) else None
    if not isinstance(settings, dict) or "level" not in settings:
        raise ValueError(f"{config_path} has no target_tokenizer level, which --replace-unknown needs to join "
                         f"tokens into text. Received: --model {path!r}")
    tokenizer = Tokenizer([], level=settings["level"])  # only joins tokens: no vocabulary needed

    def replace(out):
        tokens = replace_unknown(out["tokens"], out["attention"], out["input_tokens"])  # (batch, t_out)
        changed = tf.reduce_any(tokens != out["tokens"], axis=1)  # (batch,)
        return {**out, "tokens": tokens, "text": tf.where(changed, tokenizer.detokenize_tokens(tokens), out["text"])}

    return replace


def _batches(items, size):
    """Lists of `size` items (the last one shorter) from an iterable, read as they are needed."""
    items = iter(items)
    while batch := list(itertools.islice(items, size)):
        yield batch


def _stdin_lines():
    """Lines of stdin as bytes, without their LF or CRLF end (the model reads bytes that are not UTF-8 too)."""
    for line in sys.stdin.buffer:
        yield line.removesuffix(b"\n").removesuffix(b"\r")


def _export(args):
    from tfattn.runs.export import export_run

    print(export_run(args.model, args.out, checkpoint=args.checkpoint, accel=args.accel,
                     echo=lambda line: print(line, file=sys.stderr), replace_unknown=args.replace_unknown,
                     tokenizer_ops=args.tokenizer_ops, format=args.format))


def _plot(args):
    from tfattn import plot

    if bool(args.history) == bool(args.bleu_by_length):
        raise ValueError("Give exactly one of --history FILE or --bleu-by-length FILE [FILE ...]")
    if args.history:
        history = _read_json(args.history, "--history", "a run's history.json")
        if not isinstance(history, dict) or "loss" not in history:
            raise ValueError(f"{args.history} is not a run's history.json (no 'loss'). "
                             f"Received: --history {args.history!r}")
        try:
            fig = plot.plot_history(history)
        except ValueError as error:  # a series that is not numbers, or none to draw
            raise ValueError(f"{args.history} is not a run's history.json: {error}") from None
    else:
        curves = {}
        for path, label in zip(args.bleu_by_length, _curve_labels(args.bleu_by_length)):
            result = _read_json(path, "--bleu-by-length", "a file written by `tfattn evaluate --output`")
            if not isinstance(result, dict) or not isinstance(result.get("bleu_by_length"), dict):
                raise ValueError(f"{path} is not a `tfattn evaluate --output` file (no 'bleu_by_length'). "
                                 f"Received: --bleu-by-length {path!r}")
            curves[label] = result["bleu_by_length"]
        fig = plot.plot_bleu_by_length(curves)
    print(plot.save_figure(fig, args.out))


def _curve_labels(paths):
    """One legend label per file: its name without .json, or its path when two files share a name."""
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    if len(set(names)) == len(names):
        return names
    return [os.path.splitext(os.path.normpath(p))[0] for p in paths]


def _read_json(path, flag, expected):
    """The JSON value in the file `path` given to `flag`; a clear error naming it otherwise."""
    if os.path.isdir(path):
        inside = os.path.join(path, "history.json")
        hint = f"pass {inside}" if flag == "--history" and os.path.isfile(inside) else f"pass {expected}"
        raise IsADirectoryError(f"{path} is a directory; {hint}. Received: {flag} {path!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No such file: {path} ({expected} expected). Received: {flag} {path!r}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is not JSON ({expected} expected): {e}. Received: {flag} {path!r}") from None


# -- configuration from flags ----------------------------------------------------------------------

def _corpus_config(args):
    from tfattn.runs.config import CorpusConfig

    splits = tuple(args.splits.split(",")) if args.splits else ("train", "validation", "test")
    if len(splits) != 3:
        raise ValueError(f"--splits takes three comma-separated names (train, validation, test). Received: --splits "
                         f"{shlex.quote(args.splits)}")
    return CorpusConfig(corpus=args.corpus, format=args.format, strict=args.strict, direction=args.direction,
                        source_lang=args.source_lang, target_lang=args.target_lang, splits=splits,
                        data_dir=args.data_dir, max_pairs=getattr(args, "max_pairs", None))


def run_config(args):
    """Flags -> `RunConfig` (every flag overrides one field)."""
    from tfattn.data.pipeline import DataConfig
    from tfattn.search import DecodeConfig
    from tfattn.model import ModelConfig
    from tfattn.runs.config import RunConfig, TokenizerConfig
    from tfattn.training.trainer import TrainConfig

    level = args.tokenizer or (RECIPE["tokenizer"] if args.attention is None else "word")
    tokenizer = TokenizerConfig(level=level, max_tokens=args.vocab_size, max_length=args.max_length)
    fields = dict(score=args.score, normalize=args.normalize, scale=args.scale,
                  local=args.local, window=args.window, hard=args.hard,
                  input_feeding=args.input_feeding, encoder=args.encoder, positions=args.positions,
                  relative_clip=args.relative_clip, ff_dim=args.ff_dim,
                  units=args.units, rnn=args.rnn, num_layers=args.layers, dropout=args.dropout,
                  max_source_length=args.max_length, max_target_length=args.max_length,
                  norm=args.norm, **model_kind(args, ModelConfig.embedding_dim))
    _refuse_unused_model_flags(args, fields)
    _check_sizes(args, fields)
    model = ModelConfig(**fields)
    epochs = TrainConfig.epochs if args.epochs is None else args.epochs
    cosine = args.schedule == "cosine"
    to_budget = cosine and args.time_budget is not None and not args.decay_steps
    for flag, value in (("--decay-steps", args.decay_steps), ("--decay-alpha", args.decay_alpha)):
        if value is not None and not cosine:
            raise ValueError(f"{flag} shapes the cosine schedule, and --schedule {args.schedule} has none. Received: "
                             f"{flag} {value} --schedule {args.schedule}")
    if args.decay_alpha is not None and not (to_budget or args.decay_steps):
        raise ValueError(f"--decay-alpha sets where a cosine ends, and this run has none: give --decay-steps or "
                         f"--time-budget too. Received: --decay-alpha {args.decay_alpha}")
    alpha = args.decay_alpha if args.decay_alpha is not None else (
        BUDGET_DECAY_ALPHA if to_budget else TrainConfig.decay_alpha)
    train = TrainConfig(learning_rate=args.learning_rate, decay_steps=args.decay_steps, clip_norm=args.clip_norm,
                        epochs=epochs, time_budget=args.time_budget, seed=args.seed, accel=args.accel,
                        decay_to_budget=to_budget, decay_alpha=alpha)
    data = DataConfig(batch_size=args.batch_size, bucket=not args.no_bucket, seed=args.seed)
    decode = DecodeConfig(max_length=args.max_length)
    return _with_training_flags(args, RunConfig(
        corpus=_corpus_config(args), source_tokenizer=tokenizer, target_tokenizer=dataclasses.replace(tokenizer),
        model=model, data=data, train=train, decode=decode, checkpoint_every=args.checkpoint_every))


# `tfattn train`'s model and tokenizer when no --attention is given: the best row of docs/performance.md's
# 15-minute table (`bench/quality.py --model multihead-wordpiece`): Luong's decoder with input feeding,
# its cross-attention 4 heads of the scaled general score over the decoder's h_t, untied (tying scored
# 0.5 BLEU below it over WordPiece), on WordPiece vocabularies. `--attention luong` alone is Luong's own
# single head on words.
RECIPE = {"attention": "luong", "heads": 4, "tie_embeddings": False, "tokenizer": "wordpiece"}
# Where the cosine over a time budget ends, as a fraction of the peak rate (docs/performance.md,
# "Where the cosine fitted to the clock should end": ending at 1% cost about 3 BLEU in 15 minutes).
BUDGET_DECAY_ALPHA = 0.3


def model_kind(args, embedding_dim):
    """The `ModelConfig` fields the recipe decides, of the flags (None where not given): `attention`,
    `heads`, `tie_embeddings`, `embedding_dim`. Without --attention, the recipe's, where its flag is
    not given (tied embeddings as wide as --units); with it, one head, untied, embeddings of
    `embedding_dim` (ModelConfig's default)."""
    recipe = args.attention is None
    tie = args.tie_embeddings if args.tie_embeddings is not None else recipe and RECIPE["tie_embeddings"]
    embedding = args.embedding_dim or (args.units if recipe and tie else embedding_dim)
    return dict(attention=args.attention or RECIPE["attention"], heads=args.heads or (RECIPE["heads"] if recipe else 1),
                tie_embeddings=tie, embedding_dim=embedding)


def _refuse_unused_model_flags(args, fields):
    """Refuses the model flags given that the model would ignore (`tfattn.model.APPLIES`), in one line:
    "--normalize applies to bahdanau attention only; the model is luong"."""
    from tfattn.model import refused_flag

    config, field_of = types.SimpleNamespace(**fields), {"layers": "num_layers"}  # a flag's dest -> its field
    messages, received = [], []
    for dest, action in given_flags(args).items():
        flag = _typed(action, args.argv)
        message = refused_flag(field_of.get(dest, dest), flag, config) if field_of.get(dest, dest) in fields else None
        if message:
            messages.append(message)
            received.append(flag if action.nargs == 0 else f"{flag} {shlex.quote(str(getattr(args, dest)))}")
    if messages:
        default = "" if args.attention else " (tfattn train's default; --attention names another)"
        raise ValueError(f"{'; '.join(messages)}{default}. Received: {' '.join(received)}")


def _check_sizes(args, fields):
    """The checks of `ModelConfig` that flags can fail, in the flags' words (it names its fields)."""
    heads = fields["heads"]
    if args.units % heads:
        received = (f"--heads {heads}, --units {args.units}" if "heads" in given_flags(args) else
                    f"--units {args.units} with the default model's {heads} heads (give --heads, or --attention)")
        raise ValueError(f"--heads must divide --units (each head gets units / heads features). Received: {received}")
    rnn_decoder = fields["attention"] != "transformer"
    if rnn_decoder and fields["tie_embeddings"] and fields["embedding_dim"] != args.units:
        raise ValueError(f"--tie-embeddings needs --embedding-dim equal to --units (the output projection is the "
                         f"embedding table, transposed), or --no-tie-embeddings. Received: --embedding-dim "
                         f"{fields['embedding_dim']}, --units {args.units}")
    recurrent = rnn_decoder and args.encoder == "rnn"  # (bidirectional: no flag turns it off)
    if recurrent and args.units % 2:
        raise ValueError(f"--units must be even: the bidirectional RNN encoder gives half of them to each "
                         f"direction. Received: --units {args.units}")


def _with_training_flags(args, config):
    """`config` with the flags of `_add_training_flags` applied: validation, TensorBoard, schedule,
    precision, non-finite steps, determinism, XLA, strategy."""
    from tfattn.training.validation import ValidationConfig

    train = dataclasses.replace(config.train, warmup_steps=args.warmup_steps,  # None: the model's default
                                schedule=args.schedule.replace("-", "_"), precision=args.precision,
                                precision_asked=None,  # "auto" is resolved (and said) by the RunConfig
                                max_nonfinite=args.max_nonfinite, deterministic=args.deterministic,
                                log_every=args.log_every, jit_compile=args.jit_compile,
                                label_smoothing=args.label_smoothing)
    multiple = args.pad_to_multiple or (8 if args.jit_compile else 1)
    data = dataclasses.replace(config.data, pad_to_multiple=multiple)
    if args.best_by == "bleu" and not args.bleu_sample:
        raise ValueError(f"--best-by bleu needs a BLEU sample: --bleu-sample must be >= 1. Received: --bleu-sample "
                         f"{args.bleu_sample}")
    validation = ValidationConfig(every=args.validate_every, sample=args.bleu_sample, best_by=args.best_by,
                                  early_stopping=args.early_stopping, average_checkpoints=args.average_checkpoints)
    return dataclasses.replace(config, train=train, data=data, validation=validation,
                               tensorboard=_tensorboard_path(args), distribute=_distribute_config(args))


def _tensorboard_path(args):
    """`RunConfig.tensorboard` of the flags: None with --no-tensorboard, "" (RUN/tensorboard) without either."""
    if args.no_tensorboard and args.tensorboard:
        raise ValueError(f"--tensorboard and --no-tensorboard contradict each other: give one. Received: "
                         f"--tensorboard {args.tensorboard!r} --no-tensorboard")
    return None if args.no_tensorboard else (os.path.abspath(args.tensorboard) if args.tensorboard else "")


def _distribute_config(args):
    from tfattn.training.distributed import DistributeConfig

    if args.replicas is not None and args.strategy != "mirrored":
        raise ValueError(f"--replicas is the number of devices of --strategy mirrored (a multiworker run has one "
                         f"replica per worker, the default strategy one): pass --strategy mirrored. Received: "
                         f"--replicas {args.replicas}" + (f" --strategy {args.strategy}" if args.strategy else ""))
    from tfattn.training.distributed import WORKER_TIMEOUT

    timeout = WORKER_TIMEOUT if args.worker_timeout is None else args.worker_timeout
    return DistributeConfig(strategy=args.strategy or "default", replicas=args.replicas, worker_timeout=timeout)


# -- parsers ---------------------------------------------------------------------------------------

def _add_corpus_flags(p, required):
    g = p.add_argument_group("corpus")
    g.add_argument("--corpus", required=required,
                   help="a file (Anki TSV 'English<TAB>Other' or TSV), a URL of an Anki zip, tfds:NAME, or "
                        "with --format parallel a directory of SPLIT.LANG files")
    g.add_argument("--format", choices=("anki", "tsv", "parallel"),
                   help="corpus format (default: guessed; .txt/.tsv files are read as Anki)")
    g.add_argument("--strict", action="store_true", help="stop at the first bad line instead of skipping it")
    g.add_argument("--direction", choices=("to_english", "from_english"), default="to_english",
                   help="Anki files: translate into English (default) or from English")
    g.add_argument("--source-lang", help="parallel files: source file suffix, e.g. en")
    g.add_argument("--target-lang", help="parallel files: target file suffix, e.g. de")
    g.add_argument("--splits", help="parallel/TFDS: train,validation,test split names "
                                    "(default: train,validation,test; Multi30k: train,val,test_2016_flickr)")
    g.add_argument("--data-dir", help="TFDS data directory")


def _add_train_parser(sub):
    p = sub.add_parser("train", help="train a model on a corpus; the run directory holds everything",
                       description="Train an attention model. The run directory (--out) holds config.json, "
                                   "tokenizers.json, checkpoints/, best/, history.json, log.jsonl and, at "
                                   "the end, summary.json and export/. The latest state is saved every "
                                   "--checkpoint-every steps, at each epoch's end, at the end and on Ctrl-C; "
                                   "--resume goes on from the newest state that reads back.")
    _add_corpus_flags(p, required=False)
    p.add_argument("--max-pairs", type=positive_int, help="use only this many training pairs (for quick runs)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last checkpoint, with its own settings "
                        "(config.json): only --epochs, --time-budget, --quiet, --corpus, --strategy, --replicas, "
                        "--worker-timeout, --tensorboard and --no-tensorboard may be given")
    _add_model_flags(p.add_argument_group("model"))
    _add_batch_flags(p.add_argument_group("tokens and batches"))
    _add_optimization_flags(p.add_argument_group("optimization"))
    _add_training_flags(p.add_argument_group("validation, schedule, precision, devices and monitoring"))
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)
    return p


def _add_model_flags(m):
    m.add_argument("--attention", choices=options.ATTENTIONS,
                   help="the model kind: an RNN decoder with Bahdanau's or Luong's attention, the Transformer, "
                        "or the RNN encoder-decoder without attention (Cho et al. 2014; its attention "
                        "output is zeros) (default: luong with --heads 4 on WordPiece vocabularies, the best "
                        "recipe measured in 15 minutes; --attention luong alone has one head, on words)")
    m.add_argument("--score", choices=options.SCORES, default="general",
                   help="Luong score; cosine is q.k / (|q| |k|) times a learned scale (default: general)")
    m.add_argument("--local", choices=[kind for kind in options.LOCALS if kind],
                   help="Luong: local attention over 2*window+1 source positions around p_t = t (m) or a "
                        "predicted p_t (p) (default: global attention)")
    m.add_argument("--window", type=positive_int, default=10, help="local attention's half width D (default: 10)")
    m.add_argument("--hard", action="store_true",
                   help="Bahdanau or Luong: hard attention, one source position per step (sampled in "
                        "training, the argmax when translating)")
    m.add_argument("--heads", type=positive_int,
                   help="attention heads: Luong multi-head cross-attention when > 1, or the Transformer's "
                        "heads; must divide --units (default: 4 without --attention, else 1)")
    m.add_argument("--encoder", choices=options.ENCODERS, default="rnn",
                   help="the RNN decoders' encoder: recurrent or self-attention blocks (default: rnn; the "
                        "Transformer always has self-attention)")
    m.add_argument("--positions", choices=options.POSITIONS, default="sinusoidal",
                   help="self-attention positions: Vaswani's sinusoids, learned, relative (Shaw et al. "
                        "2018), or none (a bag of words, for comparison) (default: sinusoidal)")
    m.add_argument("--relative-clip", type=positive_int, default=16,
                   help="relative positions: the largest distance told apart (default: 16)")
    m.add_argument("--ff-dim", type=positive_int, help="self-attention: feed-forward size (default: 4 * units)")
    m.add_argument("--norm", choices=("pre", "post"), default="pre",
                   help="self-attention: layer norm before each sublayer (pre) or after each residual, as "
                        "Vaswani et al. (post) (default: pre)")
    m.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction,
                   help="the decoder's output projection is its target embedding table, transposed (Press & "
                        "Wolf 2017); RNN decoders need --embedding-dim equal to --units (default: untied)")
    m.add_argument("--normalize", action="store_true", help="Bahdanau: weight-normalized attention")
    m.add_argument("--scale", action=argparse.BooleanOptionalAction, default=True,
                   help="Luong: a learned scalar on the scores, starting at 1/sqrt(units) for dot and general; "
                        "--no-scale gives the paper's unscaled scores (default: --scale)")
    m.add_argument("--no-input-feeding", dest="input_feeding", action="store_false",
                   help="Luong: no input feeding (faster: the decoder RNN runs over the whole target)")
    m.add_argument("--rnn", choices=options.RNNS, default="gru", help="default: gru")
    m.add_argument("--embedding-dim", type=positive_int,
                   help="default: 256; without --attention (the recipe, tied), --units")
    m.add_argument("--units", type=positive_int, default=256, help="recurrent units (default: 256)")
    m.add_argument("--layers", type=positive_int, default=1,
                   help="encoder layers; self-attention: blocks in encoder and decoder (default: 1)")
    m.add_argument("--dropout", type=fraction, default=0.2, help="the rate of every dropout, in [0, 1) (default: 0.2)")
    m.add_argument("--no-accel", dest="accel", action="store_false", default=None,
                   help="train with the reference tier (the layers' own calls, autodiff, Keras's Adam) "
                        "instead of the fast tier (tfattn.accel); the same losses within rounding, slower "
                        "(default: the fast tier, unless TFATTN_ACCEL=0)")


def _add_batch_flags(t):
    t.add_argument("--tokenizer", choices=("char", "word", "wordpiece"), default=None,
                   help="default: wordpiece (tfattn train's recipe), word with --attention")
    t.add_argument("--vocab-size", type=at_least(MIN_VOCAB_SIZE, " (4 ids are reserved)"), default=5000,
                   help="vocabulary size per side, the 4 reserved ids included (default: 5000)")
    t.add_argument("--max-length", type=at_least(MIN_MAX_LENGTH, " ([START] and [END] are counted)"), default=40,
                   help="max tokens per sentence, [START] and [END] included; longer training pairs are "
                        "dropped (default: 40)")
    t.add_argument("--batch-size", type=positive_int, default=64, help="default: 64")
    t.add_argument("--no-bucket", action="store_true", help="do not group sentences by length")


def _add_optimization_flags(o):
    o.add_argument("--epochs", type=positive_int,
                   help="epochs in all (default: 10; with --resume, the run's own: give more to train longer)")
    o.add_argument("--time-budget", type=duration,
                   help="stop after this long, e.g. 15m, 90s, 1h (with --resume: this session's budget; "
                        "default: the run's own)")
    o.add_argument("--learning-rate", type=positive_float, default=2e-3,
                   help="Adam's peak learning rate (default: 2e-3); with --time-budget and no --decay-steps it "
                        "follows a cosine over the budget, down to --decay-alpha of it")
    o.add_argument("--decay-steps", type=positive_int, help="cosine decay of the learning rate over this many steps")
    o.add_argument("--decay-alpha", type=fraction, metavar="A",
                   help=f"where the cosine ends, as a fraction of the peak rate (default: {BUDGET_DECAY_ALPHA} over "
                        f"--time-budget, 0.01 over --decay-steps)")
    o.add_argument("--clip-norm", type=positive_float, default=5.0,
                   help="gradient clipping by global norm (default: 5)")
    o.add_argument("--checkpoint-every", type=positive_int, default=500,
                   help="steps between checkpoints; each epoch's end and a session's first step are "
                        "saved too (default: 500)")
    o.add_argument("--seed", type=non_negative_int, default=0, help="default: 0")


def _add_training_flags(g):
    g.add_argument("--validate-every", type=positive_int, metavar="STEPS",
                   help="validate every this many steps (default: at each epoch's end)")
    g.add_argument("--bleu-sample", type=non_negative_int, default=200, metavar="N",
                   help="validation sentences translated greedily at each validation for BLEU and chrF (a fixed "
                        "sample, so its cost is known; 0: none) (default: 200)")
    g.add_argument("--best-by", choices=("loss", "bleu"), default="loss",
                   help="the checkpoint kept in best/ and exported: lowest validation loss or highest BLEU "
                        "(default: loss)")
    g.add_argument("--early-stopping", type=positive_int, metavar="K",
                   help="stop after K validations in a row without a better --best-by score (default: never)")
    g.add_argument("--average-checkpoints", type=positive_int, metavar="K",
                   help="at the end, average the weights of the last K checkpoints; the average is exported "
                        "when it validates better than the best checkpoint (the log and summary say which)")
    g.add_argument("--warmup-steps", type=non_negative_int,
                   help="linear warm-up of the learning rate from 0 over this many steps (default: 1000 with "
                        "multi-head attention: the Transformer, --encoder transformer or --heads > 1; else 0)")
    g.add_argument("--label-smoothing", type=fraction, default=0.0, metavar="E",
                   help="label smoothing of the training loss: 1 - E on the label, E spread over the vocabulary "
                        "(Vaswani et al. use 0.1); validation loss stays the plain NLL (default: 0)")
    g.add_argument("--schedule", choices=("constant", "cosine", "inverse-sqrt"), default="cosine",
                   help="the learning rate after the warm-up: cosine (over --decay-steps; constant without "
                        "them), constant, or inverse-sqrt (peak * sqrt(warmup / step)) (default: cosine)")
    g.add_argument("--precision", choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"), default="auto",
                   help="Keras dtype policy: mixed ones compute in 16 bits with float32 weights (float16 with "
                        "loss scaling, on the reference tier); auto is mixed_bfloat16 where the hardware computes "
                        "bfloat16 fast (a CPU with AMX, a GPU of compute capability 8.0 or more), else float32, "
                        "logged and written into config.json; exports serve in float32 (default: auto)")
    g.add_argument("--max-nonfinite", type=positive_int, default=5, metavar="K",
                   help="a step with a NaN or infinite loss is skipped and counted; K in a row stop the run "
                        "(exit status 2), its last good checkpoint kept (default: 5)")
    g.add_argument("--deterministic", action="store_true",
                   help="TensorFlow's op determinism (tf.config.experimental.enable_op_determinism) with the seed: "
                        "two runs give the same losses; slower")
    g.add_argument("--jit-compile", action="store_true",
                   help="compile the train step with XLA, once per batch shape (see --pad-to-multiple)")
    g.add_argument("--pad-to-multiple", type=positive_int, metavar="N",
                   help="pad batch lengths up to a multiple of N, so that batches come in few shapes "
                        "(default: 8 with --jit-compile, else 1)")
    g.add_argument("--strategy", choices=STRATEGIES,
                   help="where the run trains (tf.distribute): default, one device; mirrored, this machine's GPUs "
                        "or --replicas logical CPU devices; multiworker, the machines the environment variable "
                        "TF_CONFIG names, each started with the same command (docs/training.md). --batch-size is "
                        "the global batch, split among the replicas; only the chief writes the run (default: default)")
    g.add_argument("--replicas", type=positive_int, metavar="N",
                   help="with --strategy mirrored: N devices; without a GPU, N logical CPU devices that share the "
                        "machine's cores (default: every GPU, or the one CPU)")
    g.add_argument("--worker-timeout", type=duration, metavar="DURATION",
                   help="with --strategy multiworker: how long each worker waits for the others to start, e.g. "
                        "60s or 10m; past it, it stops and names those that did not (default: 5m)")
    g.add_argument("--tensorboard", metavar="DIR",
                   help="where TensorBoard summaries go: losses, learning rate, gradient norm, tokens/s, "
                        "validation BLEU and chrF, attention images, translations, hparams (default: "
                        "RUN/tensorboard); checked before anything is written. With --resume: from now on")
    g.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard summaries")
    g.add_argument("--log-every", type=positive_int, default=20,
                   help="steps between reads of the training means (progress line, TensorBoard, checks of "
                        "non-finite steps) (default: 20)")


STRATEGIES = ("default", "mirrored", "multiworker")  # tfattn.training.distributed.STRATEGIES, without TensorFlow


def _add_model_parser(sub, name, help, description):
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("--model", required=True,
                   help="a run directory or an export directory. A SavedModel is a program: load only exports "
                        "you trust (made by tfattn export, or from someone you trust)")
    p.add_argument("--beam", type=at_least(0, " (the export clamps it to its vocabulary, at most 64)", 2**31 - 1),
                   default=0, help="beam width; 0 or 1: greedy; clamped to the target vocabulary, at most 64 "
                                   "(default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    p.add_argument("--progress", action="store_true",
                   help="a progress line on stderr (sentences done) even where it is not a terminal, e.g. a log "
                        "file (default: only on a terminal; for translate, of stdin into a file or a pipe)")
    p.add_argument("--threads", type=threads, metavar="INTER,INTRA",
                   help="TensorFlow's inter-op and intra-op thread counts (0: its default). On a small CPU, "
                        "2,1 (one thread per op, two ops at a time) decodes faster; see the README's "
                        "serving section. Default: TensorFlow's own")
    return p


def at_least(minimum, why="", maximum=None):
    """An argparse type: an int >= `minimum` (`why`, if given, says why in the error), and <= `maximum` if given."""
    def count(value):
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < minimum or (maximum is not None and number > maximum):
            bound = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
            raise argparse.ArgumentTypeError(f"expected {bound}{why}. Received: {value!r}")
        return number

    return count


positive_int = at_least(1)
non_negative_int = at_least(0)
# Ids 0-3 are reserved (padding, [UNK], [START], [END]: tfattn.data.text.RESERVED); a vocabulary needs a real token.
MIN_VOCAB_SIZE = 5
MIN_MAX_LENGTH = 3  # [START], one token, [END] (tfattn.data.text.Tokenizer)


FLOAT32_MAX = 3.4028234663852886e38  # training runs in float32: a larger number is infinite there
FLOAT32_TINY = 1.401298464324817e-45  # and a smaller one is 0


def _number(value):
    """`value` as a float, NaN if it is not a number (every range check below then refuses it)."""
    try:
        return float(value)
    except ValueError:
        return math.nan


def positive_float(value):
    """An argparse type: a number > 0 that float32, the training dtype, holds as finite and non-zero."""
    number = _number(value)
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0. Received: {value!r}")
    if not FLOAT32_TINY <= number <= FLOAT32_MAX:
        raise argparse.ArgumentTypeError(f"expected a number > 0 that float32 holds (from 1.4e-45 to 3.4e38; "
                                         f"outside, training would compute with inf or 0). Received: {value!r}")
    return number


def share(value):
    """An argparse type: a number in (0, 1], such as an exact-match share to reach."""
    number = _number(value)
    if not 0 < number <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], such as 0.995. Received: {value!r}")
    return number


def fraction(value):
    """An argparse type: a number in [0, 1), such as a dropout rate or label smoothing."""
    number = _number(value)
    if not 0.0 <= number < 1.0:  # also NaN
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1). Received: {value!r}")
    return number


def duration(value):
    """An argparse type: `"15m"`, `"90s"`, `"1h30m"`, `"2.5m"` or `"45"` (seconds) -> seconds, > 0."""
    match = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", value)
    parts = match.groups() if match else ()  # hours, minutes, seconds; None where absent
    seconds = sum(unit * float(part) for unit, part in zip((3600, 60, 1), parts) if part)
    if not (seconds > 0 and math.isfinite(seconds)):  # also no match, and an empty string
        raise argparse.ArgumentTypeError(f"expected a duration > 0 such as 15m, 90s, 1h30m or 45 (seconds). "
                                         f"Received: {value!r}")
    return seconds


def threads(value):
    """`"INTER,INTRA"` -> `(inter, intra)`, two ints >= 0 (argparse type of `--threads`), each at most
    `MAX_THREADS_PER_CPU` per CPU of the machine: TensorFlow aborts the process when it cannot start
    the threads asked for."""
    parts = value.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected two counts >= 0 as INTER,INTRA, e.g. 2,1. Received: {value!r}")
    counts = tuple(int(part) for part in parts)
    most = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
    if max(counts) > most:
        raise argparse.ArgumentTypeError(f"expected counts of at most {most} ({MAX_THREADS_PER_CPU} per CPU; this "
                                         f"machine has {os.cpu_count() or 1}). Received: {value!r}")
    return counts


MAX_THREADS_PER_CPU = 8


def set_threads(counts):
    """Sets TensorFlow's inter-op and intra-op thread counts; they can only be set before it runs an op."""
    import tensorflow as tf

    inter, intra = counts
    try:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    except RuntimeError as e:  # TensorFlow has started in this process already
        raise ValueError(f"--threads must be set before TensorFlow runs anything in this process ({e}). "
                         f"Received: threads={inter},{intra}") from None


def build_parser():
    parser = argparse.ArgumentParser(prog="tfattn", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_demo_parser, _add_train_parser, _add_evaluate_parser, _add_translate_parser,
                _add_export_parser, _add_plot_parser):
        add(sub)
    return parser


def package_version():
    """The installed package's version (its metadata, without importing TensorFlow)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("tfattn")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "(not installed)"


def _add_demo_parser(sub):
    demo = sub.add_parser("demo", help="train on the offline dates corpus, export, reload, translate, plot",
                          description="Train an attention model to turn human-written dates into ISO "
                                      "dates, export it as a SavedModel, reload it, and print one JSON line. "
                                      "Training is counted in steps: every --validate-every steps it "
                                      "translates held-out validation dates and stops once their exact "
                                      "match reaches --stop-at, or at --max-steps, so a slower machine "
                                      "trains the same model, only later.")
    demo.add_argument("--attention", choices=("luong", "bahdanau"), default="luong",
                      help="attention and decoder style (default: luong)")
    demo.add_argument("--n-train", type=positive_int, default=30000, help="training pairs (default: 30000)")
    demo.add_argument("--n-validation", type=positive_int, default=1000,
                      help="held-out validation pairs that decide when training stops (default: 1000)")
    demo.add_argument("--n-test", type=positive_int, default=1000, help="held-out test pairs (default: 1000)")
    demo.add_argument("--max-steps", type=positive_int, default=1000,
                      help="train at most this many steps; the learning rate follows one cosine over them "
                           "(default: 1000)")
    demo.add_argument("--validate-every", type=positive_int, default=100,
                      help="steps between validations (default: 100)")
    demo.add_argument("--stop-at", type=share, default=0.995,
                      help="stop once the validation exact match reaches this share, in (0, 1] (default: 0.995)")
    demo.add_argument("--out-dir", default="saved_models",
                      help="the export goes to OUT_DIR/dates-ATTENTION (default: saved_models)")
    demo.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default: 0)")
    demo.add_argument("--quiet", action="store_true", help="no progress output")
    demo.set_defaults(func=_demo)


def _add_evaluate_parser(sub):
    ev = _add_model_parser(sub, "evaluate", "BLEU and chrF of a model on a corpus split (JSON)",
                           "Translate a corpus split and print one JSON object: bleu, chrf, n, bleu_by_length "
                           "(sacrebleu, 13a tokenization, lowercased, against the untouched references).")
    _add_corpus_flags(ev, required=False)
    ev.add_argument("--split", choices=("train", "validation", "val", "test"), default="test", help="default: test")
    ev.add_argument("--limit", type=positive_int, help="evaluate only the first N pairs of the split")
    ev.add_argument("--batch-size", type=positive_int, default=64, help="sentences per call (default: 64)")
    ev.add_argument("--output", help="also write the JSON to this file (for tfattn plot --bleu-by-length)")
    ev.set_defaults(func=_evaluate)


def _add_translate_parser(sub):
    tr = _add_model_parser(sub, "translate", "translate text with a trained model",
                           "Translate the given sentences (or stdin lines) with a run or an export.")
    tr.add_argument("text", nargs="*", help="sentences to translate; read from stdin when absent")
    tr.add_argument("--plot", help="save the first sentence's attention heatmap to this image path "
                                    "(.png is added when it has no extension)")
    tr.add_argument("--html", metavar="FILE",
                    help="also write every sentence's translation and attention as one interactive HTML page "
                         "(no network needed): hover or tap an output token to see its weights on the source, "
                         "a heatmap, a layer and head selector for multi-head models, and with --beam the "
                         "n-best list, each hypothesis with its own attention")
    tr.add_argument("--batch-size", type=positive_int, default=64,
                    help="sentences per call; stdin is read and translated a batch at a time (default: 64)")
    tr.add_argument("--alignments", action="store_true",
                    help="print each translation, a tab, then its word alignment in Pharaoh format: "
                         "space-separated pairs i-j, one per output token j in order, i the source token "
                         "it attends to most (the lower i on ties; with --beam, the best hypothesis'). "
                         "Indices count from 0 over the tokenizer's tokens (words and punctuation, "
                         "characters or pieces): source tokens without [START], [END] and padding, output "
                         "tokens without [END] and padding. Nothing follows the tab when the source has no token")
    tr.add_argument("--replace-unknown", action="store_true",
                    help="replace each [UNK] of a translation by the source token it attends to most (any "
                         "export; an export made with export --replace-unknown does it already)")
    tr.set_defaults(func=_translate)


def _add_export_parser(sub):
    ex = sub.add_parser("export", help="export a run's checkpoint as a SavedModel",
                        description="Write a SavedModel (translate signatures, tokenizers inside) from a run.")
    ex.add_argument("--model", required=True, help="run directory")
    ex.add_argument("--out", required=True,
                    help="export directory to write: new, empty or an earlier export; files in it that the "
                         "export does not write are kept, and a symlink is written through")
    ex.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="default: best")
    ex.add_argument("--no-accel", dest="accel", action="store_false", default=None,
                    help="export the reference tier's decoding (the layers' own calls) instead of the fast "
                         "tier's (tfattn.accel); the same translations within rounding, slower")
    ex.add_argument("--replace-unknown", action="store_true",
                    help="the export replaces each [UNK] of a translation by the source token it attends to "
                         "most, in all its signatures (saved as replace_unknown in tfattn_config.json)")
    ex.add_argument("--tokenizer-ops", choices=("core", "text"), default="core",
                    help="core (default): fold case and normalize text with core TensorFlow ops, so that "
                         "saved_model_cli run, TensorFlow Serving and runtimes without tensorflow-text load the "
                         "export (an NFC or NFKC source tokenizer keeps tensorflow-text's ops); text: "
                         "tensorflow-text's ops throughout. Both translate the same (docs/serving.md)")
    ex.add_argument("--format", choices=("savedmodel", "litert"), default="savedmodel",
                    help="savedmodel (default): text in, text out, every signature; litert: a .tflite model of "
                         "greedy translation in LiteRT's builtin ops, token ids in and out, the vocabularies "
                         "beside it (docs/serving.md)")
    ex.set_defaults(func=_export)


def _add_plot_parser(sub):
    pl = sub.add_parser("plot", help="draw training curves or BLEU by sentence length",
                        description="Draw a run's loss/accuracy curves, or BLEU by source length from "
                                    "`tfattn evaluate --output` files (one curve per file).")
    pl.add_argument("--history", help="a run's history.json")
    pl.add_argument("--bleu-by-length", nargs="+", help="JSON files written by tfattn evaluate --output")
    pl.add_argument("--out", required=True,
                    help="image path to write; the extension chooses the format (.png is added when it has "
                         "none)")
    pl.set_defaults(func=_plot)


def main(argv=None):
    from tfattn.files import WriteError
    from tfattn.runs.directory import Terminated

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # `train --resume` checks which flags were given (`_check_resume_flags`)
    try:
        if getattr(args, "threads", None) is not None:
            set_threads(args.threads)
        args.func(args)
    except BrokenPipeError:  # the reader of stdout went away (`tfattn translate < big.txt | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 1
    except (WriteError, MemoryError) as e:  # the machine's fault (disk full, read-only, memory), not the command's
        parser.exit(1, f"tfattn: error: {e}\n")
    except (FileNotFoundError, FileExistsError, ValueError, OSError, ImportError) as e:  # ImportError: an extra
        parser.exit(2, f"tfattn: error: {e}\n")
    except Terminated:  # SIGTERM during training, saved like Ctrl-C (tfattn.runs.train)
        parser.exit(143, "tfattn: terminated\n")
    except KeyboardInterrupt:
        parser.exit(130, "tfattn: interrupted\n")
    return 0


def run():
    """The `tfattn` command: `main` with TensorFlow's native start-up lines kept off the terminal
    (`tfattn.quiet`)."""
    from tfattn.quiet import drop_native_noise

    drop_native_noise()
    sys.exit(main())


if __name__ == "__main__":
    run()
