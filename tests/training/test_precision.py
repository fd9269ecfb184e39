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
from tfattn.training.precision import (CPU_FLAGS, PRECISIONS, auto_precision, cpu_flags, precision_scope,
                                      resolve_precision)
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
def test_the_fast_tier_trains_float32_and_bfloat16(precision, accel):
    with tfattn.tier.accel_scope(True):
        want = (accel is not False) and precision in ("float32", "mixed_bfloat16")
        assert fast.choose(accel, None, precision) == want


@pytest.mark.parametrize("precision, tier, optimizer", [("mixed_float16", False, "LossScaleOptimizer"),
                                                        ("mixed_bfloat16", True, "FusedAdam")])
def test_the_tier_a_trainer_runs_under_a_mixed_policy(dates_data, precision, tier, optimizer):
    model = dates_model(dates_data, precision)
    trainer = Trainer(model, TrainConfig(precision=precision, accel=True), quiet=True)
    assert trainer.config.accel is tier
    assert type(trainer.optimizer).__name__ == optimizer  # float16: Keras's Adam, loss-scaled


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_a_trainer_given_auto_takes_the_models_policy(dates_data, precision):
    trainer = Trainer(dates_model(dates_data, precision), TrainConfig(), quiet=True)  # precision="auto"
    assert (trainer.config.precision, trainer.config.precision_asked) == (precision, "auto")


def test_a_model_made_in_another_precision_is_refused(dates_data):
    model = dates_model(dates_data, "float32")
    with pytest.raises(ValueError, match=r"make the model inside tfattn.training.precision.precision_scope"
                                         r"\('mixed_float16'\). Received: precision='mixed_float16'"):
        Trainer(model, TrainConfig(precision="mixed_float16"), quiet=True)


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of .* Received: precision='float16'"):
        TrainConfig(precision="float16")


@pytest.mark.long  # minutes of runs: make test-long
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
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


# -- what "auto" picks --------------------------------------------------------------------------------

def cpuinfo(*flags):
    """The text of a /proc/cpuinfo whose two processors have `flags`."""
    line = "flags\t\t: fpu vme sse sse2 " + " ".join(flags)
    return "\n\n".join(f"processor\t: {i}\nmodel name\t: a CPU\n{line}" for i in range(2)) + "\n"


@pytest.mark.parametrize("flags, gpu, want", [
    (("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"), False, "mixed_bfloat16"),  # Sapphire Rapids
    (("avx2", "avx512f", "avx512_bf16"), False, "float32"),  # Zen 4 / Cooper Lake: AVX-512 BF16, no AMX
    (("avx2", "fma"), False, "float32"),
    ((), False, "float32"),
    (("avx2",), True, "mixed_bfloat16"),  # a GPU of compute capability 8.0 or more
])
def test_auto_picks_bfloat16_where_the_hardware_computes_it(flags, gpu, want):
    precision, reason = auto_precision(cpuinfo(*flags), gpu_bf16=gpu)
    assert precision == want
    assert resolve_precision("auto", cpuinfo(*flags), gpu) == want
    assert resolve_precision("float32", cpuinfo(*flags), gpu) == "float32"  # only "auto" is resolved
    if want == "float32":
        assert "amx_bf16 no" in reason and "gpu_bf16 no" in reason  # the line says what was looked for


def test_the_cpu_flags_read_from_cpuinfo_text():
    assert cpu_flags(cpuinfo("avx2", "avx512_bf16")) == {"amx_bf16": False, "avx512_bf16": True,
                                                          "avx512f": False, "avx2": True}
    assert cpu_flags(cpuinfo("amx_bf16_extra")) == dict.fromkeys(CPU_FLAGS, False)  # whole names only
    assert cpu_flags("") == dict.fromkeys(CPU_FLAGS, False)


def test_the_table_is_read_in_order(monkeypatch):
    from tfattn.training import precision as precisions

    # One more row (as the lead may add after measuring): avx512_bf16 machines pick bfloat16 too.
    monkeypatch.setattr(precisions, "AUTO", precisions.AUTO + (("avx512_bf16", "mixed_bfloat16"),))
    assert auto_precision(cpuinfo("avx512_bf16"), gpu_bf16=False) == ("mixed_bfloat16", "avx512_bf16 present")


def test_a_run_config_resolves_auto_and_says_it_was_asked():
    from tfattn.runs.config import RunConfig

    config = RunConfig()  # train.precision "auto"
    assert config.train.precision == auto_precision()[0] and config.train.precision_asked == "auto"
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))  # config.json, read back
    assert (again.train.precision, again.train.precision_asked) == (config.train.precision, "auto")
    given = RunConfig(train=TrainConfig(precision="float32"))
    assert (given.train.precision, given.train.precision_asked) == ("float32", None)
