"""LiteRT export against the SavedModel export: file sizes and one-sentence greedy latency.

Trains a dates model (Luong, the demo's sizes unless given) for `--seconds`, writes both exports,
and times every sentence of `--sentences` held-out dates alone, `--rounds` times each, through
ai-edge-litert's interpreter (the sentence tokenized ahead, as an app would before its call) and
through the SavedModel's `translate` signature (text in, the tokenizer inside). Prints one JSON
object: the sizes in bytes (the `.tflite` file; the SavedModel directory, its variables included),
p50 and p90 latency in ms of each, and the machine's fp32 matmul GFLOP/s.

Usage: python bench/litert_export.py [--units 256] [--seconds 60] [--sentences 200] [--rounds 3]
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from machine import matmul_gflops  # noqa: E402
from tfattn.data import dates  # noqa: E402
from tfattn.serving.litert import LiteRTTranslator, export_litert  # noqa: E402
from tfattn.training.trainer import TrainConfig, fit  # noqa: E402


def trained_translator(units, seconds):
    train, _ = dates.make_corpus(30000, 0)
    source = tfattn.Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
    target = tfattn.Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
    model = tfattn.make_model(tfattn.ModelConfig(attention="luong", embedding_dim=64, units=units),
                              source.vocab_size, target.vocab_size)
    data = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=64))
    fit(model, data, TrainConfig(epochs=30, time_budget=seconds), quiet=True)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))


def size_of(path):
    """Bytes of a file, or of every file under a directory."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)


def best_times(call, inputs, rounds):
    """Each input's fastest time through `call`, in ms."""
    best = np.full(len(inputs), np.inf)
    call(inputs[0])  # warm up
    for _ in range(rounds):
        for i, x in enumerate(inputs):
            start = time.perf_counter()
            call(x)
            best[i] = min(best[i], time.perf_counter() - start)
    return best * 1000


def summary(ms):
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p90_ms": round(float(np.percentile(ms, 90)), 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    translator = trained_translator(args.units, args.seconds)
    _, test = dates.make_corpus(0, args.sentences)
    texts = [s for s, _ in test]
    with tempfile.TemporaryDirectory() as root:
        saved, lite = os.path.join(root, "saved"), os.path.join(root, "lite")
        tfattn.export(translator, saved)
        export_litert(translator, lite)
        runner = LiteRTTranslator(lite)
        ids = [runner.source_tokenizer(tf.constant([t])).numpy() for t in texts]  # (1, t_in) each
        litert_ms = best_times(runner.translate_ids, ids, args.rounds)
        translate = tf.saved_model.load(saved).signatures["translate"]
        saved_ms = best_times(lambda t: translate(text=tf.constant([t]))["text"].numpy(), texts, args.rounds)
        sizes = {"tflite_bytes": size_of(os.path.join(lite, "model.tflite")), "saved_model_bytes": size_of(saved)}
    print(json.dumps({"benchmark": "litert", "model": f"luong, {args.units} units, dates", "sentences": len(texts),
                      "rounds": args.rounds, **sizes, "litert": summary(litert_ms), "saved_model": summary(saved_ms),
                      "matmul_gflops": round(matmul_gflops(), 1)}))


if __name__ == "__main__":
    main()
