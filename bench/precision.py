"""Training speed under each precision, side by side in one process, on spa-eng (or, with --tiny, dates).

For the three units-256 models of `bench/tiers.py` (Bahdanau, Luong with and without input feeding;
5,000-word vocabularies, batch 64), one train step per setting over the same batches, the settings
alternating within every round: float32 on the fast tier (the default), float32 on the reference
tier, and mixed_bfloat16 and mixed_float16 (which train on the reference tier,
`tfattn.training.precision.tier_for`). Reports seconds per step (median over rounds), non-padding
target tokens per second, each setting's time over float32 reference's (below 1: faster), and the
CPU flags that decide what 16-bit arithmetic costs here (avx512_bf16, amx_bf16, avx512_fp16).
Prints one JSON object.

Usage: python bench/precision.py [--steps 30] [--rounds 3] [--tiny]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops  # noqa: E402

spa.quiet_tensorflow()

import keras  # noqa: E402

from tfattn.data.pipeline import DataConfig, make_dataset  # noqa: E402
from tfattn.model import ModelConfig, make_model  # noqa: E402
from tfattn.training.precision import precision_scope, tier_for  # noqa: E402
from tfattn.training.step import make_optimizer, make_train_step  # noqa: E402
from tfattn.training.trainer import TrainConfig  # noqa: E402

MODELS = {"bahdanau": dict(attention="bahdanau"), "luong-feed": dict(attention="luong"),
          "luong-nofeed": dict(attention="luong", input_feeding=False)}
SETTINGS = {"float32-fast": ("float32", True), "float32-reference": ("float32", False),
            "mixed_bfloat16": ("mixed_bfloat16", None), "mixed_float16": ("mixed_float16", None)}
CPU_FLAGS = ("avx512_bf16", "amx_bf16", "avx512_fp16", "avx512f", "avx2")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return {}
    return {flag: flag in flags for flag in CPU_FLAGS}


def make_step(kind, size, precision, accel, vocab):
    keras.utils.set_random_seed(0)
    with precision_scope(precision):
        model = make_model(ModelConfig(embedding_dim=size, units=size, **MODELS[kind]), *vocab)
    config = TrainConfig(learning_rate=1e-3, precision=precision)
    accel = tier_for(precision, accel)
    return make_train_step(model, make_optimizer(config, accel), accel=accel)


def run_model(kind, size, batches, rounds, vocab):
    """Median seconds per step of every setting over `batches`, the settings alternating."""
    steps = {name: make_step(kind, size, *setting, vocab) for name, setting in SETTINGS.items()}
    for step in steps.values():  # trace and warm up
        for source, target in batches[:2]:
            step(source, target)
    times, tokens = {name: [] for name in steps}, sum(int((t[:, 1:] != 0).numpy().sum()) for _, t in batches)
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for source, target in batches:
                step(source, target)["loss"].numpy()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["float32-reference"]
    return {name: {"s_per_step": round(m / len(batches), 4), "nonpad_target_tokens_per_s": round(tokens / m),
                   "time_ratio_to_float32_reference": round(m / base, 3)} for name, m in median.items()}


def data(tiny, steps):
    if tiny:
        from tfattn.data import dates
        from tfattn.data.text import Tokenizer

        train, _ = dates.make_corpus(64 * steps, 10)
        source = Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
        target = Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
        size = 16
    else:
        source, target = spa.tokenizers(5000, 40)
        train, size = spa.splits()["train"], 256
    batches = list(make_dataset(train, source, target, DataConfig(batch_size=64)))
    return spa.spread(batches, steps), (source.vocab_size, target.vocab_size), size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="batches timed per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the dates corpus and units 16: checks the script runs")
    args = parser.parse_args()
    batches, vocab, size = data(args.tiny, args.steps)
    models = {kind: run_model(kind, size, batches, args.rounds, vocab) for kind in MODELS}
    print(json.dumps({"benchmark": "precision", "matmul_gflops": round(matmul_gflops(), 1), "units": size,
                      "batch_size": 64, "steps": len(batches), "rounds": args.rounds, "cpu_flags": cpu_flags(),
                      "models": models}))


if __name__ == "__main__":
    main()
