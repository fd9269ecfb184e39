"""The attention zoo with the fast tier switched on: `adapter.attention_kind` refuses what `tfattn.accel` does not
write out (the cosine score, local windows, hard attention), so those layers run their own call inside
the fast decoder (local-m given its step from the state), hard attention trains by the reference
decoder, and every number equals the reference tier's.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import adapter
from tfattn.accel import decoder as fast_decoder
from tfattn.accel import seq2seq as fast
from tfattn.search import beam_search, greedy, sample
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.model import Seq2Seq
from tfattn.training.step import forward_and_loss, make_optimizer, make_train_step
from tfattn.training.trainer import TrainConfig

from test_tiers import assert_one_sentence_as_reference

SOURCE_VOCAB, TARGET_VOCAB = 11, 13
SOURCE = np.array([[2, 5, 6, 3, 0, 0], [2, 7, 8, 9, 10, 3]], np.int32)
TARGET = np.array([[2, 4, 9, 3, 0], [2, 12, 5, 7, 3]], np.int32)

# (style, input_feeding, attention layer factory)
KINDS = {
    "cosine-feed": ("luong", True, lambda: LuongAttention("cosine")),
    "local-m-feed": ("luong", True, lambda: LuongAttention("general", local="m", window=1)),
    "local-m-nofeed": ("luong", False, lambda: LuongAttention("dot", local="m", window=2)),
    "local-p-feed": ("luong", True, lambda: LuongAttention("concat", local="p", window=1)),
    "hard-luong": ("luong", True, lambda: LuongAttention("general", probability="hard", seed=3)),
    "hard-local-p-nofeed": ("luong", False, lambda: LuongAttention("general", local="p", probability="hard", seed=3)),
    "hard-bahdanau": ("bahdanau", True, lambda: BahdanauAttention(6, probability="hard", seed=3)),
}


def model_of(kind, seed=0):
    """A built Seq2Seq of `kind` (embeddings 4, units 6) with every variable drawn at random."""
    style, input_feeding, attention = KINDS[kind]
    keras.utils.set_random_seed(seed)
    encoder = Encoder(SOURCE_VOCAB, 4, 6, name="encoder")
    decoder = Decoder(TARGET_VOCAB, 4, 6, attention=style, attention_layer=attention(), input_feeding=input_feeding,
                      name="decoder")
    model = Seq2Seq(encoder, decoder)
    model((SOURCE, TARGET[:, :-1]))
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(variable.dtype))
    return model


def assert_close(got, want, err_msg=""):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=err_msg)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_kind_refuses_the_zoo(kind):
    assert adapter.attention_kind(KINDS[kind][2]()) is None
    assert adapter.attention_kind(LuongAttention("general")) == "luong"  # the written-out path stays


def loss_and_gradients(model, accel, training):
    with tf.GradientTape() as tape:
        logits, loss = forward_and_loss(model, tf.constant(SOURCE), tf.constant(TARGET), training, accel)
    return logits.numpy(), float(loss), [tf.convert_to_tensor(g).numpy()
                                         for g in tape.gradient(loss, model.trainable_variables)]


@pytest.mark.parametrize("kind", KINDS)
def test_forward_and_gradients_equal_the_reference(kind):
    model = model_of(kind)
    reference_logits, reference_attention = model((SOURCE, TARGET[:, :-1]))
    logits, attention = fast.forward(model, SOURCE, TARGET[:, :-1])
    assert_close(logits, reference_logits)
    assert_close(attention, reference_attention)
    seeds = [v.numpy() for v in model.non_trainable_variables]  # hard attention's seed state
    reference = loss_and_gradients(model, accel=False, training=True)
    for variable, value in zip(model.non_trainable_variables, seeds):
        variable.assign(value)  # both tiers draw from the same state
    got = loss_and_gradients(model, accel=True, training=True)
    assert_close(got[0], reference[0])
    assert got[1] == pytest.approx(reference[1], rel=1e-6)
    for variable, g, r in zip(model.trainable_variables, got[2], reference[2]):
        assert_close(g, r, variable.path)


@pytest.mark.parametrize("kind", ["local-m-feed", "local-p-feed", "hard-bahdanau"])
@pytest.mark.parametrize("token_tables", [False, True])
def test_the_stepper_equals_decoder_step(kind, token_tables):
    model = model_of(kind)
    memory, state = model.encode(SOURCE)
    step = fast_decoder.stepper(model.decoder, fast_decoder.decoding_weights(model.decoder, token_tables))
    fast_state = state
    for token in TARGET.T[:-1]:
        logits, weights, state = model.decoder.step(token, state, memory)
        fast_logits, fast_weights, fast_state = step(token, fast_state, memory)
        assert_close(fast_logits, logits)
        assert_close(fast_weights, weights)
        assert sorted(fast_state) == sorted(state)
        for key in state:
            assert_close(fast_state[key], state[key], key)


@pytest.mark.parametrize("kind", KINDS)
def test_one_sentence_alone_decodes_as_on_the_reference_tier(kind):
    """Greedy search of a batch of one takes the fast tier's own loop, which cuts the sentence's
    padding and masks nothing; the reference loop masks it. Sentence 0 keeps its two padding positions."""
    assert_one_sentence_as_reference(model_of(kind))


@pytest.mark.parametrize("kind", ["local-m-feed", "hard-local-p-nofeed", "cosine-feed"])
def test_decoding_gives_the_same_outputs_on_both_tiers(kind):
    model = model_of(kind)
    for decode in (greedy, lambda m, s, accel: beam_search(m, s, 3, accel=accel),
                   lambda m, s, accel: sample(m, s, seed=5, accel=accel)):
        reference, got = decode(model, SOURCE, accel=False), decode(model, SOURCE, accel=True)
        np.testing.assert_array_equal(got["ids"], reference["ids"])
        assert_close(got["attention"], reference["attention"])
        np.testing.assert_array_equal(got["length"], reference["length"])


@pytest.mark.parametrize("kind", [pytest.param("local-m-feed", marks=pytest.mark.long), "hard-luong"])
def test_a_train_step_gives_the_same_loss_on_both_tiers(kind):
    losses = {}
    for accel in (False, True):
        model = model_of(kind, seed=3)
        step = make_train_step(model, make_optimizer(TrainConfig(learning_rate=1e-2), accel), accel=accel)
        losses[accel] = [float(step(SOURCE, TARGET)["loss"]) for _ in range(2)]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)


@pytest.mark.long
def test_an_export_with_stored_weights_translates_as_the_reference(tmp_path):
    # The stored decoding weights fold the decoder's own layers; the attention layer (local-m's step in the
    # state, hard attention's argmax) runs its own call on its own variables, which the export tracks.
    from tfattn.data import dates
    from tfattn.data.text import Tokenizer
    from tfattn.search import DecodeConfig
    from tfattn.serving.translator import Translator, export

    train, test = dates.make_corpus(300, 5, seed=0)
    source = Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
    target = Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
    texts = tf.constant([s for s, _ in test])
    for name, layer in [("local-m", LuongAttention("general", local="m", window=2)),
                        ("hard-local-p", LuongAttention("cosine", local="p", probability="hard"))]:
        keras.utils.set_random_seed(0)
        model = Seq2Seq(Encoder(source.vocab_size, 8, 16), Decoder(target.vocab_size, 8, 16, attention="luong",
                                                                     attention_layer=layer))
        config = DecodeConfig(max_length=14)
        reference = Translator(model, source, target, config, accel=False)(texts)
        stored = Translator(model, source, target, config, stored_weights=True)
        loaded = tf.saved_model.load(export(stored, str(tmp_path / name)))
        got = loaded.signatures["translate"](text=texts)
        np.testing.assert_array_equal(got["text"], reference["text"])
        assert_close(got["attention"], reference["attention"])
