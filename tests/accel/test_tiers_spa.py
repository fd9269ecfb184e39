"""The two tiers' exports of one spa-eng model translate the whole TEST split the same.

A word-level Bahdanau model is trained briefly on the fixed TRAIN split (by a fixed number of steps,
not by time, so that every run trains the same model), exported once with `accel=True` and once with
`accel=False`, and both exports, reloaded from disk, translate all 2,380 TEST sentences with greedy
decoding and with beam 4 (best texts, scores and the n-best lists). Its target vocabulary has more
than 1,024 words, so the fast tier's beam search takes its blocked top-k. Marked slow and long:
`make test-long` runs it, and `.ci/run` runs that.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import shared_data

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.fixture(scope="module")
def spa_exports(tmp_path_factory):
    import tfattn
    from tfattn.data.corpora import load_anki, split_pairs
    from tfattn.training.trainer import TrainConfig, fit

    keras.utils.set_random_seed(0)  # a module fixture runs before the per-test seeding, after any other test
    splits = split_pairs(load_anki(str(shared_data("spa-eng", "spa.txt"))))
    train = splits["train"]
    make = lambda texts: tfattn.Tokenizer.adapt(texts, max_tokens=2000, level="word", max_length=30)  # noqa: E731
    source, target = make([s for s, _ in train]), make([t for _, t in train])
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=64, units=64),
                              source.vocab_size, target.vocab_size)
    dataset = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=64))
    # 1,200 steps: at 300 or 600 steps the model still answers almost every sentence alike (loss ~4.3).
    # The warm-up: without it, one seed in three left the model answering every sentence with the empty
    # text (loss stuck at 5.2); with 200 steps of it, each of three seeds learned (loss 3.8-3.9).
    fit(model, dataset, TrainConfig(learning_rate=5e-3, epochs=1, steps_per_epoch=1200, warmup_steps=200),
        quiet=True)
    root = tmp_path_factory.mktemp("spa-tiers")
    exports = {accel: tfattn.load(tfattn.export(tfattn.Translator(model, source, target, accel=accel),
                                                str(root / f"accel-{accel}")))
               for accel in (True, False)}
    return exports, [s for s, _ in splits["test"]], target.vocab_size


def translate_all(signature, texts, keys=("text",), **inputs):
    """`{key: array}` of `signature` over `texts` in batches of 64 (n-best lists padded to `beam`)."""
    inputs = {k: tf.constant(v) for k, v in inputs.items()}
    outs = [signature(text=tf.constant(texts[i : i + 64]), **inputs) for i in range(0, len(texts), 64)]
    return {key: np.concatenate([out[key].numpy() for out in outs]) for key in keys}


def test_both_exports_translate_every_test_sentence_the_same_greedy(spa_exports):
    exports, test, _ = spa_exports
    assert len(test) == 2380
    fast, reference = (translate_all(exports[accel].signatures["translate"], test)["text"] for accel in (True, False))
    differ = [(test[i], fast[i], reference[i]) for i in np.flatnonzero(fast != reference)]
    assert differ == []
    assert len(set(fast.tolist())) > 100  # a trained model: many different translations, not one


def test_both_exports_give_the_same_beam_search_hypotheses(spa_exports):
    from tfattn.accel.decoding import TOP_K_BLOCKED

    exports, test, vocab = spa_exports
    assert vocab > TOP_K_BLOCKED  # the fast tier's two-pass top-k runs
    beam, keys = {"beam_width": 4, "length_penalty": 0.6}, ("text", "score", "nbest_text", "nbest_score")
    fast, reference = (translate_all(exports[accel].signatures["translate_beam"], test, keys, **beam)
                       for accel in (True, False))
    assert fast["nbest_text"].shape == (2380, 4)
    for key in ("text", "nbest_text"):
        differ = np.flatnonzero((fast[key] != reference[key]).reshape(len(test), -1).any(axis=1))
        assert [test[i] for i in differ] == [], key
    for key in ("score", "nbest_score"):
        np.testing.assert_allclose(fast[key], reference[key], rtol=1e-4, atol=1e-4, err_msg=key)
    assert len(set(fast["text"].tolist())) > 100
