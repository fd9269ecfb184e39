"""Translation quality on spa-eng after a fixed training time (default 15 minutes on this machine).

Trains Spanish -> English on the TRAIN split (embedding 256, units 256) through `tfattn.training.runs`, the
code behind `tfattn train`, restores the best checkpoint by validation loss, exports it, then scores
greedy and beam-4 translations of the TEST split with `tfattn.evaluate` (sacrebleu's BLEU and chrF,
lowercased, 13a tokenization) against the untouched English references. Also reports peak resident
memory. Prints one JSON object.

Every model kind of the package has a row (`--model KIND`, see `KINDS`), and so has each idea of
issue 44 tried on a kind (`ROWS`: label smoothing, tied embeddings, WordPiece, bfloat16, warm-up and
peak rate, post-norm, checkpoint averaging); `--attention` and the other model flags still describe
a Bahdanau or Luong model by hand. Every row trains in float32 unless it says otherwise. BLEU is also given by source
length (`{bucket: {"bleu", "n"}}`, as `tfattn.evaluate.bleu_by_length` gives it) and for sentences of
16 words and more, the bottleneck's side (Bahdanau et al. 2014, Fig. 2).

`--max-steps N` also stops a row at step N: a faster row (bfloat16) against a slower one at the
slower one's steps, on the same learning-rate schedule.

Usage: python bench/quality.py [--model ROW | --attention bahdanau|luong [--input-feeding]] [--minutes 15]
       [--max-steps N] [--out DIR]
"""

import argparse
import dataclasses
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops  # noqa: E402

spa.quiet_tensorflow()

import tensorflow as tf  # noqa: E402

from tfattn import evaluate  # noqa: E402
from tfattn.data.pipeline import DataConfig  # noqa: E402
from tfattn.search import DecodeConfig  # noqa: E402
from tfattn.serving.translator import load  # noqa: E402
from tfattn.model import ModelConfig  # noqa: E402
from tfattn.runs.config import CorpusConfig, RunConfig, TokenizerConfig  # noqa: E402
from tfattn.runs.export import translate_texts  # noqa: E402
from tfattn.runs.train import train_run  # noqa: E402
from tfattn.training.trainer import TrainConfig  # noqa: E402
from tfattn.training.validation import ValidationConfig  # noqa: E402


# Each kind's ModelConfig fields beyond the shared embedding 256, units 256 and dropout; the rows of
# issue 28's table. The Transformers use 2 blocks of 4 heads and a feed-forward layer of 512, the
# paper's base model cut to this budget: with 3 blocks and 1024 (docs/performance.md) a step costs
# 2.7 times an RNN's, too few steps in 15 minutes to converge.
TRANSFORMER = dict(attention="transformer", heads=4, num_layers=2, ff_dim=512)
# The general score is scaled (`LuongAttention(scale=True)`): `luong-unscaled`, the paper's own,
# settles on the first source positions for every step on spa-eng (docs/performance.md).
KINDS = {
    "bahdanau": dict(attention="bahdanau"),
    "luong": dict(attention="luong", score="general", scale=True, input_feeding=True),
    "luong-unscaled": dict(attention="luong", score="general", scale=False, input_feeding=True),
    "luong-local-m": dict(attention="luong", score="general", scale=True, local="m", window=10),
    "luong-local-p": dict(attention="luong", score="general", scale=True, local="p", window=10),
    "cosine": dict(attention="luong", score="cosine"),
    "hard": dict(attention="luong", score="general", scale=True, hard=True),
    "multihead": dict(attention="luong", heads=4),
    "transformer-encoder": dict(attention="bahdanau", encoder="transformer", heads=4, num_layers=2, ff_dim=1024),
    "transformer": dict(TRANSFORMER, positions="sinusoidal"),
    "transformer-relative": dict(TRANSFORMER, positions="relative"),
    "none": dict(attention="none"),
}
# Training settings a kind needs beyond the shared recipe: the Transformers train at a lower peak
# rate. Every kind warms up as its RunConfig gives it (`runs.default_warmup`: 1,000 steps with
# multi-head attention, Vaswani et al. section 5.3; without it, multihead stays at the unigram loss).
TRAINING = {name: dict(learning_rate=1e-3) for name in ("transformer", "transformer-relative")}

# Issue 44's rows: one idea each, on the best kind (`multihead`), on `bahdanau`, or on the Transformer
# (its own model fields), compared with that kind's own row trained the same day. Each row: "kind"
# (the KINDS row it starts from), and what it changes: "model" (ModelConfig fields), "train"
# (TrainConfig fields), "run" (`recipe` arguments: tokenizer `level`, `checkpoint_every`,
# `average_checkpoints`, `size`, the embeddings' and units' size).
ROWS = {
    # Label smoothing, Vaswani et al. 2017 section 5.4: 0.1 on the label's complement.
    "multihead-ls": dict(kind="multihead", train=dict(label_smoothing=0.1)),
    "bahdanau-ls": dict(kind="bahdanau", train=dict(label_smoothing=0.1)),
    # Tied target embedding and output projection (Press & Wolf 2017); the recipe's embedding_dim and
    # units are both 256, as an RNN decoder's tying needs.
    "transformer-tied": dict(kind="transformer", model=dict(tie_embeddings=True)),
    "multihead-tied": dict(kind="multihead", model=dict(tie_embeddings=True)),
    "bahdanau-tied": dict(kind="bahdanau", model=dict(tie_embeddings=True)),
    # WordPiece against 5,000 words: the same 5,000 entries per side, so that the softmax costs the same
    # per token and only the unit changes (no [UNK]; sentences about a tenth longer).
    "multihead-wordpiece": dict(kind="multihead", run=dict(level="wordpiece")),
    "bahdanau-wordpiece": dict(kind="bahdanau", run=dict(level="wordpiece")),
    # The two that paid on multihead, together: tied embeddings over WordPiece.
    "multihead-tied-wordpiece": dict(kind="multihead", model=dict(tie_embeddings=True), run=dict(level="wordpiece")),
    # bfloat16 (mixed_bfloat16, on the fast tier): the time saved spent on more steps (the same model;
    # the cosine follows the clock, since how many steps fit in the budget is what is measured), or on
    # a larger model (units 384, embeddings too).
    "multihead-bf16": dict(kind="multihead", train=dict(precision="mixed_bfloat16", decay_to_budget=True)),
    "multihead-bf16-384": dict(kind="multihead", train=dict(precision="mixed_bfloat16", decay_to_budget=True),
                               run=dict(size=384)),
    # On Bahdanau, on its float32 row's schedule (a cosine over 10,000 steps): the steps bfloat16 saves
    # go further down the same cosine, so the two rows differ in precision and steps only (the cosine
    # over the clock cost 2-3 BLEU in either precision on the recipe, docs/performance.md).
    "bahdanau-bf16": dict(kind="bahdanau", train=dict(precision="mixed_bfloat16")),
    # The command line's recipe (multihead-wordpiece) in bfloat16, as `--precision auto` trains it on a
    # CPU with AMX: on the float32 row's schedule (a cosine over the same steps; with --max-steps, the
    # two compare at the same steps), and with the cosine over the clock (the time saved spent on steps).
    "multihead-wordpiece-bf16": dict(kind="multihead", train=dict(precision="mixed_bfloat16"),
                                     run=dict(level="wordpiece")),
    "multihead-wordpiece-bf16-budget": dict(kind="multihead", run=dict(level="wordpiece"),
                                            train=dict(precision="mixed_bfloat16", decay_to_budget=True)),
    # The recipe in float32 with the cosine over the clock, as `tfattn train --time-budget` schedules it.
    "multihead-wordpiece-budget": dict(kind="multihead", run=dict(level="wordpiece"), train=dict(decay_to_budget=True)),
    # The same with the cosine ending higher (Keras' alpha): at 30% of the peak, where the recipe's
    # cosine over 10,000 steps stood when its 15 minutes ended (28% at 7,509 steps), and at 10%.
    "multihead-wordpiece-budget30": dict(kind="multihead", run=dict(level="wordpiece"),
                                         train=dict(decay_to_budget=True, decay_alpha=0.3)),
    "multihead-wordpiece-budget10": dict(kind="multihead", run=dict(level="wordpiece"),
                                         train=dict(decay_to_budget=True, decay_alpha=0.1)),
    # Per-kind warm-up and peak rate (the recipe: 1,000 warm-up steps for multi-head attention, 2e-3).
    "multihead-warmup2000": dict(kind="multihead", train=dict(warmup_steps=2000)),
    "multihead-lr3e-3": dict(kind="multihead", train=dict(learning_rate=3e-3)),
    "multihead-lr1e-3": dict(kind="multihead", train=dict(learning_rate=1e-3)),
    "transformer-lr2e-3": dict(kind="transformer", train=dict(learning_rate=2e-3)),
    # Post-norm (Vaswani's LayerNorm(x + Sublayer(x))) against the package's pre-norm `transformer` row.
    "transformer-postnorm": dict(kind="transformer", model=dict(norm="post")),
    # Checkpoint averaging: a checkpoint every 500 steps and the last 5 averaged (the last 2,500 steps,
    # the cosine's tail); the average is exported when it validates better than the best checkpoint.
    "multihead-avg5": dict(kind="multihead", run=dict(checkpoint_every=500, average_checkpoints=5)),
    "bahdanau-avg5": dict(kind="bahdanau", run=dict(checkpoint_every=500, average_checkpoints=5)),
    # The same on the command line's recipe, against `multihead-wordpiece`.
    "multihead-wordpiece-avg5": dict(kind="multihead", run=dict(level="wordpiece", checkpoint_every=500,
                                                                average_checkpoints=5)),
}
for _name, _row in ROWS.items():
    KINDS[_name] = {**KINDS[_row["kind"]], **_row.get("model", {})}
    TRAINING[_name] = {**TRAINING.get(_row["kind"], {}), **_row.get("train", {})}


def model_config(args):
    if args.model:
        fields = KINDS[args.model]
    else:
        luong = {"score": args.score, "input_feeding": args.input_feeding} if args.attention == "luong" else {}
        fields = dict(attention=args.attention, **luong)  # (ModelConfig refuses Luong's options on other kinds)
    return recipe_model(fields, args.dropout, _run_settings(args).get("size", 256))


def _run_settings(args):
    """The row's `recipe` arguments beyond the model and training (`ROWS[...]["run"]`), or none."""
    return dict(ROWS.get(args.model, {}).get("run", {})) if args.model else {}


def recipe_model(fields, dropout, size=256):
    """The `ModelConfig` of a kind's `fields` in this recipe: embeddings and units of `size`, sentences of
    at most 40 tokens. bench/reproduce.py trains its models with it too."""
    embedding = {} if fields.get("attention") == "transformer" else {"embedding_dim": size}  # its own is units
    return ModelConfig(**fields, **embedding, units=size, dropout=dropout, max_source_length=40,
                       max_target_length=40)


def run_config(args):
    seconds = args.minutes * 60
    steps = int(seconds / args.step_seconds)  # the cosine decay ends about when the time does
    fields = {"learning_rate": args.learning_rate, "precision": "float32", **TRAINING.get(args.model, {})}
    # decay_to_budget: the cosine over the time budget, whatever the step rate; else over `steps`
    decay = {} if fields.get("decay_to_budget") else {"decay_steps": steps}
    train = TrainConfig(**fields, **decay, epochs=100, time_budget=seconds, max_steps=args.max_steps)
    run = {k: v for k, v in _run_settings(args).items() if k != "size"}
    return recipe(CorpusConfig(corpus=str(spa.SPA)), model_config(args), train, args.vocab_size, **run)


def recipe(corpus, model, train, vocab_size, level="word", checkpoint_every=2000, average_checkpoints=None, **run):
    """The `RunConfig` of this recipe: vocabularies of `vocab_size` entries per side (words, or `level`),
    sentences of at most 40 tokens, batches of 64, outputs of at most 40 tokens, a checkpoint every
    `checkpoint_every` steps and, with `average_checkpoints`, the last ones averaged at the end; in
    float32 unless `train` asks for another precision than "auto"; `run` sets other `RunConfig`
    fields. bench/reproduce.py trains its models with it too."""
    tokenizer = TokenizerConfig(level=level, max_tokens=vocab_size, max_length=40)
    if train.precision == "auto":  # rows compare on any machine: bfloat16 only where a row asks
        train = dataclasses.replace(train, precision="float32")
    validation = run.pop("validation", ValidationConfig())
    if average_checkpoints:
        validation = dataclasses.replace(validation, average_checkpoints=average_checkpoints)
    return RunConfig(
        corpus=corpus,
        source_tokenizer=tokenizer, target_tokenizer=tokenizer,
        model=model,
        data=DataConfig(batch_size=64),
        train=train,
        decode=DecodeConfig(max_length=40, ratio=2.0, extra=10),
        checkpoint_every=checkpoint_every,
        validation=validation,
        **run,
    )


def score(export_dir, pairs, beam):
    signature = load(export_dir).signatures["translate_beam" if beam > 1 else "translate"]
    inputs = {"beam_width": tf.constant(beam), "length_penalty": tf.constant(0.6)} if beam > 1 else {}
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    start = time.perf_counter()
    hyps = translate_texts(signature, sources, 64, **inputs)
    seconds = time.perf_counter() - start
    scores = evaluate.evaluate_texts(sources, hyps, refs)  # sacrebleu, lowercased; by length {bucket: {bleu, n}}
    long = [i for i, source in enumerate(sources) if len(source.split()) >= 16]
    long_bleu = evaluate.score([hyps[i] for i in long], [refs[i] for i in long])["bleu"]
    return {"bleu": scores["bleu"], "chrf": scores["chrf"], "decode_seconds": round(seconds, 1),
            "bleu_by_length": scores["bleu_by_length"],
            "bleu_16_plus": round(long_bleu, 2) if long else None, "n_16_plus": len(long),
            "examples": list(zip(sources[:3], hyps[:3]))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(KINDS),
                        help="a model kind or row (overrides --attention and its flags)")
    parser.add_argument("--attention", choices=("luong", "bahdanau"), default="bahdanau")
    parser.add_argument("--score", default="general")
    parser.add_argument("--input-feeding", action="store_true")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--vocab-size", type=int, default=5000, help="word vocabulary per side (the peer: 5,000)")
    parser.add_argument("--step-seconds", type=float, default=0.09, help="expected seconds per step")
    parser.add_argument("--max-steps", type=int, help="stop at this step too (to compare with a row at its steps)")
    parser.add_argument("--out", help="run directory (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="tfattn-quality-")
    config = run_config(args)
    summary = train_run(config, os.path.join(out, "run"), quiet=True, echo=lambda s: print(s, file=sys.stderr))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    test = spa.splits()["test"]
    result = {
        "benchmark": "quality", "matmul_gflops": round(matmul_gflops(), 1), "minutes": args.minutes,
        "model": args.model, "model_config": dataclasses.asdict(config.model),
        "steps": summary["steps"], "epochs": summary["epochs"], "best_val_loss": round(summary["best_val_loss"], 4),
        "padding_fraction": summary["padding_fraction"], "train_seconds": summary["seconds"],
        "peak_rss_mb_training": round(peak_mb), "n_test": len(test),
        "greedy": score(summary["export"], test, 1), "beam4": score(summary["export"], test, 4),
        "config": {"learning_rate": config.train.learning_rate, "warmup_steps": config.train.warmup_steps,
                   "dropout": args.dropout, "vocab_size": args.vocab_size, "precision": config.train.precision,
                   "label_smoothing": config.train.label_smoothing, "tokenizer": config.target_tokenizer.level,
                   "checkpoint_every": config.checkpoint_every, "max_steps": config.train.max_steps,
                   "average_checkpoints": config.validation.average_checkpoints},
        "averaged": summary.get("averaged"),
        "run": os.path.join(out, "run"),
    }
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
