"""Train-step time of two source trees of tfattn, side by side: fresh processes, alternating.

To tell whether a change to the code slowed training, on a VM whose speed drifts by 20% within an
hour: each round times every model in each tree in turn, one process per tree and model, on the
same batches (drawn evenly from one spa-eng epoch: word level, 5,000-word vocabularies, batch 64),
and reports per model the time ratio after/before of each round and their median.

Usage: python bench/trees.py BEFORE_TREE AFTER_TREE [--rounds 5] [--steps 40]
(a tree is a directory holding `tfattn/`, for example `git worktree add ../old COMMIT`). Prints one
JSON object. Each tree's `tfattn` must have `tfattn.model.make_model`, and either
`tfattn.training.step` or the older `tfattn.train` for the train step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

MODELS = {"bahdanau": ("bahdanau", True), "luong-feed": ("luong", True), "luong-nofeed": ("luong", False)}
# name: (attention, input feeding); units 256

CHILD = r"""
import json, sys, time
tree, batches, attention, feeding, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
sys.path.insert(0, tree)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # not an installed tfattn
import keras, numpy as np, tensorflow as tf
import tfattn
assert tfattn.__file__.startswith(tree), tfattn.__file__
from tfattn.model import ModelConfig, make_model
try:
    from tfattn.training.step import make_optimizer, make_train_step
    from tfattn.training.trainer import TrainConfig
except ImportError:
    from tfattn.train import TrainConfig, make_optimizer, make_train_step
data = np.load(batches)
pairs = [(tf.constant(data[f"s{i}"]), tf.constant(data[f"t{i}"])) for i in range(len(data.files) // 2)]
keras.utils.set_random_seed(0)
model = make_model(ModelConfig(attention=attention, input_feeding=feeding, embedding_dim=256, units=256),
                   int(data["vocab"][0]), int(data["vocab"][1]))
step = make_train_step(model, make_optimizer(TrainConfig(learning_rate=1e-3)))
for source, target in pairs[:5]:  # trace and warm up
    step(source, target)
start = time.perf_counter()
for source, target in pairs[5:]:
    out = step(source, target)
float(out["loss"])
print(json.dumps({"s_per_step": (time.perf_counter() - start) / (len(pairs) - 5)}))
"""


def write_batches(path, steps):
    """`steps + 5` batches spread over one training epoch of spa-eng, as NumPy arrays."""
    import numpy as np
    import spa

    spa.quiet_tensorflow()
    from tfattn.data.pipeline import DataConfig, make_dataset

    source, target = spa.tokenizers(5000, 40)
    epoch = list(make_dataset(spa.splits()["train"], source, target, DataConfig(batch_size=64)))
    chosen = spa.spread(epoch, steps + 5)
    arrays = {f"{k}{i}": x.numpy() for i, pair in enumerate(chosen) for k, x in zip("st", pair)}
    np.savez(path, vocab=np.array([source.vocab_size, target.vocab_size]), **arrays)


def time_step(tree, batches, attention, feeding, steps):
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), batches, attention,
                          "1" if feeding else "0", str(steps)], capture_output=True, text=True, check=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return json.loads(out.stdout.strip().splitlines()[-1])["s_per_step"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per process")
    args = parser.parse_args()
    from machine import matmul_gflops

    with tempfile.TemporaryDirectory() as tmp:
        batches = os.path.join(tmp, "batches.npz")
        write_batches(batches, args.steps)
        ratios = {name: [] for name in MODELS}
        for _ in range(args.rounds):
            for name, (attention, feeding) in MODELS.items():
                before, after = (time_step(tree, batches, attention, feeding, args.steps)
                                 for tree in (args.before, args.after))
                ratios[name].append(round(after / before, 3))
    print(json.dumps({"benchmark": "trees", "matmul_gflops": round(matmul_gflops(), 1), "rounds": args.rounds,
                      "steps": args.steps, "time_ratio_after_before": {
                          k: {"median": statistics.median(v), "rounds": v} for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
