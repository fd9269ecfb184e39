"""XLA and the two tiers, side by side in one process: seconds per train step on spa-eng.

For each of `bench/tiers.py`'s three models (Bahdanau, Luong with and without input feeding;
embeddings and units 256, 5,000-word vocabularies, batch 64), four steps are made from one seed:
the reference tier, the reference tier compiled by XLA (`make_train_step(jit_compile=True)`), the
fast tier, and the fast tier compiled by XLA. All four train on the same batches, padded to a
multiple of 8 (`DataConfig.pad_to_multiple`, as `--jit-compile` does), `--shapes` batches of
different shapes spread across an epoch. Each step is first called once per shape (tracing, and
for XLA compiling: reported as `first_calls_s`), then the four alternate over `--rounds` rounds of
`--steps` steps; `s_per_step` is the median round. Also reports how many batch shapes one epoch
has with and without the padding (what XLA compiles for). Prints one JSON object.

Usage: python bench/xla.py [--steps 16] [--rounds 3] [--shapes 4] [--only bahdanau,luong-feed]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops  # noqa: E402
from tiers import MODELS, paired, vocab_sizes  # noqa: E402

spa.quiet_tensorflow()

import keras  # noqa: E402

from tfattn.data.pipeline import DataConfig, make_dataset  # noqa: E402
from tfattn.model import ModelConfig, make_model  # noqa: E402
from tfattn.training.step import make_optimizer, make_train_step  # noqa: E402
from tfattn.training.trainer import TrainConfig  # noqa: E402

VARIANTS = {"reference": (False, False), "reference_xla": (False, True), "fast": (True, False),
            "fast_xla": (True, True)}


def distinct_shapes(batches):
    return sorted({(tuple(s.shape), tuple(t.shape)) for s, t in batches})


def one_per_shape(batches, n):
    """`n` batches of distinct shapes, spread from the epoch's shortest to its longest."""
    first = {}
    for source, target in batches:
        first.setdefault((source.shape[1], target.shape[1]), (source, target))
    shapes = sorted(first, key=lambda s: s[0] * s[1])
    return [first[s] for s in spa.spread(shapes, n)]


def train_steps(kind, batches, steps, rounds):
    runs, first_calls = {}, {}
    for name, (accel, jit) in VARIANTS.items():
        keras.utils.set_random_seed(0)
        model = make_model(ModelConfig(**MODELS[kind]), *vocab_sizes())
        step = make_train_step(model, make_optimizer(TrainConfig(learning_rate=1e-3), accel), accel=accel,
                               jit_compile=jit)
        start = time.perf_counter()
        for source, target in batches:
            step(source, target)["loss"].numpy()
        first_calls[name] = round(time.perf_counter() - start, 1)
        runs[name] = lambda step=step: [step(*batches[i % len(batches)])["loss"].numpy() for i in range(steps)]
    seconds = paired(runs, rounds)
    return {"s_per_step": {n: round(s / steps, 4) for n, s in seconds.items()}, "first_calls_s": first_calls}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="timed train steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", type=int, default=4, help="batch shapes the timed steps cycle through")
    parser.add_argument("--only", help="comma-separated models of: " + ", ".join(MODELS))
    args = parser.parse_args()
    gflops = matmul_gflops()
    source, target = spa.tokenizers(5000, 40)
    pairs = spa.splits()["train"]
    epoch = {m: list(make_dataset(pairs, source, target, DataConfig(batch_size=64, seed=1, pad_to_multiple=m)))
             for m in (1, 8)}
    batches = one_per_shape(epoch[8], args.shapes)
    kinds = args.only.split(",") if args.only else list(MODELS)
    table = {kind: train_steps(kind, batches, args.steps, args.rounds) for kind in kinds}
    over = lambda d, a, b: round(d[a] / d[b], 2)  # noqa: E731
    print(json.dumps({
        "benchmark": "xla", "matmul_gflops": round(gflops, 1), "rounds": args.rounds, "steps": args.steps,
        "batch_shapes": [[list(s.shape), list(t.shape)] for s, t in batches],
        "shapes_per_epoch": {"unpadded": len(distinct_shapes(epoch[1])), "pad_to_multiple_8": len(distinct_shapes(epoch[8]))},
        "train": table,
        "reference_xla_over_fast": {k: over(v["s_per_step"], "reference_xla", "fast") for k, v in table.items()},
        "fast_over_fast_xla": {k: over(v["s_per_step"], "fast", "fast_xla") for k, v in table.items()},
        "reference_over_reference_xla": {k: over(v["s_per_step"], "reference", "reference_xla")
                                         for k, v in table.items()},
    }))


if __name__ == "__main__":
    main()
