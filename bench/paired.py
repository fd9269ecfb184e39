"""Paired timings of several SavedModels on spa-eng TEST: single sentences and greedy batches of 64.

On a VM whose speed drifts by ±20% from minute to minute, separate runs cannot tell a 5% change.
Here, for every TEST sentence (and every batch of 64), each export is called in turn, in a shuffled
order, over several rounds; each call's time is divided by the first export's time for the same
input in the same round, and the median of these ratios is reported. Prints one JSON object; per
export: `p50_ms` (median over sentences of the fastest round), `sentences_per_s` (TEST over the sum
of each batch's fastest round), and `time_ratio_*` (below 1: faster than the first export).

Each export's serving signature must take one string tensor `[batch]` and return `text` (ours and
the 2021 tutorial's do). `NAME=EXPORT@SIGNATURE` times another signature of that kind instead, such as
our exports' `translate_text`.

With `--beam K`, batches of 64 are also decoded by beam search of width K through each export's
`translate_beam` signature (tfattn exports only), reported as `beam_K_batch_64`.

Usage: python bench/paired.py [--threads 2,1] [--rounds 5] [--sentences 150] [--beam 4] NAME=EXPORT[@SIGNATURE] ...
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from decode import serving_fn  # noqa: E402  (also quiets TensorFlow)
from machine import matmul_gflops  # noqa: E402
import numpy as np  # noqa: E402
import spa  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfattn.cli import set_threads, threads  # noqa: E402


def paired_times(fns, inputs, rounds, seed=0):
    """`{name: (rounds, len(inputs)) seconds}`, every input given to every function in turn."""
    times = {name: np.zeros((rounds, len(inputs))) for name in fns}
    order, rng = list(fns), random.Random(seed)
    for r in range(rounds):
        for i, x in enumerate(inputs):
            rng.shuffle(order)
            for name in order:
                start = time.perf_counter()
                fns[name](tf.constant(x))["text"].numpy()
                times[name][r, i] = time.perf_counter() - start
    return times


def summary(times, figure):
    """Per export: `figure(fastest round per input, seconds)` and the median over rounds and inputs
    of its time over the first export's."""
    first = next(iter(times))
    return {name: {**figure(t.min(axis=0)), f"time_ratio_to_{first}": round(float(np.median(t / times[first])), 3)}
            for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", metavar="NAME=EXPORT")
    parser.add_argument("--threads", type=threads, metavar="INTER,INTRA",
                        help="TensorFlow's inter-op and intra-op thread counts (default: TensorFlow's)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=150,
                        help="TEST sentences timed alone, spread evenly over the split")
    parser.add_argument("--beam", type=int, default=0, help="also time beam search of this width (default: off)")
    args = parser.parse_args()
    if args.threads:
        set_threads(args.threads)
    import tensorflow_text  # noqa: F401  (the text ops of the exports)

    fns = {name: serving_fn(*export_and_signature(spec))
           for name, spec in (spec.split("=", 1) for spec in args.exports)}
    texts = [source for source, _ in spa.splits()["test"]]
    singles = [[text] for text in spa.spread(texts, args.sentences)]
    batches = [texts[i : i + 64] for i in range(0, len(texts), 64)]
    for fn in fns.values():  # warm up
        for x in batches[:2] + singles[:10]:
            fn(tf.constant(x))
    one = paired_times(fns, singles, args.rounds)
    many = paired_times(fns, batches, args.rounds)
    per_second = lambda best: {"sentences_per_s": round(len(texts) / float(best.sum()), 1)}  # noqa: E731
    figures = {
        "benchmark": "paired", "matmul_gflops": round(matmul_gflops(), 1), "rounds": args.rounds,
        "threads": dict(zip(("inter_op", "intra_op"), args.threads or (0, 0))),
        "single_sentence": summary(one, lambda best: {"p50_ms": round(1000 * float(np.median(best)), 2)}),
        "greedy_batch_64": summary(many, per_second),
    }
    if args.beam:
        beams = {name: beam_fn(export_and_signature(spec)[0], args.beam)
                 for name, spec in (spec.split("=", 1) for spec in args.exports)}
        figures[f"beam_{args.beam}_batch_64"] = summary(paired_times(beams, batches, args.rounds), per_second)
    print(json.dumps(figures))


def export_and_signature(spec):
    """`"EXPORT@SIGNATURE"` -> `(EXPORT, SIGNATURE)`; `"EXPORT"` -> `(EXPORT, "serving_default")`."""
    path, at, signature = spec.rpartition("@")
    if not at or "/" in signature:
        return spec, "serving_default"
    return path, signature


def beam_fn(path, width):
    """`fn(text)` for a tfattn export's `translate_beam` signature with beam `width` and alpha 0.6."""
    signature = tf.saved_model.load(path).signatures["translate_beam"]
    return lambda text: signature(text=text, beam_width=tf.constant(width), length_penalty=tf.constant(0.6))


if __name__ == "__main__":
    main()
