"""FusedAdam: Keras's Adam update, done by TensorFlow's fused kernel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel.optimizer import FusedAdam
from tfattn.training.step import make_optimizer
from tfattn.training.trainer import TrainConfig


def test_first_step_moves_each_weight_by_the_learning_rate():
    # Step 1: m = 0.1 g, v = 0.001 g^2, lr_t = lr sqrt(0.001) / 0.1, so the update is lr * sign(g)
    # (up to epsilon): 1 - 0.01 and 2 + 0.01.
    variable = keras.Variable([1.0, 2.0])
    FusedAdam(learning_rate=0.01).apply_gradients([(tf.constant([0.5, -3.0]), variable)])
    np.testing.assert_allclose(variable.numpy(), [0.99, 2.01], rtol=1e-6)


def _train(optimizer_class, gradients, densify=False, **kwargs):
    """Applies `gradients` (a list per step of (dense, sparse) pairs) to two variables; `densify`
    makes the sparse gradients dense first."""
    rng = np.random.default_rng(0)
    dense = keras.Variable(rng.normal(size=(4, 3)).astype("float32"))
    table = keras.Variable(rng.normal(size=(6, 2)).astype("float32"))  # an embedding table
    optimizer = optimizer_class(**kwargs)

    @tf.function
    def apply(dense_grad, rows, values):
        sparse = tf.IndexedSlices(values, rows, dense_shape=tf.constant([6, 2]))
        sparse = tf.convert_to_tensor(sparse) if densify else sparse
        optimizer.apply_gradients([(dense_grad, dense), (sparse, table)])

    for dense_grad, (rows, values) in gradients:
        apply(dense_grad, rows, values)
    return dense.numpy(), table.numpy()


@pytest.mark.parametrize("kwargs", [
    {"learning_rate": 0.05},
    {"learning_rate": keras.optimizers.schedules.CosineDecay(0.05, 4), "beta_1": 0.8, "epsilon": 1e-3},
    {"learning_rate": 0.05, "amsgrad": True},  # Keras's update, on the gradients made dense
], ids=["constant", "schedule", "amsgrad"])
def test_matches_keras_adam_on_dense_and_sparse_gradients(kwargs):
    rng = np.random.default_rng(1)
    gradients = []
    for _ in range(6):
        rows = tf.constant([0, 3, 3], tf.int32)  # row 3 twice: summed, as Keras does
        gradients.append((tf.constant(rng.normal(size=(4, 3)), tf.float32),
                          (rows, tf.constant(rng.normal(size=(3, 2)), tf.float32))))
    fused = _train(FusedAdam, gradients, **kwargs)
    # Against Keras's Adam on the same gradients made dense: Keras squares an IndexedSlices' slices
    # before adding up repeated rows (row 3 here), where Adam's v needs the square of their sum.
    reference = _train(keras.optimizers.Adam, gradients, densify=True, **kwargs)
    start = _train(FusedAdam, [], **kwargs)
    for ours, theirs, before in zip(fused, reference, start):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
        assert np.abs(ours - before).max() > 0.05  # the weights did move
    # Rows 1, 2, 4 and 5 never had a gradient: unchanged, in both.
    np.testing.assert_array_equal(fused[1][[1, 2, 4, 5]], start[1][[1, 2, 4, 5]])


def test_training_uses_it_and_its_checkpoint_restores_the_moments(tmp_path):
    optimizer = make_optimizer(TrainConfig(learning_rate=0.1))
    assert isinstance(optimizer, FusedAdam)  # accel=True, the default
    reference = make_optimizer(TrainConfig(learning_rate=0.1), accel=False)
    assert type(reference) is keras.optimizers.Adam and float(reference.learning_rate) == pytest.approx(0.1)
    variable = keras.Variable([1.0, -1.0])
    optimizer.apply_gradients([(tf.constant([1.0, 2.0]), variable)])
    path = tf.train.Checkpoint(optimizer=optimizer, variable=variable).save(str(tmp_path / "ckpt"))

    restored = make_optimizer(TrainConfig(learning_rate=0.1))
    other = keras.Variable([0.0, 0.0])
    restored.build([other])
    tf.train.Checkpoint(optimizer=restored, variable=other).restore(path).assert_consumed()
    assert int(restored.iterations) == 1
    for a, b in zip(optimizer.variables, restored.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The next step continues from the restored moments: both copies make the same update.
    for o, v in ((optimizer, variable), (restored, other)):
        o.apply_gradients([(tf.constant([-1.0, 0.5]), v)])
    np.testing.assert_array_equal(variable.numpy(), other.numpy())
