"""Training on several devices or machines with `tf.distribute`: the strategy, its step, its chief.

    strategy = make_strategy("mirrored", replicas=2)   # or "multiworker", configured by TF_CONFIG
    with strategy.scope():                             # the weights are made as mirrored variables
        model = make_model(model_config, source_vocab_size, target_vocab_size)
    Trainer(model, train_config, strategy=strategy).fit(dataset)

    "default"      no strategy: one device, the step of `tfattn.training.step` as it is
    "mirrored"     `tf.distribute.MirroredStrategy`: this machine's GPUs, or with `replicas=N` and no
                   GPU, N logical CPU devices (they share the machine's cores: to try it out)
    "multiworker"  `tf.distribute.MultiWorkerMirroredStrategy` over the machines TF_CONFIG names

The batch size stays the global batch's: `strategy.experimental_distribute_dataset` gives each
replica its share of the rows of every batch. A step (`make_distributed_step`), in each replica:

    1. count = the global batch's real target tokens       (an all-reduce of one number)
    2. loss  = the sum of this replica's token losses / count, and its gradients (the replica's
       dropout masks its own: `own_draws`)
    3. loss, accuracy and gradients summed over the replicas (one all-reduce): the global batch's
       mean loss and its gradient, as one device computes them on the whole batch
    4. the gradients clipped by their global norm, and the update skipped if the loss or the norm
       is not finite: the same numbers on every replica, so every replica decides alike

Keras' optimizer sums the replicas' gradients itself in `apply_gradients`, after any clipping; the
step gives it the sum already made, to clip the sum as one device does, and an optimizer that
applies it as it is (`tfattn.accel.private.without_gradient_sum`), so that nothing is summed twice.

The chief (TF_CONFIG's task `chief`, or worker 0 when there is none; the one process of the other
strategies) alone writes: the run directory, its lock, checkpoints, history and export
(`tfattn.runs.train`); the other workers train in step with it and write nothing. The chief's
clock and its decisions to stop reach every worker after each step (`chief_values`), and its
state reaches them when training starts (`broadcast_from_chief`): a run the chief resumes from its
checkpoint goes on on every worker.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import socket
import time

import tensorflow as tf

from tfattn.accel import private
from tfattn.training.step import build, clip_and_check, dense_gradients, forward_and_loss, metrics

STRATEGIES = ("default", "mirrored", "multiworker")

SUM = tf.distribute.ReduceOp.SUM

# How long a worker of a multiworker run waits for the others by default (`--worker-timeout`): long
# enough for machines started by hand one after the other.
WORKER_TIMEOUT = 300.0

TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", '
                     '"index": 0}}')


@dataclasses.dataclass
class DistributeConfig:
    """Where a run trains.

    Attributes:
        strategy: `"default"` (one device), `"mirrored"` (this machine's GPUs, or logical CPU
            devices) or `"multiworker"` (the machines of TF_CONFIG).
        replicas: with `"mirrored"`: that many devices, logical CPU devices on a machine without
            a GPU. None: every GPU (or the one CPU).
        worker_timeout: with `"multiworker"`: how long, in seconds, a worker waits for the others
            to start before it stops and names those that did not (`wait_for_workers`).
    """

    strategy: str = "default"
    replicas: int | None = None
    worker_timeout: float = WORKER_TIMEOUT

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}. Received: strategy={self.strategy!r}")
        if self.replicas is not None and (not isinstance(self.replicas, int) or isinstance(self.replicas, bool)
                                          or self.replicas < 1):
            raise ValueError(f"replicas must be an int >= 1 or None. Received: replicas={self.replicas!r}")
        timeout = self.worker_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ValueError(f"worker_timeout must be a number of seconds > 0. Received: worker_timeout={timeout!r}")
        if self.replicas is not None and self.strategy != "mirrored":
            raise ValueError(f"replicas is the number of devices of the mirrored strategy (a multiworker run has "
                             f"one replica per worker, a default one a single replica); pass strategy='mirrored'. "
                             f"Received: strategy={self.strategy!r}, replicas={self.replicas!r}")


def make_strategy(strategy="default", replicas=None, worker_timeout=WORKER_TIMEOUT, echo=None):
    """The `tf.distribute.Strategy` named `strategy` (see `DistributeConfig`), or None for `"default"`.

    Make it before TensorFlow runs anything in the process: logical CPU devices, and the servers
    of `MultiWorkerMirroredStrategy`, are set up when TensorFlow starts its devices. A
    `"multiworker"` strategy first waits, at most `worker_timeout` seconds, for the other workers
    to start (`wait_for_workers`, saying so through `echo`), and then bounds TensorFlow's own wait
    for them by the same time.

    Raises:
        ValueError: a bad name or count; TF_CONFIG missing or malformed (`"multiworker"`); logical
            devices asked for once TensorFlow has started.
        WorkersMissing: a worker did not start within `worker_timeout` seconds (the message names it).
    """
    config = DistributeConfig(strategy, replicas, worker_timeout)
    if config.strategy == "default":
        return None
    if config.strategy == "multiworker":
        tf_config()  # one clear line if TF_CONFIG is missing or malformed
        wait_for_workers(config.worker_timeout, echo)
        with private.cluster_wait(config.worker_timeout):  # should one leave between that wait and this
            try:
                return tf.distribute.MultiWorkerMirroredStrategy()
            except RuntimeError as error:  # "Timeout waiting for the cluster"
                raise WorkersMissing(f"The workers did not all reach TensorFlow's start within {config.worker_timeout:g} "
                                     f"s ({error}). Received: worker_timeout={config.worker_timeout:g}") from None
    return tf.distribute.MirroredStrategy(_devices(config.replicas))


class WorkersMissing(TimeoutError):
    """A worker of a multiworker run did not start in time; the message names it."""


def wait_for_workers(timeout, echo=None, environ=None):
    """Waits until every other task of TF_CONFIG's cluster accepts connections at its address, at most
    `timeout` seconds, listening at this task's own address meanwhile (so that the others find it up
    too; TensorFlow's server takes the address over afterwards). Python all along: Ctrl-C and SIGTERM
    end the wait. Says once through `echo` what it waits for.

    Raises:
        WorkersMissing: naming each task that did not start, its address, and the time waited.
    """
    config = tf_config(environ)
    me = (config["task"]["type"], config["task"]["index"])
    others = {f"{kind} {i}": address for kind, addresses in config["cluster"].items()
              for i, address in enumerate(addresses) if (kind, i) != me}
    listener = _listen(config["cluster"][me[0]][me[1]])
    deadline, pending = time.monotonic() + timeout, dict(others)
    try:
        if pending and echo:
            echo(f"waiting up to {timeout:g} s for {_tasks(pending)} to start (--worker-timeout)")
        while pending:
            pending = {name: address for name, address in pending.items() if not _accepts(address)}
            if pending and time.monotonic() > deadline:
                raise WorkersMissing(f"{_tasks(pending)} did not start within {timeout:g} s: start "
                                     f"{'it' if len(pending) == 1 else 'each'} with the same command and its TF_CONFIG "
                                     f"task, or wait longer with --worker-timeout. Received: worker_timeout={timeout:g}")
            if pending:
                time.sleep(WAIT_STEP)
    finally:
        if listener is not None:
            listener.close()  # connections it never accepted are reset: nothing lingers on the port


WAIT_STEP = 0.25  # seconds between two rounds of connection attempts while workers are awaited


def _tasks(named):
    return ", ".join(f"{name} ({address})" for name, address in named.items())


def _listen(address):
    """A socket listening at `address`'s port (never accepting: the system completes the others'
    connections), or None if the port is taken (TensorFlow's server, started already)."""
    host, _, port = address.rpartition(":")
    try:
        return socket.create_server(("", int(port)), backlog=64)
    except OSError:
        return None


def _accepts(address):
    """Whether something accepts TCP connections at `address` ("host:port") now."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def check_replicas(replicas, batch_size):
    """Refuses `replicas` mirrored replicas where a batch of `batch_size` rows or this machine's
    devices cannot give each one its own: more replicas than rows (each replica trains on its share
    of the global batch), or than GPUs, or without a GPU than CPU cores (the logical CPU devices
    share them; two are allowed on one core, to try it out). Cheap: it runs before any setup."""
    if replicas > batch_size:
        raise ValueError(f"--replicas {replicas} is more than --batch-size {batch_size}: each replica trains on its "
                         f"share of the global batch, so there can be at most {batch_size}. Received: replicas="
                         f"{replicas}, batch_size={batch_size}")
    gpus = len(tf.config.list_physical_devices("GPU"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    most, kind = (gpus, "GPUs") if gpus else (max(cores, 2), "CPU cores")
    if replicas > most:
        raise ValueError(f"--replicas {replicas} asks for more devices than this machine has: {most} {kind} (a "
                         f"replica per device), so at most {most}. Received: replicas={replicas}")


def _devices(replicas):
    """`replicas` GPUs, or without a GPU, as many logical CPU devices; None (every GPU) if not given."""
    if replicas is None:
        return None
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < replicas:
            raise ValueError(f"replicas={replicas} asks for more GPUs than the {len(gpus)} of this machine. "
                             f"Received: replicas={replicas}")
        return [f"/gpu:{i}" for i in range(replicas)]
    use_logical_cpus(replicas)
    return [f"/cpu:{i}" for i in range(replicas)]


def use_logical_cpus(count):
    """Splits the machine's CPU into `count` logical devices, `/cpu:0` to `/cpu:{count - 1}` (they
    share its cores). TensorFlow allows this only before it starts its devices (its first op)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    if len(tf.config.get_logical_device_configuration(cpu) or [None]) == count:
        return  # already so
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:  # "Virtual devices cannot be modified after being initialized"
        raise ValueError(f"{count} replicas on the CPU need {count} logical CPU devices, which TensorFlow makes only "
                         f"before it runs its first op in the process, and it has run one: make the strategy "
                         f"first (tfattn train does). Received: replicas={count}") from None


def tf_config(environ=None):
    """The TF_CONFIG of this process, checked: `{"cluster": {"worker": ["host:port", ...], optionally
    "chief": ["host:port"]}, "task": {"type": "worker" or "chief", "index": i}}`.

    Raises:
        ValueError: one line naming TF_CONFIG, what is wrong and what is expected.
    """
    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    expected = f"TF_CONFIG is expected to be a JSON object such as {TF_CONFIG_EXAMPLE} (docs/training.md)"
    if not raw.strip():
        raise ValueError(f"--strategy multiworker is configured by the environment variable TF_CONFIG, which is not "
                         f"set; {expected}. Received: TF_CONFIG unset")
    try:
        config = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"TF_CONFIG is not JSON ({error}); {expected}. Received: TF_CONFIG={raw!r}") from None
    problem = _tf_config_problem(config)
    if problem:
        raise ValueError(f"TF_CONFIG {problem}; {expected}. Received: TF_CONFIG={raw!r}")
    return config


def local_cluster(workers):
    """The TF_CONFIG of each of `workers` processes on this machine (JSON strings, worker 0 the chief),
    on ports of 127.0.0.1 that are free now: `--strategy multiworker` tried out on one machine.

        for config in local_cluster(2):   # one `tfattn train` per worker
            subprocess.Popen(["tfattn", "train", ...], env={**os.environ, "TF_CONFIG": config})
    """
    sockets = [socket.socket() for _ in range(workers)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))  # port 0: the system picks a free one
        ports = [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
    addresses = [f"127.0.0.1:{port}" for port in ports]
    return [json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}})
            for i in range(workers)]


def _tf_config_problem(config):
    """What is wrong with a parsed TF_CONFIG, or None."""
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        return "has no object \"cluster\""
    cluster, task = config["cluster"], config.get("task")
    if set(cluster) - {"chief", "worker"}:
        return f"names tasks {sorted(set(cluster) - {'chief', 'worker'})}: only \"chief\" and \"worker\" train here"
    for kind, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses or not all(_is_address(a) for a in addresses):
            return f"has cluster.{kind} {addresses!r}, not a list of \"host:port\" strings"
    if len(cluster.get("chief", [])) > 1 or "worker" not in cluster and "chief" not in cluster:
        return "names no worker, or more than one chief"
    if not isinstance(task, dict) or task.get("type") not in cluster:
        return f"has task {task!r}: its \"type\" must be one of the cluster's {sorted(cluster)}"
    index = task.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cluster[task["type"]]):
        return f"has task.index {index!r}: an int from 0 to {len(cluster[task['type']]) - 1} is expected"
    return None


def _is_address(address):
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    return bool(host) and port.isdigit()


def is_chief(strategy="default", environ=None):
    """Whether this process writes the run: under `"multiworker"`, the task TF_CONFIG names chief,
    or worker 0 when it names none; under the other strategies, always (one process)."""
    if strategy != "multiworker":
        return True
    config = tf_config(environ)
    task = config["task"]
    return task["type"] == "chief" or ("chief" not in config["cluster"] and task["index"] == 0)


def task_name(environ=None):
    """This process's task as TF_CONFIG names it, e.g. `"worker 1"`."""
    task = tf_config(environ)["task"]
    return f"{task['type']} {task['index']}"


def scope(strategy):
    """`strategy.scope()`, or nothing for no strategy (None)."""
    return contextlib.nullcontext() if strategy is None else strategy.scope()


def check_model(model, strategy, precision):
    """Refuses what the distributed step cannot train: a model whose weights were not made in
    `strategy.scope()`, and float16 loss scaling."""
    if not strategy.extended.variable_created_in_scope(model.variables[0].value):
        raise ValueError(f"The model's weights were not made in the strategy's scope: make the model inside "
                         f"`with strategy.scope():`, as tfattn.runs.train.train_run does. Received: "
                         f"strategy={type(strategy).__name__}")
    if precision == "mixed_float16":
        raise ValueError("mixed_float16 trains with loss scaling, which the distributed step does not do: train "
                         "under a strategy in float32 or mixed_bfloat16. Received: precision='mixed_float16'")


def make_distributed_step(strategy, model, optimizer, clip_norm=5.0, accel=False, label_smoothing=0.0):
    """Returns `train_step(source, target)` for batches of `strategy.experimental_distribute_dataset`:
    one update on the global batch, as `tfattn.training.step.make_train_step`'s on one device.

    Args:
        strategy: a `tf.distribute.Strategy` whose scope made `model`.
        model: a `Seq2Seq` model. optimizer: from `make_optimizer(..., summed=True)`, made in the scope.
        clip_norm: float or None. The summed gradient is clipped to this global norm.
        accel: bool. The fast tier's forward pass and loss (chosen by `tfattn.accel.seq2seq.choose`).
        label_smoothing: float. The loss's label smoothing (`tfattn.core.masked_loss`). Defaults to `0.0`.

    Returns:
        A function returning the global batch's `{"loss", "accuracy", "tokens", "slots", "grad_norm",
        "finite"}`: `slots` counts its label positions, padding included.
    """
    with strategy.scope():
        build(model, optimizer)

    def apply(grads):
        optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))

    @tf.function(reduce_retracing=True, autograph=False)
    def train_step(source, target):
        grads, out = strategy.run(replica_step, args=(model, optimizer, source, target, clip_norm, accel,
                                                               label_smoothing))
        out = {name: strategy.experimental_local_results(value)[0] for name, value in out.items()}  # all alike

        def update():  # here, not in the replicas: a `cond` there may not hold the optimizer's merge_call
            strategy.run(apply, args=(grads,))
            return tf.constant(True)

        out["finite"] = tf.cond(out["finite"], update, lambda: tf.constant(False))
        return out

    return train_step


def replica_step(model, optimizer, source, target, clip_norm, accel, label_smoothing=0.0):
    """One replica's part of a step (steps 1 to 4 of the module's docstring): `(grads, out)`, the
    global batch's clipped gradients and its metrics, the same on every replica."""
    context = tf.distribute.get_replica_context()
    target_out = target[:, 1:]  # (batch, t_out), this replica's rows
    count = context.all_reduce(SUM, tf.cast(tf.math.count_nonzero(target_out), tf.float32))
    with own_draws(model, context), tf.GradientTape() as tape:
        logits, loss = forward_and_loss(model, source, target, True, accel, count, label_smoothing)
    grads = dense_gradients(tape.gradient(loss, model.trainable_variables))
    accuracy = metrics(target, logits, loss, accel, count)["accuracy"]  # this replica's share too
    slots = tf.cast(tf.size(target_out), tf.float32)
    loss, accuracy, slots, *grads = context.all_reduce(SUM, [loss, accuracy, slots, *grads])
    grads, norm, finite = clip_and_check(optimizer, loss, grads, clip_norm)
    return grads, {"loss": loss, "accuracy": accuracy, "tokens": tf.cast(count, tf.int32), "slots": slots,
                   "grad_norm": norm, "finite": finite}


@contextlib.contextmanager
def own_draws(layer, context):
    """Inside the block, each replica draws its own random numbers (dropout masks) from `layer`'s
    Keras seed generators, which start each step alike on every replica: their seeds are shifted
    by the replica's number, and shifted back after, so that the copies agree again (each copy
    counts the same draws). A replica updates its own copy of a mirrored variable that has no
    aggregation, as Keras' seed generators' states are."""
    states = private.seed_states(layer)
    shift = tf.cast(context.replica_id_in_sync_group, states[0].dtype) * SEED_SHIFT if states else None
    for state in states:
        state.assign_add(tf.stack([shift, tf.zeros_like(shift)]))  # [seed, draws so far]
    yield
    for state in states:
        state.assign_sub(tf.stack([shift, tf.zeros_like(shift)]))


SEED_SHIFT = 1_000_003  # between the replicas' seeds: apart from any seed a run is given


def _between_workers(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def chief_values(strategy):
    """Returns `chief(values) -> values`, the chief's list of floats on every worker, under
    `MultiWorkerMirroredStrategy` (one all-reduce, in which the other replicas add zeros); None
    otherwise, where one process decides for all its replicas."""
    if not _between_workers(strategy):
        return None

    def replica(values):
        context = tf.distribute.get_replica_context()
        chief = tf.equal(context.replica_id_in_sync_group, 0)
        return context.all_reduce(SUM, tf.where(chief, values, tf.zeros_like(values)))

    @tf.function(autograph=False)
    def chief_of(values):
        return strategy.experimental_local_results(strategy.run(replica, args=(values,)))[0]

    return lambda values: chief_of(tf.constant(values, tf.float64)).numpy().tolist()


def broadcast_from_chief(strategy, variables):
    """Gives `variables` the chief's values on every worker, under `MultiWorkerMirroredStrategy`
    (an all-reduce per dtype, in which the other replicas add zeros); nothing otherwise (one process)."""
    if not _between_workers(strategy):
        return
    groups = {}
    for variable in variables:
        groups.setdefault(variable.dtype, []).append(variable)

    def replica():
        context = tf.distribute.get_replica_context()
        chief = tf.equal(context.replica_id_in_sync_group, 0)
        return [context.all_reduce(SUM, [tf.where(chief, tf.convert_to_tensor(v), tf.zeros(v.shape, v.dtype))
                                         for v in group]) for group in groups.values()]

    values = tf.function(autograph=False)(lambda: strategy.experimental_local_results(strategy.run(replica))[0])()
    for group, group_values in zip(groups.values(), values):
        for variable, value in zip(group, group_values):
            variable.assign(value)


def check_same_everywhere(strategy, text, what):
    """Raises `ValueError` on every worker if `text` is not the same on all of them (`what` says what
    it describes), under `MultiWorkerMirroredStrategy`: its SHA-256 as four integers `v` below 2**24,
    whose sums over the `n` replicas are `n v`, and of their squares `n v^2`, only if all are `v`."""
    if not _between_workers(strategy):
        return
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    mine = tf.constant([int(digest[i : i + 6], 16) for i in range(0, 24, 6)], tf.float64)  # exact in float64

    def replica(values):
        return tf.distribute.get_replica_context().all_reduce(SUM, tf.stack([values, values * values]))

    @tf.function(autograph=False)
    def summed():
        return strategy.experimental_local_results(strategy.run(replica, args=(mine,)))[0]

    sums = summed()
    n = strategy.num_replicas_in_sync
    if not bool(tf.reduce_all(tf.equal(sums, tf.stack([n * mine, n * mine * mine])))):
        raise ValueError(f"The workers differ in {what}: start every worker with the same command and the same "
                         f"corpus. Received: {what} {digest[:12]} here")
