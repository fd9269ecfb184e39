"""One module of the package against its own version at a git revision: train steps, paired in one process.

Builds two identical models (same seed, same config) and one train step each, as `tfattn train` makes
it. The step "new" runs the working tree's module; the step "old" runs the functions of that module's
source at `--base`, loaded into a namespace of its own and swapped into the module before each of
its calls, so that both trace and run their own version (a module the package reads through its
attributes, as `tfattn.accel.loops` is read; a name imported by value elsewhere is not swapped).
The two take turns over the same batches, spread over a spa-eng epoch: `--rounds` rounds of four
chunks, the order flipped each round. Prints one JSON object: each side's seconds per step and the
median of the chunk-by-chunk ratios new / old (below 1: the working tree is faster).

Usage: python bench/train_pair.py [--base HEAD] [--module tfattn.accel.loops] [--units 1024]
    [--precision float32] [--model '{"attention": "bahdanau"}'] [--rounds 3]
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import types

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402

spa.quiet_tensorflow()

import numpy as np  # noqa: E402
from train_throughput import config_for, train_step_for  # noqa: E402

from tfattn.data.pipeline import DataConfig, make_dataset  # noqa: E402
from tfattn.training.precision import resolve_precision  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def functions(namespace):
    """The module-level functions of a namespace (a module or a dict), by name."""
    items = vars(namespace).items() if isinstance(namespace, types.ModuleType) else namespace.items()
    return {k: v for k, v in items if isinstance(v, types.FunctionType) and not k.startswith("__")}


def old_functions(module_name, base):
    """The functions of `module_name`'s source at git revision `base`, in a namespace of their own."""
    path = module_name.replace(".", "/") + ".py"
    source = subprocess.check_output(["git", "-C", ROOT, "show", f"{base}:{path}"], text=True)
    namespace = {"__name__": module_name + "@" + base}
    exec(compile(source, f"{base}:{path}", "exec"), namespace)  # noqa: S102  (the repository's own code)
    return functions(namespace)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the git revision of the old side (default: HEAD)")
    parser.add_argument("--module", default="tfattn.accel.loops", help="the module compared")
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--precision", default="float32", choices=("float32", "mixed_bfloat16", "auto"))
    parser.add_argument("--model", default='{"attention": "bahdanau"}', help="ModelConfig fields, as JSON")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    precision = resolve_precision(args.precision)
    module = importlib.import_module(args.module)
    sides = {"new": functions(module), "old": old_functions(args.module, args.base)}

    source_tok, target_tok = spa.tokenizers(5000, 40)
    data = list(make_dataset(spa.splits()["train"], source_tok, target_tok, DataConfig(batch_size=64)))
    batches = spa.spread(data, 60 if args.units <= 256 else 24)  # over the whole epoch
    n = len(batches)
    fields = json.loads(args.model)
    c = config_for(fields, 256, args.units)
    steps = {side: train_step_for(c, source_tok.vocab_size, target_tok.vocab_size, precision) for side in sides}

    def run(side, part):
        for name, function in sides[side].items():
            setattr(module, name, function)
        start = time.perf_counter()
        for source, target in part:
            out = steps[side](source, target)
        out["loss"].numpy()
        return time.perf_counter() - start

    for side in sides:  # trace every batch shape on each side
        run(side, batches)
    seconds = {side: [] for side in sides}
    chunks = [batches[i::4] for i in range(4)]
    for r in range(args.rounds):
        for chunk in chunks:
            for side in (("new", "old") if r % 2 == 0 else ("old", "new")):
                seconds[side].append(run(side, chunk))
    ratios = [a / b for a, b in zip(seconds["new"], seconds["old"])]
    print(json.dumps({"benchmark": "train_pair", "base": args.base, "module": args.module, "units": args.units,
                      "precision": precision, "model": fields, "batch_size": 64,
                      **{f"{side}_s_per_step": round(sum(s) / (args.rounds * n), 4) for side, s in seconds.items()},
                      "new_over_old_median": round(float(np.median(ratios)), 3),
                      "ratios": [round(x, 3) for x in ratios]}))


if __name__ == "__main__":
    main()
