"""Training speed in float32 and mixed_bfloat16, side by side in one process, on spa-eng (or, with --tiny, dates).

For each model (Bahdanau, Luong with and without input feeding; 5,000-word vocabularies, batch 64)
at each size (`--units`, default 256 and 1024: embeddings of 256), one train step per setting over
the same batches, the settings alternating within every round: float32 and mixed_bfloat16, both on
the fast tier (`tfattn.accel.seq2seq.choose` takes either), and with `--reference` both on the
reference tier too. Reports seconds per step (median over rounds), non-padding target tokens per
second, each setting's time over float32's (below 1: faster), the matmul GFLOP/s of both dtypes
measured alternately in the same run, the CPU flags that decide what bfloat16 costs here, and what
`--precision auto` picks on this machine (`tfattn.training.precision.AUTO`). Prints one JSON object.

Usage: python bench/precision.py [--steps 30] [--rounds 3] [--units 256,1024] [--models bahdanau] [--reference] [--tiny]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops_by_dtype  # noqa: E402

spa.quiet_tensorflow()

import keras  # noqa: E402

from tfattn.accel import seq2seq as fast  # noqa: E402
from tfattn.data.pipeline import DataConfig, make_dataset  # noqa: E402
from tfattn.model import ModelConfig, make_model  # noqa: E402
from tfattn.training.precision import auto_precision, cpu_flags, precision_scope  # noqa: E402
from tfattn.training.step import make_optimizer, train_step_on  # noqa: E402
from tfattn.training.trainer import TrainConfig  # noqa: E402

MODELS = {"bahdanau": dict(attention="bahdanau"), "luong-feed": dict(attention="luong"),
          "luong-nofeed": dict(attention="luong", input_feeding=False)}
# setting -> (precision, accel)
SETTINGS = {"float32": ("float32", True), "mixed_bfloat16": ("mixed_bfloat16", True)}
REFERENCE = {"float32-reference": ("float32", False), "mixed_bfloat16-reference": ("mixed_bfloat16", False)}


def make_step(kind, embedding, units, precision, accel, vocab):
    """A train step of `kind` made under `precision`, on the tier `choose` gives for `accel`, and that tier."""
    keras.utils.set_random_seed(0)
    with precision_scope(precision):
        model = make_model(ModelConfig(embedding_dim=embedding, units=units, **MODELS[kind]), *vocab)
    accel = fast.choose(accel, model, precision)
    config = TrainConfig(learning_rate=1e-3, precision=precision)
    return train_step_on(model, make_optimizer(config, accel), accel), accel


def run_model(kind, embedding, units, batches, rounds, vocab, settings):
    """Median seconds per step of every setting over `batches`, the settings alternating."""
    made = {name: make_step(kind, embedding, units, *setting, vocab) for name, setting in settings.items()}
    for step, _ in made.values():  # trace and warm up
        for source, target in batches[:2]:
            step(source, target)
    times, tokens = {name: [] for name in made}, sum(int((t[:, 1:] != 0).numpy().sum()) for _, t in batches)
    for _ in range(rounds):
        for name, (step, _) in made.items():
            start = time.perf_counter()
            for source, target in batches:
                step(source, target)["loss"].numpy()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["float32"]
    return {name: {"tier": "fast" if made[name][1] else "reference", "s_per_step": round(m / len(batches), 4),
                   "nonpad_target_tokens_per_s": round(tokens / m), "time_ratio_to_float32": round(m / base, 3)}
            for name, m in median.items()}


def data(tiny, steps):
    if tiny:
        from tfattn.data import dates
        from tfattn.data.text import Tokenizer

        train, _ = dates.make_corpus(64 * steps, 10)
        source = Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
        target = Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
    else:
        source, target = spa.tokenizers(5000, 40)
        train = spa.splits()["train"]
    batches = list(make_dataset(train, source, target, DataConfig(batch_size=64)))
    return batches, (source.vocab_size, target.vocab_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30,
                        help="batches timed per setting and round (units > 256: a third)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--units", default="256,1024", help="comma-separated sizes (default: 256,1024)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--reference", action="store_true", help="time both precisions on the reference tier too")
    parser.add_argument("--tiny", action="store_true", help="the dates corpus, units 16: checks the script runs")
    args = parser.parse_args()
    all_batches, vocab = data(args.tiny, args.steps)
    sizes = [16] if args.tiny else [int(u) for u in args.units.split(",")]
    settings = {**SETTINGS, **(REFERENCE if args.reference else {})}
    models = {}
    for units in sizes:
        batches = spa.spread(all_batches, args.steps if units <= 256 else max(5, args.steps // 3))
        embedding = units if args.tiny else 256
        for kind in args.models.split(","):
            models[f"{kind}-{units}"] = run_model(kind, embedding, units, batches, args.rounds, vocab, settings)
            print(json.dumps({f"{kind}-{units}": models[f"{kind}-{units}"]}), file=sys.stderr)
    precision, reason = auto_precision()
    print(json.dumps({"benchmark": "precision", "matmul_gflops": matmul_gflops_by_dtype(), "batch_size": 64,
                      "steps": args.steps, "rounds": args.rounds, "cpu_flags": cpu_flags(),
                      "auto": {"precision": precision, "reason": reason}, "models": models}))


if __name__ == "__main__":
    main()
