"""Mixed precision: Keras dtype policies, loss scaling for float16, the tier each policy trains on,
and float32 exports of a mixed-precision run."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from conftest import run_main
from processes import TRAIN_FLAGS, write_anki
from tfattn.accel import seq2seq as fast
from tfattn.training.precision import PRECISIONS, precision_scope
from tfattn.training.trainer import TrainConfig, Trainer


def dates_model(dates_data, precision):
    _, _, source, target = dates_data
    keras.utils.set_random_seed(0)
    with precision_scope(precision):
        return tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=8, units=16),
                                 source.vocab_size, target.vocab_size)


@pytest.mark.parametrize("precision, compute", [("float32", "float32"), ("mixed_float16", "float16"),
                                                ("mixed_bfloat16", "bfloat16")])
def test_a_few_steps_under_each_policy_lower_the_loss(dates_data, precision, compute):
    train, _, source, target = dates_data
    model = dates_model(dates_data, precision)
    assert keras.config.dtype_policy().name == "float32"  # the scope put the global policy back
    assert model.decoder.compute_dtype == compute and model.encoder.compute_dtype == compute
    data = tfattn.make_dataset(train[:320], source, target, tfattn.DataConfig(batch_size=32, bucket=False),
                               shuffle=False)
    losses = []
    trainer = Trainer(model, TrainConfig(learning_rate=1e-2, epochs=2, precision=precision), quiet=True)
    trainer.fit(data, on_step=lambda t, logs: losses.append(float(logs["step_loss"])))
    assert all(v.dtype == "float32" for v in model.variables if "float" in v.dtype)  # weights stay float32
    assert losses[0] == pytest.approx(np.log(target.vocab_size), rel=0.2)  # untrained: about ln(vocab)
    assert np.mean(losses[-5:]) < 0.8 * losses[0], losses
    assert trainer.nonfinite_steps == 0
    scaled = isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (precision == "mixed_float16")


def test_the_loss_is_float32_under_float16():
    logits = tf.constant([[[60000.0, -60000.0, 0.0]]], tf.float16)  # near float16's largest
    loss = tfattn.masked_loss(tf.constant([[1]]), logits)
    assert loss.dtype == tf.float32 and float(loss) == pytest.approx(120000.0, rel=1e-3)  # no overflow to inf


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("accel", [True, False, None])
def test_the_fast_tier_trains_float32_only(precision, accel):
    with tfattn.tier.accel_scope(True):
        assert fast.choose(accel, None, precision) == ((accel is not False) and precision == "float32")


def test_a_trainer_under_a_mixed_policy_runs_the_reference_tier(dates_data):
    model = dates_model(dates_data, "mixed_bfloat16")
    trainer = Trainer(model, TrainConfig(precision="mixed_bfloat16", accel=True), quiet=True)
    assert trainer.config.accel is False
    assert isinstance(trainer.optimizer, keras.optimizers.Adam)
    assert type(trainer.optimizer).__name__ == "Adam"  # Keras's, not the fast tier's FusedAdam


def test_a_model_made_in_another_precision_is_refused(dates_data):
    model = dates_model(dates_data, "float32")
    with pytest.raises(ValueError, match=r"make the model inside tfattn.training.precision.precision_scope"
                                         r"\('mixed_float16'\). Received: precision='mixed_float16'"):
        Trainer(model, TrainConfig(precision="mixed_float16"), quiet=True)


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of .* Received: precision='float16'"):
        TrainConfig(precision="float16")


@pytest.mark.long  # minutes of runs: make test-long
@pytest.mark.parametrize("precision", ["mixed_float16"])
def test_the_export_of_a_mixed_precision_run_serves_in_float32(tmp_path, capsys, precision):
    write_anki(tmp_path / "d.txt", 120)
    run = str(tmp_path / "run")
    status, out, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                                *TRAIN_FLAGS, "--precision", precision, "--bleu-sample", "4", "--no-tensorboard")
    assert status == 0, err
    assert json.load(open(os.path.join(run, "config.json")))["train"]["precision"] == precision
    exported = tf.saved_model.load(os.path.join(run, "export"))
    texts = ["5 march 2019", "tue 12 jan 1999"]
    served = exported.signatures["translate"](text=tf.constant(texts))
    assert served["attention"].dtype == tf.float32
    # The same translations as the run's best weights in a float32 model (the export's config is float32).
    from tfattn.runs.config import RunConfig
    from tfattn.runs.directory import Run
    from tfattn.training.trainer import restore_weights

    config = RunConfig.from_dict(json.load(open(os.path.join(run, "config.json"))))
    tokenizers = Run(run).tokenizers()
    model = tfattn.make_model(config.model, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
    best = tf.train.latest_checkpoint(os.path.join(run, "best"))
    translator = tfattn.Translator(restore_weights(model, best), *tokenizers, config.decode)
    want = translator(texts)
    assert [t.decode() for t in served["text"].numpy()] == [t.decode() for t in want["text"]]
    np.testing.assert_allclose(served["attention"].numpy(), want["attention"], rtol=1e-5, atol=1e-6)
