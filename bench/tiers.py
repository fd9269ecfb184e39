"""The fast tier against the reference tier, side by side in one process, on spa-eng.

Training: seconds per train step of `make_train_step(accel=True)` and `accel=False` for three models
(Bahdanau, Luong with and without input feeding; embeddings and units 256, 5,000-word vocabularies,
batch 64), the two tiers' steps alternating over the same batches. Decoding: a Bahdanau model
trained for `--train-seconds` by the fast tier is translated by both tiers' `Translator`: greedy
batches of 64 over the TEST split, beam 4 batches of 64 over its first 512 sentences, and single
sentences sampled evenly across TEST (the split is ordered by length), the tiers alternating.
Every figure is `reference time / fast time`, the median over rounds. Also counts the TEST sentences
the two tiers translate differently. Prints one JSON object.

Usage: python bench/tiers.py [--steps 30] [--rounds 3] [--train-seconds 120]
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
from tfattn.decoding.loop import DecodeConfig  # noqa: E402
from tfattn.model import ModelConfig, make_model  # noqa: E402
from tfattn.serving.translator import Translator  # noqa: E402
from tfattn.training.step import make_optimizer, make_train_step  # noqa: E402
from tfattn.training.trainer import TrainConfig, Trainer  # noqa: E402

MODELS = {"bahdanau": dict(attention="bahdanau"), "luong-feed": dict(attention="luong"),
          "luong-nofeed": dict(attention="luong", input_feeding=False)}


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(fns, rounds):
    """`{name: median seconds}` of each function, the functions alternating within every round."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def train_steps(kind, batches, steps, rounds):
    """Seconds per step of each tier on the same model kind and batches."""
    runs = {}
    for accel in (True, False):
        keras.utils.set_random_seed(0)
        model = make_model(ModelConfig(**MODELS[kind]), *vocab_sizes())
        step = make_train_step(model, make_optimizer(TrainConfig(learning_rate=1e-3), accel), accel=accel)
        for source, target in batches[:3]:  # trace and warm up
            step(source, target)
        runs["fast" if accel else "reference"] = lambda step=step: [
            step(s, t)["loss"].numpy() for s, t in batches[3:3 + steps]]
    seconds = paired(runs, rounds)
    return {name: round(s / steps, 4) for name, s in seconds.items()}


def vocab_sizes():
    source, target = spa.tokenizers(5000, 40)
    return source.vocab_size, target.vocab_size


def trained_translators(seconds):
    source, target = spa.tokenizers(5000, 40)
    keras.utils.set_random_seed(0)
    model = make_model(ModelConfig(attention="bahdanau", dropout=0.2), source.vocab_size, target.vocab_size)
    data = make_dataset(spa.splits()["train"], source, target, DataConfig(batch_size=64))
    Trainer(model, TrainConfig(learning_rate=2e-3, time_budget=seconds, decay_to_budget=True, epochs=100),
            quiet=True).fit(data)
    config = DecodeConfig(max_length=40)
    return {"fast": Translator(model, source, target, config, stored_weights=True),
            "reference": Translator(model, source, target, config, accel=False)}


def in_batches(translate, texts, batch=64):
    return [text for i in range(0, len(texts), batch) for text in translate(texts[i:i + batch])["text"]]


def decoding(translators, texts, rounds, singles=60):
    every = spa.spread(texts, singles)  # across the split, short to long
    for t in translators.values():  # trace every signature first
        t(texts[:2]), t(texts[:1]), t.beam(texts[:2])
    figures = {
        "greedy_batch64": paired({n: lambda t=t: in_batches(t, texts) for n, t in translators.items()}, rounds),
        "beam4_batch64": paired({n: lambda t=t: in_batches(t.beam, texts[:512]) for n, t in translators.items()},
                                rounds),
        "single_sentence": paired({n: lambda t=t: [t([x]) for x in every] for n, t in translators.items()}, rounds),
    }
    outputs = {n: in_batches(t, texts) for n, t in translators.items()}
    differ = sum(a != b for a, b in zip(outputs["fast"], outputs["reference"]))
    return figures, differ


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed train steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-seconds", type=float, default=120.0)
    args = parser.parse_args()
    gflops = matmul_gflops()
    source, target = spa.tokenizers(5000, 40)
    data = make_dataset(spa.splits()["train"], source, target, DataConfig(batch_size=64, seed=1))
    batches = spa.spread(list(data), args.steps + 3)  # across an epoch: its first batches are its shortest
    training = {kind: train_steps(kind, batches, args.steps, args.rounds) for kind in MODELS}
    translators = trained_translators(args.train_seconds)
    texts = [s for s, _ in spa.splits()["test"]]
    figures, differ = decoding(translators, texts, args.rounds)
    ratio = lambda d: round(d["reference"] / d["fast"], 2)  # noqa: E731
    print(json.dumps({
        "benchmark": "tiers", "matmul_gflops": round(gflops, 1), "rounds": args.rounds,
        "train_s_per_step": training, "train_reference_over_fast": {k: ratio(v) for k, v in training.items()},
        "decode_seconds": {k: {n: round(s, 3) for n, s in v.items()} for k, v in figures.items()},
        "decode_reference_over_fast": {k: ratio(v) for k, v in figures.items()},
        "test_sentences": len(texts), "greedy_translations_differing": differ,
    }))


if __name__ == "__main__":
    main()
