"""`TranslationMetrics` (tfattn/training/callbacks.py): validation BLEU and chrF in Keras' logs, where
`EarlyStopping` and `ModelCheckpoint` act on them, and the same scores as tfattn's own validation."""

import keras
import pytest

import tfattn
from tfattn.training.callbacks import TranslationMetrics

sacrebleu = pytest.importorskip("sacrebleu", reason="needs sacrebleu (pip install 'tfattn[eval]')")


def tiny_model(dates_data):
    _, _, source, target = dates_data
    return tfattn.make_model(tfattn.ModelConfig(embedding_dim=8, units=16), source.vocab_size, target.vocab_size)


def fit_with(dates_data, callbacks, epochs=5, learning_rate=0.0):
    """`model.fit` of a tiny model for `epochs` epochs of 4 steps each; returns (model, history)."""
    train, _, source, target = dates_data
    data = tfattn.make_dataset(train[:32], source, target, tfattn.DataConfig(batch_size=8, bucket=False),
                               shuffle=False)
    model = tiny_model(dates_data)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate))
    return model, model.fit(data, epochs=epochs, callbacks=callbacks, verbose=0)


def metrics_of(dates_data, **kwargs):
    _, test, source, target = dates_data
    return TranslationMetrics(test[:40], source, target, tfattn.DecodeConfig(max_length=14), sample=8, **kwargs)


def test_early_stopping_and_model_checkpoint_act_on_val_bleu(dates_data, tmp_path):
    # A learning rate of 0: the weights, so the translations and the scores, are the same every epoch.
    # Epoch 1 is an improvement on nothing (ModelCheckpoint saves it), epoch 2 is not (equal is not
    # better), so EarlyStopping with patience 1 stops there; without val_bleu in the logs, both
    # would only warn: 5 epochs, no file.
    metrics = metrics_of(dates_data)
    stop = keras.callbacks.EarlyStopping(monitor="val_bleu", mode="max", patience=1)
    save = keras.callbacks.ModelCheckpoint(str(tmp_path / "best-{epoch}.weights.h5"), monitor="val_chrf",
                                           mode="max", save_best_only=True, save_weights_only=True)
    _, history = fit_with(dates_data, [metrics, stop, save])
    assert len(history.history["loss"]) == 2 and stop.stopped_epoch == 1  # 0-based: the second epoch
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best-1.weights.h5"]
    assert history.history["val_bleu"][0] == history.history["val_bleu"][1]


def test_the_logs_hold_sacrebleus_scores_of_the_sample(dates_data):
    metrics = metrics_of(dates_data)
    _, history = fit_with(dates_data, [metrics], epochs=1, learning_rate=1e-2)
    _, test, _, _ = dates_data
    sample = [test[i * 5] for i in range(8)]  # 8 evenly spaced of 40
    assert metrics.last["sources"] == [s for s, _ in sample]
    references = [t for _, t in sample]
    hypotheses = metrics.last["hypotheses"]
    assert history.history["val_bleu"] == [pytest.approx(
        sacrebleu.BLEU(lowercase=True).corpus_score(hypotheses, [references]).score)]
    assert history.history["val_chrf"] == [pytest.approx(
        sacrebleu.CHRF(lowercase=True).corpus_score(hypotheses, [references]).score)]
    assert history.history["val_chrf"][0] > 0  # digits and dashes in common with the references


def test_the_translations_are_the_translators(dates_data):
    # Greedy search of the model itself, as an export's `translate` gives it.
    _, test, source, target = dates_data
    model = tiny_model(dates_data)
    metrics = metrics_of(dates_data, model=model, prefix="dev_")
    assert set(metrics.scores()) == {"dev_bleu", "dev_chrf"}
    translated = tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))(metrics.last["sources"])
    assert metrics.last["hypotheses"] == [t.decode("utf-8") for t in translated["text"]]


def test_tfattns_validation_scores_through_the_callback(dates_data):
    from tfattn.training.step import make_eval_step
    from tfattn.training.validation import Validator

    _, test, source, target = dates_data
    model = tiny_model(dates_data)
    data = tfattn.make_dataset(test[:16], source, target, tfattn.DataConfig(batch_size=8, bucket=False), shuffle=False)
    validator = Validator(model, make_eval_step(model), data, test[:40], (source, target),
                          tfattn.DecodeConfig(max_length=14), sample=8)
    logs = validator()
    alone = metrics_of(dates_data, model=model).scores()
    assert isinstance(validator.metrics, TranslationMetrics)
    assert {k: logs[k] for k in alone} == alone


@pytest.mark.parametrize("kwargs, message", [
    ({"sample": -1}, "sample must be an int >= 0. Received: sample=-1"),
    ({"pairs": []}, "pairs must hold at least one"),
])
def test_bad_arguments_are_refused(dates_data, kwargs, message):
    _, test, source, target = dates_data
    arguments = {"pairs": test[:4], "source_tokenizer": source, "target_tokenizer": target, **kwargs}
    with pytest.raises(ValueError, match=message):
        TranslationMetrics(**arguments)
