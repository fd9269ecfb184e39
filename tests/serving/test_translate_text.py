"""The export's `translate_text` signature: the translation alone. Its text is `translate`'s text for
the same input, whatever the input: the dates test set, texts a client may send (blank, huge, not
UTF-8), an empty batch, one sentence at a time, an export that replaces `[UNK]`, and spa-eng TEST
sentences through a word-level Bahdanau model."""

import pytest
import tensorflow as tf

import tfattn
from conftest import shared_data, shared_export
from tfattn.data.corpora import load_anki, split_pairs
from tfattn.data.text import UNK_ID
from tfattn.serving.translator import export, load

ODD = ["tue 5 march 2019", "", "   ", "x" * 10000, b"\xff\xfe\xc3(", "😀 🎉", "a\x00b\x07c"]


def texts(signature, batch):
    """The `text` output of a signature for a list of texts, as a list of bytes."""
    return signature(text=tf.constant(batch, tf.string))["text"].numpy().tolist()


def assert_same_text(loaded, batch):
    """`translate_text` gives `translate`'s text, for the whole batch and for each text alone."""
    whole = texts(loaded.signatures["translate"], batch)
    assert texts(loaded.signatures["translate_text"], batch) == whole
    alone = [texts(loaded.signatures["translate_text"], [text])[0] for text in batch]
    assert alone == whole


def test_only_the_text_comes_out(exported_dates):
    out = shared_export(exported_dates).signatures["translate_text"](text=tf.constant(["5.3.19", "1 may 2020"]))
    assert set(out) == {"text"} and out["text"].shape == (2,) and out["text"].dtype == tf.string


def test_the_text_of_translate_over_the_dates_test(exported_dates, dates_data):
    _, test, _, _ = dates_data
    assert_same_text(shared_export(exported_dates), [source for source, _ in test[:60]])


def test_the_text_of_translate_for_odd_inputs_blank_ones_empty(exported_dates):
    loaded = shared_export(exported_dates)
    assert_same_text(loaded, ODD)
    out = texts(loaded.signatures["translate_text"], ODD)
    assert out[1:3] == [b"", b""]  # no source token: an empty translation
    assert all(out[i] for i in (0, 3, 4, 5, 6))  # the others are translated
    empty = loaded.signatures["translate_text"](text=tf.constant([], tf.string))["text"]
    assert empty.shape == (0,) and empty.dtype == tf.string


def test_the_translator_in_memory_gives_the_same_text(dates_translator):
    batch = tf.constant(["5.3.19", "", "1 may 2020"])
    got = dates_translator.translate_text(batch)["text"].numpy().tolist()
    assert got == dates_translator.translate(batch)["text"].numpy().tolist()


def test_a_translator_that_replaces_unknown_tokens(dates_data):
    """With `replace_unknown`, the text holds the source tokens put in place of `[UNK]`, as `translate`'s
    (the export's signature is this very function). An untrained model whose logits' bias favours
    `[UNK]` emits it at every step."""
    _, _, source, _ = dates_data
    target = tfattn.Tokenizer(["1", "2"], level="char", max_length=8)
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=8, units=16),
                              source.vocab_size, target.vocab_size)
    plain, replacing = (tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=8),
                                          replace_unknown=replace) for replace in (False, True))
    bias = model.decoder.logits_dense.bias
    bias.assign(tf.tensor_scatter_nd_update(bias, [[UNK_ID]], [10.0]))
    batch = tf.constant(ODD[:3] + ["5.3.19", "march 5th 2019", "1 jan 2000"])
    want = replacing.translate(batch)["text"].numpy().tolist()
    assert replacing.translate_text(batch)["text"].numpy().tolist() == want
    real = [0, 3, 4, 5]  # the texts with a source token
    plain = plain.translate(batch)["text"].numpy().tolist()
    assert all(plain[i] and not plain[i].replace(b"[UNK]", b"") for i in real)  # [UNK]s only
    assert all(want[i] and b"[UNK]" not in want[i] for i in real)  # replaced by source characters
    assert want[1:3] == [b"", b""]  # blank texts stay blank


@pytest.mark.long
def test_the_text_of_translate_over_spa_eng_test(tmp_path):
    """An untrained Spanish -> English word model (Bahdanau): 300 TEST sentences spread over the
    split (it is sorted by length), in one batch and one at a time."""
    parts = split_pairs(load_anki(shared_data("spa-eng", "spa.txt")))
    train, test = parts["train"], parts["test"]
    source = tfattn.Tokenizer.adapt([s for s, _ in train[::10]], max_tokens=2000, max_length=40)
    target = tfattn.Tokenizer.adapt([t for _, t in train[::10]], max_tokens=300, max_length=40)
    model = tfattn.make_model(tfattn.ModelConfig(attention="bahdanau", embedding_dim=8, units=16),
                              source.vocab_size, target.vocab_size)
    translator = tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=12))
    loaded = load(export(translator, str(tmp_path / "export")))
    sentences = [s for s, _ in test[:: len(test) // 300]]
    assert_same_text(loaded, sentences)
    assert len(set(texts(loaded.signatures["translate_text"], sentences))) > 30  # varied translations
