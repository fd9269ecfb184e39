"""Where one sentence's time goes: single-sentence greedy latency of an export against its lengths.

Every sentence of a sample spread evenly over spa-eng TEST (short to long) is translated alone,
`--rounds` times, and its fastest time is fitted by least squares as

    time = fixed + per_source_token * t_in + per_output_token * t_out

with `t_in` the source tokens the encoder read (`[START]` and `[END]` included) and `t_out` the
decoder steps taken (`length`, `[END]` included). Prints one JSON object: the three coefficients in
ms, the fit's R^2, and p50 latency by thirds of the sample (short, middle, long sentences).

`--signature` times another greedy signature with one string input: `translate_text` (the lengths
then come from the export's `translate`, called apart and not timed), or a peer's `serving_default`
whose `attention (batch, t_out, t_in)` gives them (the 2021 tutorial's export).

Usage: python bench/latency.py --export EXPORT [--signature translate] [--sentences 300] [--rounds 3]
       [--threads 2,1]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402

spa.quiet_tensorflow()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from decode import serving_fn  # noqa: E402
from machine import matmul_gflops  # noqa: E402
from tfattn.cli import set_threads, threads  # noqa: E402


def lengths(out):
    """`(t_in, t_out)` of one sentence from a signature's outputs: from ours' `input_tokens` and
    `length`, or from a peer's `attention (1, t_out, t_in)`; None when they hold neither."""
    if "length" in out:
        return int(tf.reduce_sum(tf.cast(out["input_tokens"][0] != b"", tf.int32))), int(out["length"][0])
    if "attention" in out:
        return int(out["attention"].shape[2]), int(out["attention"].shape[1])
    return None


def timed_lengths(fn, texts, rounds, measure=None):
    """`(seconds, t_in, t_out)` arrays: each text's fastest time alone through `fn(text)`, and its two
    lengths, from `fn`'s outputs or else from `measure(text)`'s (not timed)."""
    best = np.full(len(texts), np.inf)
    t_in, t_out = np.zeros(len(texts)), np.zeros(len(texts))
    for r in range(rounds):
        for i, text in enumerate(texts):
            start = time.perf_counter()
            out = fn(tf.constant([text]))
            out["text"].numpy()
            best[i] = min(best[i], time.perf_counter() - start)
            if r == 0:
                t_in[i], t_out[i] = lengths(out) or lengths(measure(tf.constant([text])))
    return best, t_in, t_out


def fit(seconds, t_in, t_out):
    """Least-squares `seconds ~ fixed + a t_in + b t_out`; coefficients in ms and R^2."""
    design = np.stack([np.ones_like(t_in), t_in, t_out], axis=1)  # (n, 3)
    coef, *_ = np.linalg.lstsq(design, seconds, rcond=None)
    residual = seconds - design @ coef
    r2 = 1.0 - float(residual @ residual) / float(((seconds - seconds.mean()) ** 2).sum())
    fixed, per_in, per_out = (round(1000 * float(c), 3) for c in coef)
    return {"fixed_ms": fixed, "per_source_token_ms": per_in, "per_output_token_ms": per_out, "r2": round(r2, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True)
    parser.add_argument("--signature", default="translate",
                        help="the greedy signature timed: translate (the default), translate_text, or a "
                             "peer's serving_default")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=threads, metavar="INTER,INTRA")
    args = parser.parse_args()
    if args.threads:
        set_threads(args.threads)
    import tensorflow_text  # noqa: F401  (the text ops of the export)

    fn = serving_fn(args.export, args.signature)
    measure = serving_fn(args.export, "translate") if args.signature == "translate_text" else None
    texts = spa.spread([s for s, _ in spa.splits()["test"]], args.sentences)
    for text in texts[:10]:  # warm up
        fn(tf.constant([text]))
    seconds, t_in, t_out = timed_lengths(fn, texts, args.rounds, measure)
    thirds = np.array_split(np.arange(len(texts)), 3)
    print(json.dumps({
        "benchmark": "latency", "matmul_gflops": round(matmul_gflops(), 1), "signature": args.signature,
        "sentences": len(texts),
        "threads": dict(zip(("inter_op", "intra_op"), args.threads or (0, 0))),
        "p50_ms": round(1000 * float(np.median(seconds)), 2), **fit(seconds, t_in, t_out),
        "mean_t_in": round(float(t_in.mean()), 1), "mean_t_out": round(float(t_out.mean()), 1),
        "p50_ms_by_third": [round(1000 * float(np.median(seconds[i])), 2) for i in thirds],
    }))


if __name__ == "__main__":
    main()
