"""Two workers against one: the cost of the all-reduce over loopback (`tfattn.training.distributed`).

Three rows, each a `Trainer` in processes of their own on the same global batches (spa-eng, word
level, 5,000-word vocabularies, Bahdanau units 256, as bench/train_throughput.py):

    one_worker_two_cores   one process on two cores, no strategy (TensorFlow's default threads)
    one_worker_one_core    one process pinned to one core, one intra-op and one inter-op thread
    two_workers            two processes pinned to one core each (one thread each), with
                           MultiWorkerMirroredStrategy over 127.0.0.1: each trains on its half of
                           every global batch, and they all-reduce the gradients

Each row trains `--warmup` steps (tracing), then `--steps` timed ones, and reports the chief's
non-padding target tokens per second of those (the global batch's tokens: the loop's own
`tokens_per_s`).

The global batch is 1,024 sentences, about 7,000 target tokens: the size of batch a run spread over
workers trains with (Vaswani et al. 2017 train on batches of about 25,000 target tokens). Each step
all-reduces the whole gradient, about 22 MB for this model whatever the batch, so the smaller the
batch, the larger the all-reduce's share: `--batch-size 64` shows the other end. The rows alternate, `--rounds` times; the JSON gives each round's figure, the
medians, and two ratios: two_workers / one_worker_one_core (the target is 1.7 or more) and
two_workers / one_worker_two_cores. The machine's fp32 matmul GFLOP/s is measured in the same run.

    python bench/distributed.py                                   # about 10 minutes on 2 cores
    python bench/distributed.py --corpus dates --units 16 --embedding-dim 8 --steps 3 --warmup 2 --rounds 1
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

ROWS = ("one_worker_two_cores", "one_worker_one_core", "two_workers")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("spa", "dates"), default="spa",
                        help="spa-eng (word level) or generated dates (character level) (default: spa)")
    parser.add_argument("--attention", choices=("bahdanau", "luong"), default="bahdanau")
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--embedding-dim", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024, help="the global batch (default: 1024)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per row and round (default: 15)")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the timed ones (default: 3)")
    parser.add_argument("--rounds", type=int, default=3, help="times the three rows alternate (default: 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a row's process: its settings as JSON
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit(f"needs two cores; this process may use {cores}")
    with tempfile.TemporaryDirectory() as tmp:
        batches, vocab, padding = write_batches(args, os.path.join(tmp, "batches.npz"))
        from machine import matmul_gflops

        gflops = matmul_gflops()
        figures = {row: [] for row in ROWS}
        for _ in range(args.rounds):
            for row in ROWS:
                figures[row].append(run_row(row, args, batches, vocab, cores[:2]))
                print(json.dumps({row: figures[row][-1]}), file=sys.stderr)
    medians = {row: statistics.median(values) for row, values in figures.items()}
    print(json.dumps({
        "benchmark": "distributed", "matmul_gflops": round(gflops, 1), "corpus": args.corpus,
        "attention": args.attention, "units": args.units, "embedding_dim": args.embedding_dim,
        "global_batch_size": args.batch_size, "vocab_sizes": vocab, "padding_fraction": round(padding, 4),
        "steps": args.steps, "rounds": args.rounds,
        "nonpad_target_tokens_per_s": {row: [round(v) for v in values] for row, values in figures.items()},
        "median": {row: round(v) for row, v in medians.items()},
        "two_workers_over_one_worker_one_core": round(medians["two_workers"] / medians["one_worker_one_core"], 3),
        "two_workers_over_one_worker_two_cores": round(medians["two_workers"] / medians["one_worker_two_cores"], 3),
    }))


def write_batches(args, path):
    """Writes `warmup + steps` global batches, spread over an epoch, to `path`; returns
    `(path, [source vocabulary, target vocabulary], padding fraction of the timed batches)`."""
    import spa

    spa.quiet_tensorflow()
    from tfattn.data.pipeline import DataConfig, make_dataset

    if args.corpus == "spa":
        pairs, (source, target) = spa.splits()["train"], spa.tokenizers(5000, 40)
    else:
        from tfattn.data import dates
        from tfattn.data.text import Tokenizer

        pairs = [(text, iso) for text, iso in dates.generate(20000, seed=0)]
        source, target = (Tokenizer.adapt([p[i] for p in pairs], level="char", max_length=40) for i in (0, 1))
    data = list(make_dataset(pairs, source, target, DataConfig(batch_size=args.batch_size)))
    data = spa.spread(data, args.warmup + args.steps)  # from all of the epoch (bucketed: short ones first)
    arrays = {f"{side}{i}": np.asarray(batch[k]) for i, batch in enumerate(data) for k, side in enumerate("st")}
    np.savez(path, **arrays)
    timed = [arrays[f"t{i}"][:, 1:] for i in range(args.warmup, len(data))]
    padding = 1 - sum(int((t != 0).sum()) for t in timed) / sum(t.size for t in timed)
    return path, [source.vocab_size, target.vocab_size], padding


def run_row(row, args, batches, vocab, cores):
    """The row's non-padding target tokens per second (of its chief), from processes started here
    and ended here, whatever happens."""
    settings = {"batches": batches, "vocab": vocab, "attention": args.attention, "units": args.units,
                "embedding_dim": args.embedding_dim, "warmup": args.warmup, "steps": args.steps}
    if row == "one_worker_two_cores":
        plan = [{**settings, "cores": cores, "one_thread": False}]
    elif row == "one_worker_one_core":
        plan = [{**settings, "cores": cores[:1], "one_thread": True}]
    else:
        from tfattn.training.distributed import local_cluster  # imports TensorFlow: only here

        plan = [{**settings, "cores": [core], "one_thread": True, "tf_config": config}
                for core, config in zip(cores, local_cluster(2))]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs = []
    try:
        for child_settings in plan:
            procs.append(subprocess.Popen([sys.executable, __file__, "--child", json.dumps(child_settings)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        outputs = [proc.communicate(timeout=3600) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    for proc, (out, err) in zip(procs, outputs):
        if proc.returncode != 0:
            sys.exit(f"{row} failed: {err[-3000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])["tokens_per_s"]


def child(settings):
    """One process of a row: pinned to its cores before TensorFlow starts, trains `warmup` then
    `steps` steps, prints `{"tokens_per_s"}` of the timed ones."""
    os.sched_setaffinity(0, settings["cores"])
    if "tf_config" in settings:
        os.environ["TF_CONFIG"] = settings["tf_config"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    if settings["one_thread"]:  # before TensorFlow starts (the strategy starts it)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    from tfattn.training import distributed

    strategy = distributed.make_strategy("multiworker" if "tf_config" in settings else "default")
    import keras
    from tfattn.model import ModelConfig, ensure_built, make_model
    from tfattn.training.trainer import TrainConfig, Trainer

    arrays = np.load(settings["batches"])
    batches = [(arrays[f"s{i}"], arrays[f"t{i}"]) for i in range(len(arrays.files) // 2)]
    spec = (tf.TensorSpec([None, None], tf.int32),) * 2
    epochs = {1: batches[: settings["warmup"]], 2: batches[settings["warmup"]:]}  # tracing, then timed

    def dataset(epoch):
        return tf.data.Dataset.from_generator(lambda: iter(epochs[epoch]), output_signature=spec)

    keras.utils.set_random_seed(0)
    config = ModelConfig(attention=settings["attention"], embedding_dim=settings["embedding_dim"],
                         units=settings["units"], max_source_length=40, max_target_length=40)
    with distributed.scope(strategy):
        model = ensure_built(make_model(config, *settings["vocab"]))
    trainer = Trainer(model, TrainConfig(epochs=2, learning_rate=1e-3), quiet=True, strategy=strategy)
    history = trainer.fit(dataset)
    print(json.dumps({"tokens_per_s": history["tokens_per_s"][1], "steps": trainer.step}))


if __name__ == "__main__":
    main()
