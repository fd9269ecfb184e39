"""The papers' central findings, on small corpora: Bahdanau et al. 2014 Fig. 2 and 3, Luong et al. 2015 Table 4.

At one training budget, a fixed number of steps for every model (8,000 by default), three parts
(`--parts`):

- `length` (Bahdanau et al., Fig. 2): RNNencdec (no attention) against RNNsearch (Bahdanau) against
  Luong global and Luong local-p attention (general score, input feeding): BLEU by source length,
  greedy and beam 4, on the corpus's test split. Does the baseline fall with length while attention
  holds?
- `alignment` (Fig. 3): each attention model's weights over one long test sentence, as a heatmap.
- `table4` (Luong et al., Table 4): scores by global, local-m and local-p attention: validation
  perplexity and test BLEU.

Two grids. The estimates are `estimate_seconds` of the grid: each run's steps at the seconds per
step of its kind (`STEP_SECONDS`, measured on spa-eng on 2 cores; Multi30k's taken as twice as
long), plus its validations and its scoring (`VALIDATION_SECONDS`, `SCORING_SECONDS`):

- default: spa-eng (Spanish -> English) alone, and Table 4 cut to five cells (`DEFAULT_CELLS`:
  global dot, general and concat; local-m general; local-p general): 7 runs, about 1 h 47 min.
- `--full`: spa-eng and Multi30k (English -> German), and Table 4's ten cells (`FULL_CELLS`: dot,
  general and concat by global, local-m and local-p, and location for global only, as in the
  paper): 24 runs, about 9 h 07 min (7 h 20 min more after the default grid, whose runs it finds).

Every model trains with bench/quality.py's recipe (`quality.recipe`, `quality.recipe_model`:
embedding and units 256, dropout 0.2, Adam at 2e-3 on a cosine over the budget, word vocabularies,
sentences of at most 40 tokens, batches of 64) through `tfattn.training.runs`, the code behind
`tfattn train`, and is scored as quality.py scores (`quality.score`: the best checkpoint by
validation loss, exported, sacrebleu BLEU lowercased). A run that exists is not trained again:
this script keeps each run in OUT/CORPUS/KIND/run (a run cut short resumes there), and `--reuse DIR`
takes finished runs from DIR/CORPUS/KIND/run or from bench/quality.py's layout DIR/KIND/run (its
`--out DIR/KIND`), when the run's corpus and the kind's model fields match. `--kinds` picks kinds
from either grid, so that any of Table 4's cells can be added to, or left out of, a run.

The paths it needs (each corpus's files, `--out`, `--figures`) are checked before anything is
trained, each problem one line. Prints one JSON object (also written to OUT/reproduce.json after
each corpus, so that the scores so far outlive a later failure), writes the figures as PNG to
`--figures` (`--figures docs` for docs/reproduction.md) and the tables as Markdown, laid out as in
docs/reproduction.md, to OUT/tables.md. TensorFlow and the package are imported inside the functions
that use them, so that the helpers are tested without TensorFlow (tests/test_bench_reproduce.py).

Usage: python bench/reproduce.py [--full] [--steps 8000] [--corpora spa-eng,multi30k]
           [--parts length,alignment,table4] [--kinds KIND,...] [--reuse DIR]... [--out runs/reproduce]
           [--figures DIR] [--tiny]
"""

import argparse
import dataclasses
import gc
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))  # quality, spa and machine, imported where used

STEPS = 8000  # training steps per model, in both grids
# Steps between validations: at most one epoch of Multi30k (about 450 batches of 64). An epoch cut at
# EVERY batches is a uniform sample of the training split, although spa.txt is sorted by length: the
# pipeline's default `DataConfig.shuffle_buffer` (None) shuffles every row of the split each epoch.
EVERY = 400
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# Each corpus as a `CorpusConfig`'s fields. spa-eng is the file of bench/spa.py (`spa.SPA`), split
# by line index; Multi30k is read from its parallel files, tested on test_2016_flickr.
CORPORA = {
    "spa-eng": {"corpus": str(DATA / "spa-eng" / "spa.txt"), "direction": "to_english"},
    "multi30k": {"corpus": str(DATA / "multi30k-en-de"), "format": "parallel", "source_lang": "en",
                 "target_lang": "de", "splits": ("train", "val", "test_2016_flickr")},
}
DIRECTIONS = {"spa-eng": "Spanish -> English", "multi30k": "English -> German"}
# Words per vocabulary side. spa-eng: quality.py's 5,000, so that its runs can be reused. Multi30k:
# 8,000, since German has about twice as many word types as English in its 29,000 training pairs.
VOCAB = {"spa-eng": 5000, "multi30k": 8000}

PARTS = ("length", "alignment", "table4")
LENGTH_KINDS = ("none", "bahdanau", "luong", "luong-local-p")  # quality.py's kinds
ALIGNMENT_KINDS = ("bahdanau", "luong", "luong-local-p")
NAMES = {"none": "RNNencdec (no attention)", "bahdanau": "RNNsearch (Bahdanau)", "luong": "Luong global",
         "luong-local-p": "Luong local-p"}
# Luong et al.'s Table 4: attention ranges by scores. The location score is global only, as in the
# paper (it scores positions, not source words); concat is in the paper's footnote 15.
RANGES = {"global": {}, "local-m": {"local": "m", "window": 10}, "local-p": {"local": "p", "window": 10}}
SCORES = {"global": ("location", "dot", "general", "concat"), "local-m": ("dot", "general", "concat"),
          "local-p": ("dot", "general", "concat")}
# The grids' Table 4 cells, `(range, score)`. The full grid is the paper's table with concat; the
# default keeps what its reading rests on: the content scores for global attention, and general, the
# paper's best score for local attention, by range. Any `(range, score)` with a score of
# `tfattn.layers.attention.SCORES` may be added here.
FULL_CELLS = tuple((range_, score) for range_ in RANGES for score in SCORES[range_])
DEFAULT_CELLS = (("global", "dot"), ("global", "general"), ("global", "concat"), ("local-m", "general"),
                 ("local-p", "general"))
DEFAULT_CORPORA = ("spa-eng",)  # --full: every corpus of CORPORA
MIN_N = 20  # a length bucket counts in a trend only with at least this many test sentences
LONG_WORDS = 24  # the alignment's sentence: the longest test source of at most this many words

# What a grid's duration is estimated from (`estimate_seconds`). Seconds per training step of a
# spa-eng model of this recipe on the 2-core machine, from bench/quality.py's 15-minute rows in
# docs/performance.md (900 s over the steps each made): attention over the whole source (bahdanau
# 10,177 steps, luong 10,192) 0.09, the baseline (none, 9,610) 0.094, local attention (luong-local-p,
# 7,903; local-m, not measured, taken as local-p) 0.114.
STEP_SECONDS = {"global": 0.09, "none": 0.094, "local": 0.114}
# Multi30k's steps, not measured: its sentences have about twice the words of spa-eng's (11.9 English
# and 11.1 German words per training pair, against 6.1 Spanish and 6.3 English), and its target
# vocabulary is 8,000 words, not 5,000.
CORPUS_STEP_FACTOR = {"spa-eng": 1.0, "multi30k": 2.0}
# A validation (the validation split's loss, 200 greedy translations): docs/performance.md's loop table
# has 7.4 s for the one validation of an epoch, the greedy search's tracing included, which later
# validations skip.
VALIDATION_SECONDS = 4
# A run's scoring: its export at the end of training, loading the export twice (3-5 s each), the test
# split greedy (about 1,000 sentences/s) and with beam 4 (about 400/s), the alignment's sentence.
SCORING_SECONDS = 60


@dataclasses.dataclass
class Budget:
    """What every model of one invocation gets: `steps` training steps, validated every `every`
    steps, embeddings and units of `size`, `vocab` words per side by corpus; with `max_pairs`, that
    many training pairs; with `test_sentences`, that many test pairs, spread over the split."""

    steps: int = STEPS
    every: int = EVERY
    size: int = 256
    vocab: dict = dataclasses.field(default_factory=lambda: dict(VOCAB))
    max_pairs: int | None = None
    test_sentences: int | None = None
    validation_sample: int = 200


# The smallest run that goes through every step of the script (as the dates demo's quick mode does).
TINY = Budget(steps=20, every=20, size=16, vocab={"spa-eng": 500, "multi30k": 500}, max_pairs=2000,
              test_sentences=200, validation_sample=0)
TINY_KINDS = ("none", "luong-local-p")


# -- the plan ----------------------------------------------------------------------------------------

def schedule(steps, every):
    """`(epochs, steps_per_epoch)` that train exactly `steps` steps with a validation every `every`.

    The trainer stops at its last epoch, so each epoch is cut at `every` batches
    (`TrainConfig.steps_per_epoch`), which must not exceed a whole epoch of the corpus.

    Raises:
        ValueError: `steps` or `every` below 1, or `steps` above `every` and not a multiple of it.
    """
    if steps < 1 or every < 1:
        raise ValueError(f"steps and every must be >= 1. Received: steps={steps!r}, every={every!r}")
    if steps <= every:
        return 1, steps
    if steps % every:
        raise ValueError(f"--steps must be a multiple of --every ({every}), so that every model trains exactly "
                         f"--steps steps. Received: steps={steps!r}")
    return steps // every, every


def grid_kind(score, range_):
    """The kind name of a Table 4 cell: `luong`, then `-local-m` or `-local-p`, then `-SCORE` unless the
    score is general, so that the general cells are quality.py's kinds `luong`, `luong-local-m` and
    `luong-local-p` (whose runs are reused)."""
    return "luong" + ("" if range_ == "global" else f"-{range_}") + ("" if score == "general" else f"-{score}")


def grid_fields(score, range_):
    """The `ModelConfig` fields of a Table 4 cell (input feeding by `ModelConfig`'s default)."""
    return {"attention": "luong", "score": score, **RANGES[range_]}


def table4_cells(cells=None):
    """`[(range, score, kind), ...]` of `cells` (`(range, score)` pairs, in their order); None: every
    cell of either grid, the full grid's first (global first, location first among the scores)."""
    if cells is None:
        cells = FULL_CELLS + tuple(cell for cell in DEFAULT_CELLS if cell not in FULL_CELLS)
    return [(range_, score, grid_kind(score, range_)) for range_, score in cells]


def fields_of(kind, known):
    """A kind's `ModelConfig` fields: `known[kind]` (quality.py's `KINDS`) if there, else a Table 4 cell's.

    Raises:
        ValueError: neither knows `kind`.
    """
    if kind in known:
        return dict(known[kind])
    for range_, score, name in table4_cells():
        if name == kind:
            return grid_fields(score, range_)
    raise ValueError(f"Unknown kind: not in quality.KINDS nor a Table 4 cell. Received: kind={kind!r}")


def plan(parts, cells=DEFAULT_CELLS, only=None):
    """The kinds that `parts` need, each once, in the parts' order, with `cells` for Table 4 (None:
    every cell of either grid); `only` (names) keeps those alone."""
    needs = {"length": LENGTH_KINDS, "alignment": ALIGNMENT_KINDS, "table4": [k for _, _, k in table4_cells(cells)]}
    kinds = []
    for part in parts:
        kinds += [kind for kind in needs[part] if kind not in kinds]
    return [kind for kind in kinds if only is None or kind in only]


def kinds_of(args):
    """The kinds this invocation trains, on each corpus: its grid's (`--full` or the default), or the
    `--kinds` that `--parts` use, taken from either grid."""
    if args.kinds:
        return plan(args.parts, None, args.kinds)
    return plan(args.parts, FULL_CELLS if args.full else DEFAULT_CELLS)


def budget_of(args):
    """The `Budget` of the command line: `TINY` or the default, with `--steps` and `--every` over it."""
    base = TINY if args.tiny else Budget()
    return dataclasses.replace(base, steps=base.steps if args.steps is None else args.steps,
                               every=base.every if args.every is None else args.every)


# -- how long a grid takes -----------------------------------------------------------------------------

def step_seconds(kind, corpus):
    """Estimated seconds per training step of `kind` on `corpus` (`STEP_SECONDS`, `CORPUS_STEP_FACTOR`)."""
    family = "none" if kind == "none" else "local" if "-local-" in kind else "global"
    return STEP_SECONDS[family] * CORPUS_STEP_FACTOR[corpus]


def run_seconds(kind, corpus, steps, every):
    """Estimated seconds of one run: `steps` training steps, a validation every `every`, its scoring."""
    validations = schedule(steps, every)[0]
    return steps * step_seconds(kind, corpus) + validations * VALIDATION_SECONDS + SCORING_SECONDS


def estimate_seconds(corpora, kinds, steps, every=EVERY):
    """Estimated seconds of training and scoring every kind of `kinds` on every corpus of `corpora` on
    the 2-core machine, as a whole number (a run found finished takes only its scoring)."""
    return round(sum(run_seconds(kind, corpus, steps, every) for corpus in corpora for kind in kinds))


def duration_text(seconds):
    """`seconds` to the nearest minute: `"47 min"`, `"1 h 05 min"`."""
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


DEFAULT_DURATION = duration_text(estimate_seconds(DEFAULT_CORPORA, plan(PARTS, DEFAULT_CELLS), STEPS))
FULL_DURATION = duration_text(estimate_seconds(tuple(CORPORA), plan(PARTS, FULL_CELLS), STEPS))


# -- runs that exist -----------------------------------------------------------------------------------

def run_dirs(reuse, corpus, kind):
    """Where a finished run of `kind` on `corpus` may be: for each `--reuse` DIR, DIR/CORPUS/KIND/run,
    then DIR/KIND/run (bench/quality.py's `--out DIR/KIND` puts its run in DIR/KIND/run)."""
    return [path for d in reuse for path in (os.path.join(d, corpus, kind, "run"), os.path.join(d, kind, "run"))]


def run_state(run):
    """`"done"` (a config, a summary and an export), `"partial"` (a config.json alone: a run cut short,
    which resumes) or `"new"`."""
    if not os.path.isfile(os.path.join(run, "config.json")):
        return "new"
    done = all(os.path.isfile(os.path.join(run, *name)) for name in (("summary.json",), ("export", "saved_model.pb")))
    return "done" if done else "partial"


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def reuse_problem(config, corpus, fields):
    """Why a run whose config.json holds `config` is not a run of the kind with `fields` on `corpus`
    (a `CORPORA` entry), or None if it is."""
    theirs = config.get("corpus") or {}
    path = theirs.get("corpus") or ""
    if not path or os.path.realpath(path) != os.path.realpath(corpus["corpus"]):
        return f"it trained on {path!r}, not {corpus['corpus']!r}"
    for key, value in corpus.items():
        if key != "corpus" and _plain(theirs.get(key)) != _plain(value):
            return f"its corpus {key} is {theirs.get(key)!r}, not {value!r}"
    model = config.get("model") or {}
    for key, value in fields.items():
        if model.get(key) != value:
            return f"its model's {key} is {model.get(key)!r}, not {value!r}"
    return None


RECIPE_FIELDS = (("corpus", "max_pairs"), ("model", "embedding_dim"), ("model", "units"), ("model", "dropout"),
                 ("source_tokenizer", "max_tokens"), ("target_tokenizer", "max_tokens"),
                 ("data", "batch_size"), ("data", "shuffle_buffer"), ("train", "learning_rate"),
                 ("train", "decay_steps"), ("train", "time_budget"))


def recipe_differences(theirs, ours):
    """`{"section.field": [theirs, ours]}` where a run's config (a config.json dict) differs from the
    config this invocation would train with, over the recipe's fields (`RECIPE_FIELDS`)."""
    differences = {}
    for section, field in RECIPE_FIELDS:
        mine, other = (ours.get(section) or {}).get(field), (theirs.get(section) or {}).get(field)
        if other != mine:
            differences[f"{section}.{field}"] = [other, mine]
    return differences


def perplexity(loss):
    """`exp(loss)` of a mean cross-entropy in nats, to 2 decimals; None for a loss that is missing or
    not finite."""
    if loss is None or not math.isfinite(loss):
        return None
    return round(math.exp(loss), 2)


# -- what the scores show ----------------------------------------------------------------------------

def length_trend(by_length, min_n=MIN_N):
    """How BLEU moves with source length, over the buckets of `by_length` (`{bucket: {"bleu", "n"}}`, in
    order) that hold at least `min_n` sentences: the least-squares slope of BLEU against the bucket's
    position (BLEU points per bucket of 5 words), and the last such bucket's BLEU minus the first's.

    Returns:
        `{"buckets": [labels used], "slope": float or None, "last_minus_first": float or None}`; None
        with fewer than two buckets.
    """
    points = [(i, v["bleu"]) for i, v in enumerate(by_length.values()) if v["n"] >= min_n and v["bleu"] is not None]
    labels = list(by_length)
    trend = {"buckets": [labels[i] for i, _ in points], "slope": None, "last_minus_first": None}
    if len(points) < 2:
        return trend
    slope = statistics.linear_regression(*zip(*points)).slope
    return {**trend, "slope": round(slope, 2), "last_minus_first": round(points[-1][1] - points[0][1], 2)}


def gaps(by_length, baseline="none"):
    """Each model's BLEU minus the baseline's, bucket by bucket (None where either has none):
    `{kind: {bucket: gap}}` from `{kind: {bucket: {"bleu", "n"}}}`, the baseline left out."""
    base = by_length[baseline]
    return {kind: {label: None if v["bleu"] is None or base[label]["bleu"] is None
                   else round(v["bleu"] - base[label]["bleu"], 2) for label, v in scores.items()}
            for kind, scores in by_length.items() if kind != baseline}


def long_sentence(pairs, max_words=LONG_WORDS):
    """The pair whose source has the most whitespace-separated words, at most `max_words` (the first of
    equals); None if no source is that short."""
    best, most = None, 0
    for pair in pairs:
        n = len(pair[0].split())
        if most < n <= max_words:
            best, most = pair, n
    return best


def figure_path(figures, *parts):
    """`FIGURES/reproduction-PART-PART.png`: a prefix rather than a folder, since the repository's
    .gitignore tracks the PNGs directly in docs/ only."""
    return os.path.join(figures, "reproduction-" + "-".join(parts) + ".png")


def _number(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def length_table(models):
    """Markdown: a row per model of the `length` part, a column per length bucket (its `n` in the
    header: every model is scored on the same sentences), cells BLEU greedy / beam 4, and the beam-4
    trend's slope."""
    rows = [(kind, models[kind]) for kind in LENGTH_KINDS if kind in models]
    if not rows:
        return ""
    counts = {label: v["n"] for label, v in rows[0][1]["beam4"]["bleu_by_length"].items()}
    lines = ["| model | steps | " + " | ".join(f"{label} (n={n:,})" for label, n in counts.items())
             + " | slope, beam 4 |", "|---" * (len(counts) + 3) + "|"]
    for kind, row in rows:
        greedy, beam = row["greedy"]["bleu_by_length"], row["beam4"]["bleu_by_length"]
        cells = [f"{_number(greedy[label]['bleu'])} / {_number(beam[label]['bleu'])}" for label in counts]
        slope = length_trend(beam)["slope"]
        lines.append(f"| {NAMES[kind]} | {row['steps']:,} | " + " | ".join(cells) + f" | {_number(slope)} |")
    return "\n".join(lines)


def table4_table(models):
    """Markdown: a row per Table 4 cell that ran: attention, score, validation perplexity, test BLEU
    greedy / beam 4, steps."""
    lines = ["| attention | score | val ppl | BLEU greedy / beam 4 | steps |", "|---|---|---|---|---|"]
    for range_, score, kind in table4_cells():
        row = models.get(kind)
        if row is not None:
            lines.append(f"| {range_} | {score} | {_number(row['val_ppl'])} | {_number(row['greedy']['bleu'])} / "
                         f"{_number(row['beam4']['bleu'])} | {row['steps']:,} |")
    return "\n".join(lines)


def markdown(result):
    """OUT/tables.md: for each corpus, its length table and its Table 4 analogue, as far as they ran, and
    the kinds whose training diverged."""
    out = []
    for corpus, found in result["corpora"].items():
        out.append(f"## {corpus} ({found['direction']}), {found['n_test']:,} test sentences\n")
        if "length" in found:
            table = length_table(found["models"])
            out.append(f"BLEU by source length, greedy / beam 4:\n\n{table}\n")
        if "table4" in found:
            out.append("Luong et al. Table 4 analogue:\n\n" + table4_table(found["models"]) + "\n")
        if found.get("diverged"):
            out.append("Diverged, so left out of the tables: " + ", ".join(found["diverged"]) + "\n")
    return "\n".join(out)


# -- the command line --------------------------------------------------------------------------------

def names(choices):
    """An argparse type: a comma-separated list of names, each one of `choices`."""

    def parse(text):
        chosen = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in choices]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(f"expected names from {', '.join(choices)}. Received: {text!r}")
        return chosen

    return parse


def positive_int(text):
    """An argparse type: an int >= 1 (0 is refused, never taken for the default)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1. Received: {text!r}")
    return value


def path_problem(args):
    """One line saying what of the paths this invocation needs is wrong, or None: each corpus's files
    missing, `--out` or `--figures` a file (or under one) or not writable. Checked before any
    training, so that nothing is trained or scored for an output that cannot be written. Makes the
    two directories (they would be made anyway)."""
    for corpus in args.corpora:
        missing = [path for path in corpus_files(corpus) if not os.path.isfile(path)]
        if missing:
            others = " among others" if len(missing) > 1 else ""
            return (f"the {corpus} corpus is missing ({missing[0]} is not a file{others}): put it under {DATA} or leave {corpus} out with --corpora. Received: --corpora "
                    f"{','.join(args.corpora)}")
    for flag, directory in (("--out", args.out), ("--figures", args.figures)):
        try:
            os.makedirs(directory, exist_ok=True)
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as error:
            reason = "it is a file" if os.path.isfile(directory) else (error.strerror or str(error))
            return f"{flag} {directory} is not a directory this script can write: {reason}. Received: {flag} {directory}"
    return None


def corpus_files(corpus):
    """The files `corpus` of `CORPORA` is read from."""
    fields = CORPORA[corpus]
    if fields.get("format") != "parallel":
        return [fields["corpus"]]
    return [os.path.join(fields["corpus"], f"{split}.{lang}") for split in fields["splits"]
            for lang in (fields["source_lang"], fields["target_lang"])]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help=f"the full grid: {', '.join(CORPORA)} and all of Table 4's cells, about {FULL_DURATION} "
                             f"on 2 cores (default: {', '.join(DEFAULT_CORPORA)} and {len(DEFAULT_CELLS)} cells, about "
                             f"{DEFAULT_DURATION})")
    parser.add_argument("--steps", type=positive_int,
                        help=f"training steps per model (default {STEPS:,}; --tiny: {TINY.steps})")
    parser.add_argument("--every", type=positive_int,
                        help=f"steps between validations (default {EVERY}); --steps must be a multiple of it")
    parser.add_argument("--corpora", type=names(tuple(CORPORA)),
                        help=f"default {','.join(DEFAULT_CORPORA)}; --full and --tiny: {','.join(CORPORA)}")
    parser.add_argument("--parts", type=names(PARTS), default=list(PARTS))
    parser.add_argument("--kinds", type=names(tuple(plan(PARTS, None))),
                        help=f"these kinds, of either grid, as far as the parts need them (default: the grid's; "
                             f"--tiny: {','.join(TINY_KINDS)})")
    parser.add_argument("--reuse", action="append", default=[], metavar="DIR",
                        help="take finished runs from DIR/CORPUS/KIND/run or DIR/KIND/run (repeatable)")
    parser.add_argument("--out", help="this script's runs, OUT/CORPUS/KIND/run (default runs/reproduce; --tiny: "
                                      "runs/reproduce-tiny)")
    parser.add_argument("--figures", help="where the PNGs go (default OUT/figures; docs for docs/reproduction.md)")
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tiny", action="store_true", help=f"tiny models, {TINY.steps} steps, 2,000 training pairs, "
                                                            f"{TINY.test_sentences} test sentences, both corpora: "
                                                            f"checks the script")
    args = parser.parse_args(argv)
    try:
        schedule(budget_of(args).steps, budget_of(args).every)
    except ValueError as error:
        parser.error(str(error))
    # --tiny reads both corpora, so that every path of the script runs (Multi30k's parallel files too).
    args.corpora = args.corpora or list(CORPORA if args.full or args.tiny else DEFAULT_CORPORA)
    args.out = args.out or ("runs/reproduce-tiny" if args.tiny else "runs/reproduce")
    args.figures = args.figures or os.path.join(args.out, "figures")
    args.kinds = args.kinds or (list(TINY_KINDS) if args.tiny else None)
    return args


# -- training and scoring (TensorFlow from here on) ------------------------------------------------------

def echo(line):
    print(line, file=sys.stderr, flush=True)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_config(corpus, kind, fields, budget, args):
    """The `RunConfig` of `kind` on `corpus`: quality.py's recipe, trained `budget.steps` steps."""
    import quality
    from tfattn.runs.config import CorpusConfig
    from tfattn.training.trainer import TrainConfig
    from tfattn.training.validation import ValidationConfig

    epochs, per_epoch = schedule(budget.steps, budget.every)
    train = TrainConfig(**{"learning_rate": args.learning_rate, **quality.TRAINING.get(kind, {})},
                        decay_steps=budget.steps, epochs=epochs, steps_per_epoch=per_epoch)
    model = quality.recipe_model(fields, args.dropout, budget.size)
    return quality.recipe(CorpusConfig(**CORPORA[corpus], max_pairs=budget.max_pairs), model, train,
                          budget.vocab[corpus], validation=ValidationConfig(sample=budget.validation_sample),
                          tensorboard=None)


def find_or_train(corpus, kind, fields, wanted, args):
    """`(run directory, how)`: a finished run from `--reuse` that fits, else this script's own run in
    OUT/CORPUS/KIND/run, found finished, resumed or trained. An own run of another recipe (another
    `--steps`, `--tiny`) stops the script rather than being mixed in."""
    from tfattn.runs.train import train_run

    for run in run_dirs(args.reuse, corpus, kind):
        if run_state(run) == "done":
            problem = reuse_problem(read_json(os.path.join(run, "config.json")), CORPORA[corpus], fields)
            if problem is None:
                return run, "reused"
            echo(f"not reusing {run}: {problem}")
    own = os.path.join(args.out, corpus, kind, "run")
    state = run_state(own)
    if state != "new":
        differences = recipe_differences(read_json(os.path.join(own, "config.json")), wanted.to_dict())
        if differences:  # another --steps or --tiny into the same --out: never mixed in silently
            sys.exit(f"{own} holds a run of another recipe ({differences}: the run's, then this invocation's); "
                     f"pass another --out, or remove it to train it again")
    if state != "done":
        echo(f"{corpus}, {kind}: training {wanted.train.decay_steps:,} steps in {own}"
             + (" (resumed)" if state == "partial" else ""))
        train_run(wanted, own, resume=state == "partial", quiet=True, echo=echo)
    return own, {"done": "found", "partial": "resumed", "new": "trained"}[state]


def model_row(corpus, kind, budget, args, test):
    """Trains (or finds) `kind` on `corpus` and scores it on `test`: the model's row of the JSON."""
    import quality

    fields = fields_of(kind, quality.KINDS)
    wanted = run_config(corpus, kind, fields, budget, args)
    run, how = find_or_train(corpus, kind, fields, wanted, args)
    summary, export = read_json(os.path.join(run, "summary.json")), os.path.join(run, "export")
    row = {"name": NAMES.get(kind, kind), "fields": fields, "run": run, "how": how, "steps": summary["steps"],
           "validations": summary["epochs"], "best_val_loss": summary["best_val_loss"],
           "val_ppl": perplexity(summary["best_val_loss"]), "train_seconds": summary["seconds"],
           "greedy": quality.score(export, test, 1), "beam4": quality.score(export, test, 4)}
    differences = recipe_differences(read_json(os.path.join(run, "config.json")), wanted.to_dict())
    if differences:
        row["differs_from_recipe"] = differences  # {"section.field": [the run's, this invocation's]}
    if summary["steps"] != budget.steps:
        echo(f"{corpus}, {kind}: {run} trained {summary['steps']:,} steps; the budget is {budget.steps:,}")
    return row


def scored_pairs(corpus, budget):
    """The corpus's test pairs (all, or `budget.test_sentences` of them spread over the split)."""
    import spa
    from tfattn.runs.config import CorpusConfig
    from tfattn.runs.corpus import load_splits

    test = load_splits(CorpusConfig(**CORPORA[corpus]))[0]["test"]
    return spa.spread(test, budget.test_sentences) if budget.test_sentences else test


def draw_bleu_by_length(by_length, title, path):
    """`plot_bleu_by_length` of `{model name: {bucket: {"bleu", "n"}}}`, saved at `path`."""
    from tfattn.plot import plot_bleu_by_length, save_figure

    figure = plot_bleu_by_length(by_length)
    figure.axes[0].set_title(title)
    return str(save_figure(figure, path))


def draw_alignment(export, source, title, path):
    """The greedy translation of `source` by `export`, and its attention drawn at `path` (a figure of
    6.5 x 6 inches, small enough for the docs)."""
    import tensorflow as tf
    from matplotlib.figure import Figure

    from tfattn.plot import plot_attention, save_figure
    from tfattn.serving.translator import load

    out = load(export).signatures["translate"](text=tf.constant([source]))
    figure = Figure(figsize=(6.5, 6), layout="constrained")
    ax = figure.subplots()
    plot_attention(out["attention"][0], out["input_tokens"][0], out["tokens"][0], ax=ax, title=title)
    ax.tick_params(labelsize=8)
    return {"translation": out["text"][0].numpy().decode("utf-8"), "figure": str(save_figure(figure, path))}


def length_part(corpus, models, figures):
    """Fig. 2's analogue: BLEU by length of the `length` kinds, the figure (beam 4), the trends and the
    attention models' gaps to the baseline."""
    shown = [kind for kind in LENGTH_KINDS if kind in models]
    if not shown:
        return None
    by = {decoding: {kind: models[kind][decoding]["bleu_by_length"] for kind in shown}
          for decoding in ("greedy", "beam4")}
    title = f"{corpus} ({DIRECTIONS[corpus]}): BLEU, beam 4"
    figure = draw_bleu_by_length({NAMES[kind]: by["beam4"][kind] for kind in shown}, title,
                                 figure_path(figures, "bleu-by-length", corpus))
    return {"figure": figure, "min_n": MIN_N,
            **{f"trend_{d}": {kind: length_trend(by[d][kind]) for kind in shown} for d in by},
            **{f"gap_to_baseline_{d}": gaps(by[d]) if "none" in shown else None for d in by}}


def alignment_part(corpus, models, test, figures):
    """Fig. 3's analogue: each attention model's weights over one long test sentence."""
    pair = long_sentence(test)
    shown = [kind for kind in ALIGNMENT_KINDS if kind in models]
    if pair is None or not shown:
        return None
    drawn = {kind: draw_alignment(os.path.join(models[kind]["run"], "export"), pair[0], f"{NAMES[kind]}, {corpus}",
                                  figure_path(figures, "alignment", corpus, kind)) for kind in shown}
    return {"source": pair[0], "reference": pair[1], "words": len(pair[0].split()), "models": drawn}


def table4_part(models):
    """Luong et al. Table 4's analogue: `{range: {score: {...}}}` for the cells that ran."""
    table = {}
    for range_, score, kind in table4_cells():
        if kind in models:
            row = models[kind]
            table.setdefault(range_, {})[score] = {"kind": kind, "val_ppl": row["val_ppl"], "steps": row["steps"],
                                                   "bleu_greedy": row["greedy"]["bleu"],
                                                   "bleu_beam4": row["beam4"]["bleu"]}
    return table


def reproduce(corpus, kinds, budget, args):
    """Everything the parts ask for on one corpus: its models' rows, then each part."""
    from tfattn.training.trainer import DivergedError

    test = scored_pairs(corpus, budget)
    models, diverged = {}, {}
    for kind in kinds:
        try:
            models[kind] = model_row(corpus, kind, budget, args, test)
        except DivergedError as error:  # its run keeps its last good state; the other models go on
            echo(f"{corpus}, {kind}: {error}")
            diverged[kind] = str(error)
        gc.collect()  # the model, its trainer and the loaded exports, before the next one is made
    found = {"direction": DIRECTIONS[corpus], "n_test": len(test), "models": models, "diverged": diverged}
    if "length" in args.parts:
        found["length"] = length_part(corpus, models, args.figures)
    if "alignment" in args.parts:
        found["alignment"] = alignment_part(corpus, models, test, args.figures)
    if "table4" in args.parts:
        found["table4"] = table4_part(models)
    return found


def main():
    args = parse_args()
    problem = path_problem(args)
    if problem:  # before anything is trained
        sys.exit(f"reproduce.py: error: {problem}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from machine import matmul_gflops
    from tfattn import files

    budget = budget_of(args)
    kinds = kinds_of(args)
    estimate = None if args.tiny else estimate_seconds(args.corpora, kinds, budget.steps, budget.every)
    result = {"benchmark": "reproduce", "matmul_gflops": round(matmul_gflops(), 1), "tiny": args.tiny,
              "full": args.full, "budget": dataclasses.asdict(budget), "parts": args.parts,
              "estimated_seconds": estimate, "corpora": {}}
    unused = [kind for kind in args.kinds or () if kind not in kinds]
    if unused:
        echo(f"--kinds {','.join(unused)}: not needed by --parts {','.join(args.parts)}, left out")
    if estimate is not None:
        echo(f"{len(kinds)} models on {', '.join(args.corpora)}, {budget.steps:,} steps each: about "
             f"{duration_text(estimate)} on 2 cores (a run found in {args.out} or --reuse is only scored)")
    result["tables"] = os.path.join(args.out, "tables.md")
    for corpus in args.corpora:
        result["corpora"][corpus] = reproduce(corpus, kinds, budget, args)
        # After each corpus, so that the scores so far outlive a failure with the next one.
        files.write_json(os.path.join(args.out, "reproduce.json"), result)
        with open(result["tables"], "w", encoding="utf-8") as f:
            f.write(markdown(result))
    print(files.strict_json(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
