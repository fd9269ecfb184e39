"""Decoding and serving on spa-eng, through the loaded SavedModel as a server would call it.

Reports sentences/s for greedy and beam 4 at batch 64 over the TEST split (three passes of each, in
alternation, with beam's share of greedy as the median of the passes' ratios), single-sentence greedy
latency p50/p99, cold start (load + first call, in a fresh process), the export's size on disk,
BLEU of beam 4 and greedy, and padding invariance: how many TEST sentences translate differently
alone and inside a batch of the longest TEST sentences. Prints one JSON object.

TensorFlow's threads: the figures at the top level are with its defaults (each op may use every
core). Under the key "one_thread_per_op", the speed figures again, measured in a fresh process set
up as a server on a small CPU would be (`--threads 2,1`: two ops at a time, one thread each; TF
Serving's `--tensorflow_inter_op_parallelism=2 --tensorflow_intra_op_parallelism=1`), with the
share of TEST sentences it translates as the default process does.

With `--peer EXPORT`, another system's SavedModel is timed in the same process, interleaved with
ours (greedy batch 64 over TEST and single sentences, alternating, several rounds), so the two are
compared on the same machine at the same time: its serving signature must take one string tensor
`[batch]` and return `text` (as the 2021 TensorFlow tutorial's export does). The peer's export is
made outside this repository. The comparison is under the key "peer" (and again under
"one_thread_per_op").

A run directory is measured through its `export/` as it was written when the run ended, by the
code of that day. With `--reexport`, the run's best checkpoint is exported again by this code into a
temporary directory, and that export is measured (the key "export" names it), so that a change to
the decoding code is measured without training again.

Usage: python bench/decode.py --model RUN_OR_EXPORT_DIR [--reexport] [--peer EXPORT]
(the model: e.g. the run of bench/quality.py)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops  # noqa: E402

spa.quiet_tensorflow()

import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfattn.cli import find_export, set_threads, threads  # noqa: E402
from tfattn.runs.export import export_run  # noqa: E402
from tfattn.serving.translator import load  # noqa: E402

BEAM = {"beam_width": 4, "length_penalty": 0.6}  # made tensors when used: thread settings come first
COLD_START = """
import sys, time
t0 = time.perf_counter()
import tensorflow as tf, tensorflow_text  # noqa: F401
t1 = time.perf_counter()
translate = tf.saved_model.load(sys.argv[1]).signatures["translate"]
translate(text=tf.constant(["¿Dónde está la estación?"]))["text"].numpy()
print(time.perf_counter() - t1, t1 - t0)
"""


def translate_all(fn, texts, batch, **inputs):
    inputs = {k: tf.constant(v) for k, v in inputs.items()}
    out = []
    for i in range(0, len(texts), batch):
        out.extend(fn(text=tf.constant(texts[i : i + batch]), **inputs)["text"].numpy())
    return [t.decode("utf-8") for t in out]


def throughput(fn, texts, **inputs):
    translate_all(fn, texts[:128], 64, **inputs)  # warm up
    start = time.perf_counter()
    hyps = translate_all(fn, texts, 64, **inputs)
    return len(texts) / (time.perf_counter() - start), hyps


def greedy_and_beam(greedy, beam, texts, rounds=3):
    """Sentences/s of greedy and beam 4 at batch 64, each the median of `rounds` passes over `texts`,
    the two in alternation; beam's share of greedy is the median of the rounds' ratios, so that the
    VM's drift between passes cancels. Also returns the last round's translations of each."""
    rates, shares, hyps = {"greedy": [], "beam": []}, [], {}
    for _ in range(rounds):
        for name, fn, inputs in (("greedy", greedy, {}), ("beam", beam, BEAM)):
            rate, hyps[name] = throughput(fn, texts, **inputs)
            rates[name].append(rate)
        shares.append(rates["beam"][-1] / rates["greedy"][-1])
    return ({"greedy_sentences_per_s": round(float(np.median(rates["greedy"])), 1),
             "beam4_sentences_per_s": round(float(np.median(rates["beam"])), 1),
             "beam4_share_of_greedy": round(float(np.median(shares)), 3), "speed_rounds": rounds},
            hyps["greedy"], hyps["beam"])


def single_sentence_times(fn, texts):
    """Seconds per call of `fn` on each of `texts` alone."""
    times = []
    for text in texts:
        start = time.perf_counter()
        fn(text=tf.constant([text]))["text"].numpy()
        times.append(time.perf_counter() - start)
    return times


def percentiles_ms(times):
    return {"p50_ms": round(1000 * float(np.percentile(times, 50)), 2),
            "p99_ms": round(1000 * float(np.percentile(times, 99)), 2)}


def latency(fn, texts, n=300):
    """p50 and p99 of `n` sentences spread evenly over `texts`, each translated alone."""
    return percentiles_ms(single_sentence_times(fn, spa.spread(texts, n)))


def padding_differences(fn, texts, **inputs):
    """Sentences whose translation alone differs from the one inside a batch of long sentences."""
    inputs = {k: tf.constant(v) for k, v in inputs.items()}
    longest = sorted(texts, key=len)[-3:]
    differ = 0
    for text in texts:
        alone = fn(text=tf.constant([text]), **inputs)["text"].numpy()[0]
        batched = fn(text=tf.constant([longest[0], text, longest[1], longest[2]]), **inputs)["text"].numpy()[1]
        differ += int(alone != batched)
    return differ


def cold_start(path):
    out = subprocess.run([sys.executable, "-c", COLD_START, path], capture_output=True, text=True, check=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout.split()
    return {"load_and_first_call_s": round(float(out[0]), 2), "import_tensorflow_s": round(float(out[1]), 2)}


def size_mb(path):
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return round(total / 1e6, 1)


def measure(path, sources, refs, speed_only=False):
    """Every figure of one export (only the speed figures if `speed_only`); also returns its greedy
    translations."""
    signatures = load(path).signatures
    greedy, beam = signatures["translate"], signatures["translate_beam"]
    rates, greedy_hyps, beam_hyps = greedy_and_beam(greedy, beam, sources)
    result = {"export": path, **rates, "greedy_latency": latency(greedy, sources), "cold_start": cold_start(path)}
    if speed_only:
        return result, greedy_hyps
    bleu = lambda hyps: round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, 2)  # noqa: E731
    result.update({
        "export_mb": size_mb(path), "bleu_greedy": bleu(greedy_hyps), "bleu_beam4": bleu(beam_hyps),
        "padding_differences_greedy": padding_differences(greedy, sources),
        "padding_differences_beam4": padding_differences(beam, sources, **BEAM),
    })
    return result, greedy_hyps


def serving_fn(path, signature="serving_default"):
    """`fn(text)` for an export's signature with one string input, whatever its name (ours, or a
    peer's); by default its serving signature."""
    signature = tf.saved_model.load(path).signatures[signature]
    (name,) = signature.structured_input_signature[1]
    return lambda text: signature(**{name: text})


def against_peer(ours, peer, texts, rounds=5, singles=60):
    """Greedy batch-64 sentences/s (median of `rounds` passes over `texts`) and single-sentence
    latency (`rounds * singles` sentences, spread over `texts`) of two signatures, measured in
    alternation."""
    fns = {"ours": ours, "peer": peer}
    rates, times = {n: [] for n in fns}, {n: [] for n in fns}
    sample = spa.spread(texts, rounds * singles)
    for fn in fns.values():
        translate_all(fn, texts[:128], 64)  # warm up
    for r in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            translate_all(fn, texts, 64)
            rates[name].append(len(texts) / (time.perf_counter() - start))
            times[name] += single_sentence_times(fn, sample[r * singles : (r + 1) * singles])
    out = {n: {"greedy_sentences_per_s": round(float(np.median(rates[n])), 1),
               "greedy_latency": percentiles_ms(times[n])} for n in fns}
    out["greedy_ratio"] = round(out["ours"]["greedy_sentences_per_s"] / out["peer"]["greedy_sentences_per_s"], 2)
    out["rounds"] = rounds
    return out


def one_thread_per_op(path, hyps, peer=None):
    """The speed figures in a fresh process with `--threads 2,1` (with the `peer` comparison if one is
    given), and how many translations match."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "hyps.json")
        command = [sys.executable, __file__, "--model", path, "--threads", "2,1", "--speed-only", out]
        run = subprocess.run(command + (["--peer", peer] if peer else []),
                             capture_output=True, text=True, check=True,
                             # (the environment too, for its own cold-start process)
                             env={**os.environ, "TF_NUM_INTEROP_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "1"})
        with open(out, encoding="utf-8") as f:
            other = json.load(f)
    result = json.loads(run.stdout)
    result["greedy_same_as_default"] = round(float(np.mean([a == b for a, b in zip(hyps, other)])), 4)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a run or export directory of a spa-eng model")
    parser.add_argument("--reexport", action="store_true",
                        help="export the run (--model must be a run directory) again with this code, into a "
                             "temporary directory, and measure that instead of the run's export/")
    parser.add_argument("--threads", type=threads, metavar="INTER,INTRA",
                        help="TensorFlow's inter-op and intra-op thread counts for this process (default: "
                             "TensorFlow's); given, only this setting is measured")
    parser.add_argument("--peer", metavar="EXPORT",
                        help="also time this SavedModel (serving signature: one string input, output "
                             "'text') in alternation with ours")
    parser.add_argument("--speed-only", metavar="HYPS_JSON",
                        help="measure speed only, and write the greedy translations to this file")
    args = parser.parse_args()
    if args.threads:
        set_threads(args.threads)
    if args.reexport and not os.path.isfile(os.path.join(args.model, "config.json")):
        parser.error(f"--reexport needs a run directory (with config.json). Received: --model {args.model}")
    with tempfile.TemporaryDirectory() as tmp:
        path = export_run(args.model, os.path.join(tmp, "export")) if args.reexport else find_export(args.model)
        run(args, path)


def run(args, path):
    """Every figure of the export at `path` (see the module docstring); prints the JSON."""
    test = spa.splits()["test"]
    sources, refs = [s for s, _ in test], [t for _, t in test]
    result, hyps = measure(path, sources, refs, speed_only=bool(args.speed_only))
    if args.reexport:
        result["export"] = f"(temporary, exported again from {args.model}) {path}"
    if args.peer:
        result["peer"] = {"export": args.peer,
                          **against_peer(load(path).signatures["translate"], serving_fn(args.peer), sources)}
    threads_used = {"inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "intra_op": tf.config.threading.get_intra_op_parallelism_threads()}  # 0: TensorFlow's default
    if args.speed_only:
        with open(args.speed_only, "w", encoding="utf-8") as f:
            json.dump(hyps, f)
        print(json.dumps({"threads": threads_used, **result}))
        return
    result = {"benchmark": "decode", "matmul_gflops": round(matmul_gflops(), 1), "n_test": len(test),
              "threads": threads_used, **result}
    if not args.threads:
        result["one_thread_per_op"] = one_thread_per_op(path, hyps, args.peer)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
