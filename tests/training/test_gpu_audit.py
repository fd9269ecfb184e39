"""GPU readiness, proven by audit on a machine without a GPU (issue 30, part 10).

1. Every op of the train step (both tiers, every model kind) and of the decoding loops (greedy,
   sampling, beam search, both tiers, inside `tf.function`) has a GPU kernel in TensorFlow's kernel
   registry (`tests/kernel_audit.py` says how it is read), loop bodies and called functions included.
   The graphs are traced as a GPU machine traces them: Keras and `tfattn.tier.recurrent_path` ask
   `tf.config.list_logical_devices("GPU")` while tracing, so the audit makes it list a GPU
   (`kernel_audit.gpu_visible`); the graphs are traced, never run. `make test-long` also audits the
   graphs as traced here, on a CPU.
2. The train step has no text op (no op reading or writing `tf.string`); the input pipeline has.
3. The Keras GRU/LSTM layers the reference tier calls meet Keras' conditions for cuDNN, and on a GPU
   the traced graphs hold one cuDNN kernel per recurrent layer run whole, on both tiers.
4. `tfattn.tier.recurrent_path` says what runs the recurrent layers with and without a GPU.
5. The input pipeline ends with `prefetch`, and the training loop reads from the device only every
   `log_every` steps.

`pytest -s` prints each audit's op count and its ops without a GPU kernel.
"""

import contextlib
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from kernel_audit import audit, gpu_visible, registry_has_gpu_kernels
from tensorflow.python.framework import ops as tf_ops

import tfattn
from tfattn import tier as tier_config
from tfattn.data.pipeline import DataConfig, make_dataset
from tfattn.data.text import Tokenizer
from tfattn import search
from tfattn.model import ModelConfig, make_model
from tfattn.training.step import make_optimizer, make_train_step
from tfattn.training.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.skipif(
    not registry_has_gpu_kernels(),
    reason="this TensorFlow build registers no GPU kernels (a CPU-only wheel): the audit reads the registry")

TINY = {"embedding_dim": 8, "units": 8}
# Every model kind the audit traces: append one line per new kind. `QUICK` ones run in `make test`.
KINDS = {
    "bahdanau-gru": ModelConfig(attention="bahdanau", rnn="gru", dropout=0.1, **TINY),
    "bahdanau-lstm": ModelConfig(attention="bahdanau", rnn="lstm", normalize=True, num_layers=2, **TINY),
    "luong-gru-feed": ModelConfig(attention="luong", rnn="gru", input_feeding=True, score="location", **TINY),
    "luong-gru": ModelConfig(attention="luong", rnn="gru", input_feeding=False, score="dot", scale=True, **TINY),
    "luong-lstm-feed": ModelConfig(attention="luong", rnn="lstm", input_feeding=True, score="concat",
                                   bidirectional=False, dropout=0.1, **TINY),
    "luong-lstm": ModelConfig(attention="luong", rnn="lstm", input_feeding=False, score="general", **TINY),
    "luong-cosine-local-p": ModelConfig(attention="luong", score="cosine", local="p", window=2, **TINY),
    "luong-local-m-hard": ModelConfig(attention="luong", local="m", window=2, hard=True, **TINY),
    "multihead": ModelConfig(attention="luong", heads=2, **TINY),
    "transformer-encoder": ModelConfig(attention="bahdanau", encoder="transformer", heads=2, **TINY),
    "transformer": ModelConfig(attention="transformer", heads=2, positions="relative", relative_clip=2, units=8),
    "none": ModelConfig(attention="none", **TINY),
}
QUICK = ("bahdanau-gru", "luong-lstm", "transformer")
RNN_KINDS = ("bahdanau-gru", "bahdanau-lstm", "luong-gru-feed", "luong-gru", "luong-lstm-feed", "luong-lstm")
VOCAB = 20
SOURCE = tf.TensorSpec([None, None], tf.int32, name="source")
WIDTH = tf.TensorSpec([], tf.int32, name="beam_width")


def kinds(quick=QUICK):
    """`KINDS`' names as parameters, the ones not in `quick` marked `long`."""
    return [pytest.param(k, marks=() if k in quick else pytest.mark.long) for k in KINDS]


@functools.cache
def model_of(kind):
    model = make_model(KINDS[kind], VOCAB, VOCAB)
    source = np.array([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]], "int32")
    model((source, source[:, :4]))  # builds
    return model


def traced_train_step(kind, accel):
    model = model_of(kind)
    step = make_train_step(model, make_optimizer(TrainConfig(), accel), accel=accel)
    return step.get_concrete_function()


# Each decoding loop as a function of the source batch. Beam search takes its width as an input, as
# the exported serving function does.
DECODERS = {
    "greedy": lambda model, accel: (lambda source: search.greedy(model, source, accel=accel), [SOURCE]),
    "sampling": lambda model, accel: (lambda source: search.sample(model, source, seed=3, accel=accel), [SOURCE]),
    "beam": lambda model, accel: (lambda source, width: search.beam_search(model, source, width, accel=accel),
                                  [SOURCE, WIDTH]),
}


def traced_decoder(kind, accel, name):
    fn, signature = DECODERS[name](model_of(kind), accel)
    return tf.function(fn, input_signature=signature, autograph=False).get_concrete_function()


def audited(what, kind, accel, gpu):
    """The audit of `what` ("train" or a `DECODERS` name) for one kind and tier, traced as on a GPU or
    here; made and printed once."""
    return _audited(what, kind, accel, gpu)


@functools.cache
def _audited(what, kind, accel, gpu):
    with gpu_visible() if gpu else contextlib.nullcontext():
        function = traced_train_step(kind, accel) if what == "train" else traced_decoder(kind, accel, what)
    report = audit(function)
    where = "GPU" if gpu else "CPU"
    print(f"\n{what} {kind} accel={accel} traced as on a {where}: {report['ops']} ops in "
          f"{len(report['functions'])} functions ({report['host_memory']} with arguments in host memory, "
          f"{report['host']} string constants on the host), without a GPU kernel: "
          f"{report['without_gpu_kernel'] or 'none'}")
    return report


# Ops without a GPU kernel today, each named with where it comes from; the audit fails on any other,
# and on any of these once it is gone (then delete its line).
KNOWN_WITHOUT_GPU_KERNEL = {}


@pytest.mark.parametrize("accel", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("kind", kinds())
def test_train_step_has_a_gpu_kernel_for_every_op(kind, accel):
    report = audited("train", kind, accel, gpu=True)
    assert report["ops"] > 300  # a real train step: forward, backward and the update
    assert report["disagreements"] == []  # the registry read here agrees with TensorFlow's own lookup
    assert report["without_gpu_kernel"] == []


@pytest.mark.parametrize("accel", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("name", list(DECODERS))
@pytest.mark.parametrize("kind", kinds(quick=("luong-lstm",)))
def test_decoding_loops_have_a_gpu_kernel_for_every_op(kind, name, accel):
    report = audited(name, kind, accel, gpu=True)
    assert "While" in report["op_types"] or "StatelessWhile" in report["op_types"]
    assert report["functions"]  # the loops' bodies were walked
    assert report["disagreements"] == []
    assert report["without_gpu_kernel"] == KNOWN_WITHOUT_GPU_KERNEL.get((name, accel), [])


@pytest.mark.long
@pytest.mark.parametrize("accel", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("what", ["train", *DECODERS])
@pytest.mark.parametrize("kind", list(KINDS))
def test_graphs_traced_on_this_cpu_have_a_gpu_kernel_for_every_op(kind, what, accel):
    """The graphs as traced without a GPU (the fast tier's encoder loops, Keras' own RNN loop)."""
    report = audited(what, kind, accel, gpu=False)
    assert report["disagreements"] == []
    assert report["without_gpu_kernel"] == KNOWN_WITHOUT_GPU_KERNEL.get((what, accel), [])


def test_the_walk_reaches_loop_bodies_and_finds_an_op_without_a_gpu_kernel_there():
    """The audit's own check: an op without a GPU kernel (a string formatted from a number) hidden in
    a `tf.while_loop` body inside a called `tf.function` is found, and a number-only loop passes."""
    inner = tf.function(lambda x: tf.strings.length(tf.strings.as_string(x)))

    def looped(body):
        loop = lambda n: tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + body(i)), (0, 0))  # noqa: E731
        return tf.function(loop, input_signature=[tf.TensorSpec([], tf.int32)]).get_concrete_function()

    found = audit(looped(inner))
    assert found["without_gpu_kernel"] == ["AsString(T=int32)", "StringLength()"]
    assert found["string_ops"] == ["AsString", "StringLength"]
    assert found["disagreements"] == []
    clean = audit(looped(lambda i: i * 2))
    assert clean["without_gpu_kernel"] == [] and clean["functions"]


def test_the_fast_tier_loops_are_walked_into():
    """Traced here, the fast tier's encoder runs written-out loops whose gates are computed in loop
    bodies only: the walk finds the `Sigmoid`s there, which the top graph does not hold."""
    report = audited("train", "bahdanau-gru", True, gpu=False)
    top = traced_train_step("bahdanau-gru", True).graph.as_graph_def().node
    assert "Sigmoid" not in {node.op for node in top}
    assert report["op_types"]["Sigmoid"] > 0 and report["op_types"]["While"] + report["op_types"]["StatelessWhile"] > 0


# 2. Text ops.


@pytest.mark.parametrize("gpu", [True, pytest.param(False, marks=pytest.mark.long)], ids=["as-on-gpu", "here"])
@pytest.mark.parametrize("accel", [True, False], ids=["fast", "reference"])
def test_no_text_op_in_the_train_step(accel, gpu):
    for kind in QUICK:
        assert audited("train", kind, accel, gpu)["string_ops"] == [], kind


def test_the_input_pipeline_holds_the_text_ops():
    """The check of the test above finds text ops where they belong: in the tokenizer the input
    pipeline maps over its strings."""
    tokenizer = Tokenizer.adapt(["2019-03-05", "2020-12-31"], level="char", max_length=14)
    tokenize = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])
    report = audit(tokenize.get_concrete_function())
    assert report["string_ops"], report["op_types"]


# 3. cuDNN.


def recurrent_layers(model):
    """Every Keras GRU/LSTM layer of a model (each direction of a bidirectional one), in order."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, (keras.layers.GRU, keras.layers.LSTM))]


def cudnn_conditions(layer):
    """The conditions Keras 3 (keras/src/layers/rnn/gru.py, lstm.py and backend/tensorflow/rnn.py,
    `cudnn_ok`) requires before it runs a GRU or LSTM layer as a cuDNN kernel, besides a visible GPU."""
    cell = layer.cell
    conditions = {
        "use_cudnn is 'auto' or True": layer.use_cudnn in ("auto", True),
        "activation tanh": cell.activation in (keras.activations.tanh, tf.tanh, keras.ops.tanh),
        "recurrent_activation sigmoid": cell.recurrent_activation in (keras.activations.sigmoid, tf.sigmoid,
                                                                      keras.ops.sigmoid),
        "recurrent_dropout 0": not cell.recurrent_dropout,
        "unroll False": not layer.unroll,
        "use_bias True": bool(cell.use_bias),
    }
    if isinstance(layer, keras.layers.GRU):
        conditions["reset_after True"] = bool(cell.reset_after)
    return conditions


@pytest.mark.parametrize("kind", list(KINDS))
def test_recurrent_layers_meet_keras_conditions_for_cudnn(kind):
    model = model_of(kind)
    layers = recurrent_layers(model)
    if kind in RNN_KINDS:  # the encoder's directions and layers, and the decoder's
        assert len(layers) == KINDS[kind].num_layers * (2 if KINDS[kind].bidirectional else 1) + 1
    for layer in layers:
        failed = [name for name, ok in cudnn_conditions(layer).items() if not ok]
        assert failed == [], f"{layer.name}: {failed}"


@pytest.mark.parametrize("accel", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("kind", QUICK)
def test_on_a_gpu_every_layer_run_whole_is_one_cudnn_kernel(kind, accel):
    """As traced on a GPU, both tiers run the encoder's layers, and a Luong decoder's without input
    feeding, as cuDNN kernels (forward and backward)."""
    config = KINDS[kind]
    rnn_encoder = not config.self_attention_encoder
    whole = config.num_layers * (2 if config.bidirectional else 1) if rnn_encoder else 0
    if config.attention == "luong" and not config.input_feeding:
        whole += 1
    if config.attention == "none":  # the baseline's decoder RNN reads the whole target at once
        whole += 1
    on_gpu = audited("train", kind, accel, gpu=True)["op_types"]
    assert on_gpu["CudnnRNNV3"] == whole
    assert on_gpu["CudnnRNNBackpropV3"] == whole


@pytest.mark.parametrize("kind,accel", [("bahdanau-gru", True),
                                        pytest.param("luong-lstm", False, marks=pytest.mark.long)])
def test_traced_here_no_cudnn_kernel(kind, accel):
    """Without a GPU, neither tier's graph holds a cuDNN kernel."""
    here = audited("train", kind, accel, gpu=False)["op_types"]
    assert not [op for op in here if op.startswith("Cudnn")]


# 4. The tier switch on a GPU.


def test_recurrent_path_says_what_runs_with_and_without_a_gpu():
    assert (tier_config.recurrent_path(True), tier_config.recurrent_path(False)) == ("loops", "keras")
    with tier_config.accel_scope(False):
        assert tier_config.recurrent_path() == "keras"
    with gpu_visible():
        assert tier_config.gpu_visible()
        assert (tier_config.recurrent_path(True), tier_config.recurrent_path(False)) == ("cudnn", "cudnn")
    assert not tier_config.gpu_visible()
    with pytest.raises(ValueError, match="accel must be True, False or None"):
        tier_config.recurrent_path("yes")


def test_the_fast_encoder_follows_recurrent_path(monkeypatch):
    """With `recurrent_path` answering "cudnn" (and no real GPU, so Keras runs its own loop), the fast
    tier's encoder calls the Keras layers: the traced graph has Keras' loop and not the fast tier's."""
    from tfattn.accel import encoder as fast_encoder

    model = model_of("bahdanau-gru")
    trace = lambda: tf.function(lambda s: fast_encoder.encode(model.encoder, s)[0],  # noqa: E731
                                input_signature=[SOURCE]).get_concrete_function().graph.as_graph_def()
    names = lambda graph_def: " ".join(f.signature.name for f in graph_def.library.function)  # noqa: E731
    assert "gru_0" not in names(trace())  # the fast tier's loop
    monkeypatch.setattr(tier_config, "gpu_visible", lambda: True)
    assert "gru_0" in names(trace())  # Keras' loop of the layer `forward_gru_0`


# 5. Input pipeline and the loop's reads.


def dataset_ops(dataset):
    """The op types of a dataset's graph, the last (outermost) first."""
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(tf.raw_ops.DatasetToGraphV2(input_dataset=dataset._variant_tensor).numpy())
    by_name = {node.name: node for node in graph_def.node}
    [retval] = [node for node in graph_def.node if node.op == "_Retval"]
    chain, node = [], by_name[retval.input[0].split(":")[0]]
    while node is not None:
        chain.append(node.op)
        datasets = [by_name.get(i.split(":")[0]) for i in node.input if not i.startswith("^")]
        datasets = [d for d in datasets if d is not None and "Dataset" in d.op]
        node = datasets[0] if datasets else None
    return chain


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_input_pipeline_ends_with_prefetch(shuffle):
    pairs = [("5 march 2019", "2019-03-05"), ("1 jan 2020", "2020-01-01")] * 4
    source = Tokenizer.adapt([s for s, _ in pairs], level="char", max_length=20)
    target = Tokenizer.adapt([t for _, t in pairs], level="char", max_length=14)
    chain = dataset_ops(make_dataset(pairs, source, target, DataConfig(batch_size=2), shuffle=shuffle))
    chain = [op for op in chain if op != "OptionsDataset"]  # settings only: it passes the batches on
    assert chain[0] == "PrefetchDataset", chain
    assert chain[-1] == "TensorSliceDataset", chain  # the whole chain was followed


class _Reads:
    """Counts reads of eager tensors into host memory (`.numpy()`, `float()`, `int()`, `bool()`,
    `np.asarray`): each goes through `_EagerTensorBase._numpy`, and on a GPU each read of a step's
    output or of a variable the step updates waits for the device."""

    def __init__(self, monkeypatch):
        self.count, real = 0, tf_ops._EagerTensorBase._numpy

        def counted(tensor):
            self.count += 1
            return real(tensor)

        monkeypatch.setattr(tf_ops._EagerTensorBase, "_numpy", counted)


def reads_per_epoch(monkeypatch, make_on_step=lambda trainer: None):
    """Host reads during each of three epochs of 5, 7 and 8 steps, with `log_every=4`, and
    `make_on_step(trainer)`'s function after each step. A first epoch of 4 steps takes the reads made
    once per `fit` (the global step where it starts)."""
    keras.utils.set_random_seed(0)
    model = tfattn.make_model(ModelConfig(**TINY), VOCAB, VOCAB)
    rows = np.array([[1, 5, 6, 2], [1, 7, 2, 0]], "int32")
    trainer = Trainer(model, TrainConfig(epochs=4, log_every=4), quiet=True)
    trainer.train_step(rows, rows)  # traced before counting
    on_step = make_on_step(trainer)
    reads, counts = _Reads(monkeypatch), []
    steps = {1: 4, 2: 5, 3: 7, 4: 8}
    epochs = lambda epoch: tf.data.Dataset.from_tensors((rows, rows)).repeat(steps[epoch])  # noqa: E731
    trainer.fit(epochs, callbacks=[lambda epoch, logs: counts.append(reads.count)], on_step=on_step)
    return np.diff(counts).tolist()


def test_the_training_loop_reads_from_the_device_every_log_every_steps_only(monkeypatch):
    """`Trainer.fit`: an epoch of 7 steps reads as much as one of 5 (no read per step): each reads at
    step 4 and at its end. At each, `flush` reads the steps' outputs in one read and the count of
    skipped steps; the progress line (at step 4) or the epoch's logs (at the end) read the epoch's
    sums, and the check of skipped steps their count again. An epoch of 8 reads at steps 4 and 8,
    and at its end only what the end reads beyond `flush`."""
    five, seven, eight = reads_per_epoch(monkeypatch)
    assert seven == five
    assert eight == five + 3


def test_the_command_line_loop_reads_from_the_device_every_log_every_steps_only(monkeypatch, tmp_path):
    """`tfattn train`'s loop adds `_Saver.after_step` and `_Validations.after_step` after each step
    (`tfattn.runs.train._train`'s `on_step`), which decide whether a save or a validation is due."""
    from tfattn.runs import saving
    from tfattn.training.validation import ValidationConfig

    class Run:
        path = staticmethod(lambda name: str(tmp_path / name))

    def make_on_step(trainer):
        saver = saving.Saver(Run(), trainer, every=1000)
        saver.saved_this_session = True  # no save is due in the test (every 1000 steps)
        checks = saving.Validations(Run(), ValidationConfig(every=1000), trainer, saver, None, None, print)

        def on_step(trainer, logs):  # as `tfattn.runs.train._train` has it
            saver.after_step(logs["step_loss"])
            checks.after_step()

        return on_step

    five, seven, _ = reads_per_epoch(monkeypatch, make_on_step)
    assert seven == five
