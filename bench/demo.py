"""Benchmark of the offline demo: exact match on 1,000 held-out dates, steps and seconds of training.

Runs `tfattn demo` (train with the demo's own settings, export, reload the export, score it) once
per attention style and seed, each in a fresh process as `make demo` does (when all ran in one
process, the Luong runs after the Bahdanau ones, which then trained for a time budget, all reached
it; the cause is not known). The demo trains by steps until its validation dates are read (at most
`DemoConfig().max_steps`). Prints one JSON object. Usage: python bench/demo.py [--seeds 0 1 2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from machine import matmul_gflops  # noqa: E402

from tfattn.demo import DemoConfig  # noqa: E402


def demo(attention, seed, out_dir):
    """One `tfattn demo` run in a fresh process; its JSON summary."""
    command = [sys.executable, "-m", "tfattn.cli", "demo", "--attention", attention, "--seed", str(seed),
               "--out-dir", out_dir, "--quiet"]
    out = subprocess.run(command, capture_output=True, text=True, check=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--attention", nargs="+", default=["bahdanau", "luong"])
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as out_dir:
        for attention in args.attention:
            for seed in args.seeds:
                summary = demo(attention, seed, out_dir)
                keys = ("attention", "exact_match", "errors_by_form", "steps", "validation_exact_match", "seconds",
                        "final_loss")
                runs.append({k: summary[k] for k in keys}
                            | {"seed": seed})
                print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "demo", "matmul_gflops": round(matmul_gflops(), 1),
                      "n_test": DemoConfig().n_test, "max_steps": DemoConfig().max_steps, "runs": runs}))


if __name__ == "__main__":
    main()
