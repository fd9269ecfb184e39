"""The training loop's own cost, beyond its train steps, in two source trees side by side.

Each round runs `tfattn train` of each tree in turn, in a fresh process per run, on the same
spa-eng pairs (`--max-pairs`, `--epochs`: a fixed number of steps; everything else the tree's
defaults: its validations, epoch-end and periodic saves, run lock, progress, summaries). The
process wraps the trainer's compiled train step to sum the seconds spent inside its calls (on a
CPU a call returns when its step is done), and reads the trainer's own training seconds (the
history's `seconds`: `fit`, validations included). It also sums the seconds of the epoch-end
validations (validation loss and, where the tree has it, BLEU on a fixed sample: work a run asks
for, whose share of the time it chooses with the sample's size). Two shares of the steps' own time:

    overhead           fit seconds / step seconds - 1: everything beyond the steps
    loop_overhead      (fit - validation seconds) / step seconds - 1: the loop's own bookkeeping
                       (saves, run lock, sums, host reads, progress), the share to keep under 3%

Reports per tree the median over rounds, and each round's figures. Prints one JSON object.

Usage: python bench/loop.py BEFORE_TREE AFTER_TREE [--rounds 2] [--max-pairs 120000] [--epochs 1]

The default is one epoch of all of spa-eng's TRAIN split (about 1,800 steps), the length of the
epochs of a `bench/quality.py` run: what an epoch's end costs is spread over as many steps as it
is in a real run.
(a tree is a directory holding `tfattn/`, for example `git worktree add ../old 5286e01`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402

CHILD = r"""
import json, os, sys, time
tree, out, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, tree)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # not an installed tfattn
import tfattn
assert tfattn.__file__.startswith(tree), tfattn.__file__
try:
    from tfattn.training import trainer as module
except ImportError:
    from tfattn import train as module
from tfattn import cli

try:  # imported before the patch below: its own `evaluate_loss` is counted through `fit`'s validation
    import tfattn.training.validation
except ImportError:
    pass

inside = {"seconds": 0.0, "calls": 0, "validation_s": 0.0}
made, made_fit = module.Trainer.__init__, module.Trainer.fit


def clocked(function):
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            inside["validation_s"] += time.perf_counter() - start
    return run


module.evaluate_loss = clocked(module.evaluate_loss)  # a validation dataset's loss


def fit_clocked(self, dataset, validation=None, *args, **kwargs):  # a validation function (BLEU too)
    return made_fit(self, dataset, clocked(validation) if callable(validation) else validation, *args, **kwargs)


module.Trainer.fit = fit_clocked

def init(self, *args, **kwargs):
    made(self, *args, **kwargs)
    step = self.train_step

    def timed(source, target):
        start = time.perf_counter()
        result = step(source, target)
        inside["seconds"] += time.perf_counter() - start
        inside["calls"] += 1
        return result

    self.train_step = timed

module.Trainer.__init__ = init
try:
    cli.main(["train", *argv, "--out", out, "--quiet"])
except SystemExit as stop:
    assert not stop.code, stop.code
with open(os.path.join(out, "history.json")) as f:
    fit = json.load(f)["seconds"]
print(json.dumps({"fit_s": fit, "step_s": inside["seconds"], "validation_s": inside["validation_s"],
                  "steps": inside["calls"]}))
"""


def run_tree(tree, argv):
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), os.path.join(tmp, "run"), *argv],
                             capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        if out.returncode:
            raise SystemExit(f"tfattn train failed in {tree}:\n{out.stderr[-3000:]}")
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["overhead"] = figures["fit_s"] / figures["step_s"] - 1.0
    figures["loop_overhead"] = (figures["fit_s"] - figures["validation_s"]) / figures["step_s"] - 1.0
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-pairs", type=int, default=120000, help="training pairs (batches of 64)")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    argv = ["--corpus", str(spa.SPA), "--max-pairs", str(args.max_pairs), "--epochs", str(args.epochs),
            "--attention", "bahdanau"]
    trees = {"before": args.before, "after": args.after}
    rounds = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            rounds[name].append(run_tree(tree, argv))
    median = lambda name, key: statistics.median(r[key] for r in rounds[name])  # noqa: E731
    print(json.dumps({
        "benchmark": "loop", "argv": argv, "rounds": args.rounds,
        "trees": {name: {"path": os.path.abspath(tree), "steps": rounds[name][0]["steps"],
                         "fit_s": round(median(name, "fit_s"), 2), "step_s": round(median(name, "step_s"), 2),
                         "validation_s": round(median(name, "validation_s"), 2),
                         "overhead": round(median(name, "overhead"), 4),
                         "loop_overhead": round(median(name, "loop_overhead"), 4),
                         "s_per_step": round(median(name, "step_s") / rounds[name][0]["steps"], 4),
                         "rounds": [{k: round(v, 4) for k, v in r.items()} for r in rounds[name]]}
                  for name, tree in trees.items()},
    }))


if __name__ == "__main__":
    main()
