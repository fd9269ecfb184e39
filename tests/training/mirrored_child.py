"""Run by tests/training/test_distributed.py in a process of its own: the logical CPU devices of a
`MirroredStrategy` are made once per process, before TensorFlow starts its devices.

    python tests/training/mirrored_child.py reference|fast

Trains one tiny model 10 steps on one device and 10 steps on two replicas (two logical CPUs), from
the same weights on the same global batches, on the tier named, and prints one JSON object: each
run's per-step losses and gradient norms, the final weights' largest difference, the variables
whose two replicas differ, the first batch's loss computed in NumPy from the untrained model's
logits, the messages of what a strategy refuses, one SGD update of a mirrored weight, and the two
replicas' dropout masks.
"""

import json
import sys

from tfattn.training import distributed

strategy = distributed.make_strategy("mirrored", replicas=2)  # before TensorFlow runs anything

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from tfattn.training.precision import precision_scope  # noqa: E402
from tfattn.training.trainer import TrainConfig, Trainer  # noqa: E402

VOCAB, CLIP = 20, 0.3  # a clip norm below the gradients' norms, so that clipping acts


def global_batches():
    """10 batches of 5, 3 or 1 rows (a 1-row batch leaves the second replica none) with padding
    that differs between the rows, so that the two replicas' halves hold different token counts."""
    rng, batches = np.random.default_rng(0), []
    for i in range(10):
        rows = (5, 3, 1)[i % 3]
        source = rng.integers(4, VOCAB, size=(rows, 6))
        target = rng.integers(4, VOCAB, size=(rows, 8))
        target[:, 0] = 2  # [START]
        for r, length in enumerate(rng.integers(3, 8, size=rows)):
            target[r, length:] = 0  # padding after `length` tokens
            source[r, 2 + r % 4:] = 0
        batches.append((source.astype("int32"), target.astype("int32")))
    return batches


def numpy_loss(logits, target_out):
    """Mean over non-padding positions of -log softmax(logits)[label], in float64."""
    z = logits.astype("float64") - logits.max(axis=-1, keepdims=True)
    log_softmax = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, target_out[..., None], axis=-1)[..., 0]
    mask = target_out != 0
    return float(-(picked * mask).sum() / mask.sum())


def train(batches, accel, strategy=None):
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches),
                                             output_signature=(tf.TensorSpec([None, None], tf.int32),) * 2)
    keras.utils.set_random_seed(0)
    with distributed.scope(strategy):
        model = tfattn.make_model(tfattn.ModelConfig(attention="luong", embedding_dim=8, units=8, dropout=0.0),
                                  VOCAB, VOCAB)
    trainer = Trainer(model, TrainConfig(epochs=1, learning_rate=0.01, clip_norm=CLIP, accel=accel, log_every=1),
                      quiet=True, strategy=strategy)
    source, target = batches[0]
    logits, _ = model((source, target[:, :-1]))  # the untrained model, on the first batch
    losses, norms = [], []
    trainer.fit(dataset, on_step=lambda t, logs: losses.append(float(logs["step_loss"])),
                on_log=lambda t, logs: norms.append(logs["grad_norm"]))
    return model, {"losses": losses, "norms": norms, "first": numpy_loss(np.asarray(logits), target[:, 1:])}


def differing_replicas(model):
    """Names of the variables whose copies on the two devices are not equal to the bit."""
    return [v.path for v in model.variables
            if not all(np.array_equal(v.value.values[0].numpy(), x.numpy()) for x in v.value.values[1:])]


def refusals():
    """The messages of what a strategy refuses."""
    messages = {}
    config = tfattn.ModelConfig(embedding_dim=8, units=8)
    plain = tfattn.model.ensure_built(tfattn.make_model(config, 12, 12))
    with strategy.scope(), precision_scope("mixed_float16"):
        half = tfattn.make_model(config, 12, 12)
    for name, call in [("outside_scope", lambda: Trainer(plain, strategy=strategy)),
                       ("float16", lambda: Trainer(half, TrainConfig(precision="mixed_float16"), strategy=strategy)),
                       ("too_late", lambda: distributed.use_logical_cpus(3))]:
        try:
            call()
        except ValueError as error:
            messages[name] = str(error)
    return messages


def sgd_updates():
    """A mirrored weight 1.0 after one SGD step (rate 0.5) on each replica's gradient 1.0: Keras'
    optimizer sums the two (1.0 - 0.5 * 2), the step's optimizer applies what it is given (0.5)."""
    from tfattn.accel import private

    updates = {}
    for name, kind in [("keras", keras.optimizers.SGD), ("without_sum", private.without_gradient_sum(keras.optimizers.SGD))]:
        with strategy.scope():
            weight, optimizer = keras.Variable(1.0), kind(learning_rate=0.5)
            optimizer.build([weight])
        tf.function(lambda: strategy.run(lambda: optimizer.apply_gradients([(tf.constant(1.0), weight)])))()
        updates[name] = [float(v.numpy()) for v in weight.value.values]
    return updates


def dropout_draws():
    """A dropout layer made in the scope, called on ones on both replicas inside `own_draws`: whether
    the two replicas' masks differ, and whether the copies of its seed state agree after."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        layer = keras.layers.Dropout(0.5)
        layer.build((4, 8))

    def replica():
        with distributed.own_draws(layer, tf.distribute.get_replica_context()):
            return layer(tf.ones([4, 8]), training=True)  # (4, 8): zeros where dropped

    first, second = (v.numpy() for v in tf.function(lambda: strategy.run(replica))().values)
    states = [v.numpy().tolist() for v in layer.seed_generator.state.value.values]
    return {"masks_differ": not np.array_equal(first == 0, second == 0), "states_agree": states[0] == states[1]}


def main(tier):
    batches, accel = global_batches(), {"reference": False, "fast": True}[tier]
    one, alone = train(batches, accel)
    two, replicas = train(batches, accel, strategy)
    weights = max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(one.variables, two.variables))
    print(json.dumps({"one": alone, "two": replicas, "weights": weights, "differing": differing_replicas(two),
                      "replicas": strategy.num_replicas_in_sync, "refusals": refusals(), "sgd": sgd_updates(),
                      "dropout": dropout_draws()}))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
