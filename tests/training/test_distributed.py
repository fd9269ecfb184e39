"""Training under `tf.distribute` strategies (`tfattn.training.distributed`): two replicas train as one
device on the global batch, two workers over loopback train one run, and what is refused is said
in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_main
from processes import TRAIN_FLAGS, events, write_anki
from tfattn.training import distributed
from tfattn.training.distributed import DistributeConfig, is_chief, tf_config

CHILD = Path(__file__).with_name("mirrored_child.py")
CLIP = 0.3  # the child's clip norm


# -- two replicas on logical CPUs (in a process of their own) ---------------------------------------

def mirrored(tier):
    """The JSON that `mirrored_child.py TIER` prints (see there)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, str(CHILD), tier], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.long  # two processes each start TensorFlow and train: about a minute per tier, make test-long
@pytest.mark.parametrize("tier", ["reference", "fast"])
def test_two_replicas_train_as_one_device_on_the_global_batch(tier):
    result = mirrored(tier)
    one, two = result["one"], result["two"]
    assert result["replicas"] == 2 and len(two["losses"]) == len(one["losses"]) == 10
    assert result["differing"] == []  # each variable's two copies are equal to the bit after 10 steps
    # The first step's loss is the mean over the global batch's real tokens (NumPy, float64), not a
    # mean of the replicas' means: the child's batches give the two halves different token counts.
    assert two["losses"][0] == pytest.approx(two["first"], rel=1e-6)
    # Every step's loss and gradient norm, and the weights after 10 steps, are one device's on the
    # same global batches within float32 rounding; clipping acted, on the summed gradient's norm.
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
    np.testing.assert_allclose(two["norms"], one["norms"], rtol=1e-5)
    assert sum(norm > CLIP for norm in one["norms"]) >= 5
    assert result["weights"] < 1e-5
    # Adam hardly sees a gradient twice too large; SGD shows that the step's optimizer does not sum
    # the replicas' gradients again, where Keras' own does.
    assert result["sgd"] == {"keras": [0.0, 0.0], "without_sum": [0.5, 0.5]}
    # Keras' seed generators start each step alike on the replicas; each draws its own masks.
    assert result["dropout"] == {"masks_differ": True, "states_agree": True}
    refusals = result["refusals"]
    assert refusals["outside_scope"].startswith("The model's weights were not made in the strategy's scope")
    assert refusals["float16"].startswith("mixed_float16 trains with loss scaling, which the distributed step")
    assert refusals["too_late"].startswith("3 replicas on the CPU need 3 logical CPU devices, which TensorFlow")


def test_a_replicas_share_of_the_loss_is_its_token_sum_over_the_global_count():
    """`masked_loss(..., count)` of each half of a batch adds up to the whole batch's mean (both tiers)."""
    import tensorflow as tf

    from tfattn.accel import losses as fast
    from tfattn.model import masked_loss

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 3, 6)).astype("float32")  # (batch, t_out, vocab)
    labels = np.array([[1, 2, 0], [3, 0, 0], [4, 5, 1], [2, 3, 4]])  # 2 + 1 + 3 + 3 = 9 real tokens
    z = logits.astype("float64") - logits.max(-1, keepdims=True)
    token_loss = np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, labels[..., None], -1)[..., 0]
    for loss in (masked_loss, fast.masked_loss):
        halves = [float(loss(tf.constant(labels[rows]), tf.constant(logits[rows]), tf.constant(9.0)))
                  for rows in (slice(0, 2), slice(2, 4))]
        assert halves[0] == pytest.approx(token_loss[:2][labels[:2] != 0].sum() / 9, rel=1e-6)
        assert sum(halves) == pytest.approx(token_loss[labels != 0].mean(), rel=1e-6)
        assert float(loss(tf.constant(labels), tf.constant(logits))) == pytest.approx(sum(halves), rel=1e-6)


# -- two workers over loopback -------------------------------------------------------------------

def cluster(ports, index):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def train_together(flags, outs):
    """`tfattn train FLAGS --out OUT` in one worker process per `outs` on 127.0.0.1 (worker 0 the
    chief), all ended before this returns; their JSON summaries."""
    workers = []
    try:
        for out, config in zip(outs, distributed.local_cluster(len(outs))):
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": config}
            workers.append(subprocess.Popen([sys.executable, "-m", "tfattn.cli", "train", *flags, "--out", out],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        results = [worker.communicate(timeout=900) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    for worker, (out, err) in zip(workers, results):
        assert worker.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in results]


@pytest.mark.long  # two TensorFlow processes twice, a resumed run, an export restored and compared
def test_two_workers_train_one_run_that_restores_and_resumes_in_one_process(tmp_path, capsys):
    import shutil

    import tensorflow as tf

    import tfattn
    from tfattn.runs.directory import Run
    from tfattn.runs.config import RunConfig
    from tfattn.runs.train import train_run
    from tfattn.training.trainer import restore_weights

    write_anki(tmp_path / "d.txt", 200)
    run, elsewhere = str(tmp_path / "run"), str(tmp_path / "worker-out")
    flags = ["--corpus", str(tmp_path / "d.txt"), "--max-pairs", "160", "--epochs", "1", *TRAIN_FLAGS,
             "--dropout", "0", "--strategy", "multiworker"]  # 160 pairs in batches of 8: 20 steps
    chief, other = train_together(flags, [run, elsewhere])
    assert chief["steps"] == 20 and chief["run"] == run
    assert other == {"task": "worker 1", "chief": False, "steps": 20, "nonfinite_steps": 0}
    assert not os.path.exists(elsewhere)  # the worker wrote nothing
    assert [e["step"] for e in events(run, "checkpoint")] == [1, 11]  # the chief's, every 10 steps
    # The chief's best checkpoint, restored in this process (no strategy), translates as its export.
    config = RunConfig.from_dict(json.load(open(os.path.join(run, "config.json"))))
    assert config.distribute == DistributeConfig("multiworker")
    tokenizers = Run(run).tokenizers()
    model = tfattn.make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    restore_weights(model, tf.train.latest_checkpoint(os.path.join(run, "best")))
    texts = ["5 march 2019", "tue 12 jan 1999", "03/04/05"]
    want = tfattn.Translator(model, *tokenizers, config.decode)(texts)
    served = tf.saved_model.load(os.path.join(run, "export")).signatures["translate"](text=tf.constant(texts))
    assert [t.decode() for t in served["text"].numpy()] == [t.decode() for t in want["text"]]
    # A second epoch: the two workers resume the run (the worker reads its config.json and
    # tokenizers.json and starts from the state the chief restores), and a copy of it resumes in
    # this process without a strategy; they train alike within float32 rounding.
    alone = str(tmp_path / "alone")
    shutil.copytree(run, alone)
    chief, other = train_together(["--resume", "--epochs", "2"], [run, run])
    assert chief["steps"] == other["steps"] == 40
    summary = train_run(None, alone, resume=True, epochs=2, quiet=True, echo=lambda line: None,
                        distribute=DistributeConfig())
    assert summary["steps"] == 40
    together, by_one = (json.load(open(os.path.join(path, "history.json"))) for path in (run, alone))
    assert together["loss"][0] == by_one["loss"][0]  # the first epoch, the same history
    assert together["loss"][1] == pytest.approx(by_one["loss"][1], rel=1e-5)
    # The loss after the epoch's last step is looser than the epoch's mean: two workers add up their
    # halves of each gradient in another order than one process, and Adam's update, m / (sqrt(v) +
    # eps), turns a rounding difference in a weight's near-zero gradient into one of up to the
    # learning rate in that weight. Measured: 1.8713 against 1.8705 (4e-4 relative) on an Intel CPU
    # with AMX, the same on every run there; within 1e-5 on AMD. The second epoch's own change of
    # the validation loss is ten times that tolerance or more, so a run that lost it still fails.
    assert together["val_loss"][1] == pytest.approx(by_one["val_loss"][1], rel=2e-3)
    assert by_one["val_loss"][0] - by_one["val_loss"][1] > 10 * 2e-3 * by_one["val_loss"][1]
    assert json.load(open(os.path.join(alone, "config.json")))["distribute"]["strategy"] == "default"


# -- what is refused, in one line ------------------------------------------------------------------

EXAMPLE_WORKERS = {"worker": ["a:1", "b:2"]}


@pytest.mark.parametrize("raw, problem", [
    (None, "--strategy multiworker is configured by the environment variable TF_CONFIG, which is not set"),
    ("{cluster", "TF_CONFIG is not JSON (Expecting property name"),
    ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG has no object "cluster"'),
    (json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}),
     "TF_CONFIG has cluster.worker ['a'], not a list of \"host:port\" strings"),
    (json.dumps({"cluster": {**EXAMPLE_WORKERS, "ps": ["c:3"]}, "task": {"type": "worker", "index": 0}}),
     "TF_CONFIG names tasks ['ps']: only \"chief\" and \"worker\" train here"),
    (json.dumps({"cluster": EXAMPLE_WORKERS, "task": {"type": "chief", "index": 0}}),
     "TF_CONFIG has task {'type': 'chief', 'index': 0}: its \"type\" must be one of the cluster's ['worker']"),
    (json.dumps({"cluster": EXAMPLE_WORKERS, "task": {"type": "worker", "index": 2}}),
     "TF_CONFIG has task.index 2: an int from 0 to 1 is expected"),
])
def test_a_missing_or_malformed_tf_config_is_one_line_naming_it(raw, problem):
    with pytest.raises(ValueError) as error:
        tf_config({} if raw is None else {"TF_CONFIG": raw})
    message = str(error.value)
    assert message.startswith(problem) and "\n" not in message
    assert ('TF_CONFIG is expected to be a JSON object such as {"cluster": {"worker": ["host1:12345", '
            '"host2:12345"]}, "task": {"type": "worker", "index": 0}} (docs/training.md)') in message


@pytest.mark.parametrize("cluster_, task, chief", [
    (EXAMPLE_WORKERS, {"type": "worker", "index": 0}, True),
    (EXAMPLE_WORKERS, {"type": "worker", "index": 1}, False),
    ({**EXAMPLE_WORKERS, "chief": ["c:3"]}, {"type": "chief", "index": 0}, True),
    ({**EXAMPLE_WORKERS, "chief": ["c:3"]}, {"type": "worker", "index": 0}, False),
])
def test_the_chief_is_the_chief_task_or_else_worker_0(cluster_, task, chief):
    environ = {"TF_CONFIG": json.dumps({"cluster": cluster_, "task": task})}
    assert is_chief("multiworker", environ) is chief
    assert is_chief("mirrored", environ) and is_chief("default", environ)  # one process: the chief


@pytest.mark.parametrize("kwargs, message", [
    (dict(strategy="horovod"), "strategy must be one of ('default', 'mirrored', 'multiworker'). Received: "
                               "strategy='horovod'"),
    (dict(strategy="mirrored", replicas=0), "replicas must be an int >= 1 or None. Received: replicas=0"),
    (dict(strategy="multiworker", replicas=2), "replicas is the number of devices of the mirrored strategy"),
    (dict(strategy="multiworker", worker_timeout=0), "worker_timeout must be a number of seconds > 0. Received: "
                                                     "worker_timeout=0"),
    (dict(worker_timeout=float("inf")), "worker_timeout must be a number of seconds > 0"),
])
def test_a_bad_distribute_config_is_refused(kwargs, message):
    with pytest.raises(ValueError) as error:
        DistributeConfig(**kwargs)
    assert str(error.value).startswith(message)


def test_the_cli_knows_the_strategies_of_the_package():
    from tfattn import cli

    assert cli.STRATEGIES == distributed.STRATEGIES


def test_train_help_lists_strategy_and_replicas(capsys):
    status, out, _ = run_main(capsys, "train", "--help")
    assert status == 0
    assert "--strategy {default,mirrored,multiworker}" in out and "--replicas N" in out


def test_multiworker_without_tf_config_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    write_anki(tmp_path / "d.txt", 20)
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", str(tmp_path / "run"),
                              "--strategy", "multiworker", *TRAIN_FLAGS)
    assert status == 2
    assert err.startswith("tfattn: error: --strategy multiworker is configured by the environment variable "
                          "TF_CONFIG, which is not set; TF_CONFIG is expected to be a JSON object such as")
    assert len(err.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "run")


def test_a_local_cluster_is_one_valid_tf_config_per_worker_on_distinct_ports():
    configs = distributed.local_cluster(3)
    tasks = [tf_config({"TF_CONFIG": c}) for c in configs]  # each passes the check multiworker makes
    addresses = tasks[0]["cluster"]["worker"]
    assert all(t["cluster"]["worker"] == addresses for t in tasks)  # one cluster seen alike by all
    assert [t["task"] for t in tasks] == [{"type": "worker", "index": i} for i in range(3)]
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert [is_chief("multiworker", {"TF_CONFIG": c}) for c in configs] == [True, False, False]


def test_a_worker_that_resumes_without_the_runs_config_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", cluster([1, 2], 1))  # worker 1: not the chief
    status, _, err = run_main(capsys, "train", "--resume", "--out", str(tmp_path / "run"), "--strategy", "multiworker")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("tfattn: error: This worker resumes the run with its chief, and reads the run's "
                          "config.json and tokenizers.json in --out, which has no config.json")


def test_replicas_without_the_mirrored_strategy_is_refused(tmp_path, capsys):
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", str(tmp_path / "run"),
                              "--replicas", "2", *TRAIN_FLAGS)
    assert status == 2
    assert err.startswith("tfattn: error: --replicas is the number of devices of --strategy mirrored")
    assert err.strip().endswith("pass --strategy mirrored. Received: --replicas 2")  # the flags, not the fields


def test_the_run_config_keeps_its_strategy():
    from tfattn.runs.config import RunConfig

    config = RunConfig(distribute=DistributeConfig("mirrored", 2))
    assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))).distribute == config.distribute
    earlier = {k: v for k, v in RunConfig().to_dict().items() if k != "distribute"}  # before strategies
    assert RunConfig.from_dict(earlier).distribute == DistributeConfig()


def test_a_model_made_in_the_scope_but_not_built_trains_under_the_default_precision():
    """The default `precision="auto"` reads the model's policy: the model is built in the strategy's
    scope first, so its weights are the strategy's (it was built outside it, and refused)."""
    import tensorflow as tf

    import tfattn
    from tfattn.training.trainer import TrainConfig, Trainer

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = tfattn.make_model(tfattn.ModelConfig(attention="luong", embedding_dim=8, units=8), 12, 12)
    assert not model.built
    trainer = Trainer(model, TrainConfig(), quiet=True, strategy=strategy)
    assert trainer.config.precision == "float32" and trainer.config.precision_asked == "auto"
    assert all(strategy.extended.variable_created_in_scope(v.value) for v in model.trainable_variables)
