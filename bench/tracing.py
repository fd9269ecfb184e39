"""What a first call costs in two source trees of tfattn, side by side: fresh processes, alternating.

A process that trains, translates or exports pays for tracing its functions once: the Python that
builds each graph, then TensorFlow's instantiation (optimizing and placing the graph) at the first
call. That is most of a short `tfattn train`, of `tfattn translate`'s start, and of every test that
builds a small model. Each round runs, for every kind, one process per tree in turn, which makes an
untrained dates model (units 32) and times: the reference-tier and fast-tier train steps (the trace,
the first call, the next call), a `Translator`'s `translate` (the trace, the first call), and an
export. Per figure: each round's after/before time ratio and their median.

Usage: python bench/tracing.py BEFORE_TREE AFTER_TREE [--rounds 2] [--kinds bahdanau,luong,multihead,transformer]
(a tree is a directory holding `tfattn/`, for example `git worktree add ../old COMMIT`). Prints one
JSON object.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

KINDS = {"bahdanau": dict(attention="bahdanau", embedding_dim=16), "luong": dict(attention="luong", embedding_dim=16),
         "multihead": dict(attention="luong", heads=4, embedding_dim=16), "transformer": dict(attention="transformer")}

CHILD = r"""
import json, os, sys, tempfile, time
tree, config = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, tree)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # not an installed tfattn
import keras, tensorflow as tf
import tfattn
assert tfattn.__file__.startswith(tree), tfattn.__file__
from tfattn.data import dates
from tfattn.data.text import Tokenizer
from tfattn.serving.translator import export
from tfattn.training.step import train_step_on

def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

train, _ = dates.make_corpus(3000, 200, seed=0)
source = Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
target = Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
keras.utils.set_random_seed(0)
model = tfattn.make_model(tfattn.ModelConfig(units=32, **config), source.vocab_size, target.vocab_size)
batch = next(iter(tfattn.make_dataset(train[:64], source, target, tfattn.DataConfig(batch_size=32))))
out = {}
for tier in ("reference", "fast") if config["attention"] != "transformer" else ("reference",):  # no fast Transformer
    step = train_step_on(model, keras.optimizers.Adam(1e-3), tier == "fast")
    out[f"{tier} step, trace"] = timed(lambda: step.get_concrete_function(*batch))
    out[f"{tier} step, first call"] = timed(lambda: step(*batch))
    out[f"{tier} step, next call"] = timed(lambda: step(*batch))
translator = tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))
out["translate, trace"] = timed(lambda: translator.translate.get_concrete_function())
out["translate, first call"] = timed(lambda: translator.translate(tf.constant(["5 march 2019"])))
out["export"] = timed(lambda: export(translator, os.path.join(tempfile.mkdtemp(), "export")))
print(json.dumps(out))
"""


def child(tree, kind):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), json.dumps(KINDS[kind])],
                          capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{tree} {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds takes {', '.join(KINDS)}. Received: {','.join(unknown)}")
    sys.path.insert(0, os.path.dirname(__file__))
    import machine

    rounds = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            rounds[kind].append({"before": child(args.before, kind), "after": child(args.after, kind)})
    result = {"benchmark": "tracing", "before": args.before, "after": args.after, "rounds": args.rounds,
              "matmul_gflops": machine.matmul_gflops_by_dtype(), "kinds": {}}
    for kind, runs in rounds.items():
        figures = {}
        for name in runs[0]["before"]:
            ratios = [r["after"][name] / r["before"][name] for r in runs]
            figures[name] = {"before_s": round(statistics.median(r["before"][name] for r in runs), 3),
                             "after_s": round(statistics.median(r["after"][name] for r in runs), 3),
                             "after_over_before": round(statistics.median(ratios), 3),
                             "rounds": [round(x, 3) for x in ratios]}
        result["kinds"][kind] = figures
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
