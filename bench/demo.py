"""Benchmark of the offline demo: exact match on 1,000 held-out dates after <= 90 s of training.

Trains each attention style with the demo's own settings, exports, reloads the export, and scores
it. Prints one JSON object. Usage: python bench/demo.py [--seeds 0 1 2]
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from machine import matmul_gflops  # noqa: E402

from tfattn.demo import DemoConfig, run  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--attention", nargs="+", default=["bahdanau", "luong"])
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as out_dir:
        for attention in args.attention:
            for seed in args.seeds:
                summary = run(DemoConfig(attention=attention, seed=seed, out_dir=out_dir), quiet=True, show=0)
                runs.append({k: summary[k] for k in ("attention", "exact_match", "seconds", "final_loss")}
                            | {"seed": seed})
    print(json.dumps({"benchmark": "demo", "matmul_gflops": round(matmul_gflops(), 1),
                      "n_test": DemoConfig().n_test, "train_seconds_limit": 90, "runs": runs}))


if __name__ == "__main__":
    main()
