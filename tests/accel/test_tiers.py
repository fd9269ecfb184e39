"""The fast tier equals the reference tier: outputs and gradients within float32 rounding.

Every model kind is built once with non-zero biases (a bias added twice, or not at all, shows), then
run through the reference calls (`model(...)`, `decoder.step`, `tfattn.model.masked_loss`, Keras's
Adam) and through `tfattn.accel`. Sizes differ on purpose (source vocab 11, target vocab 13,
embeddings 4, units 6) so that a transposed weight cannot pass.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.accel import decoder as fast_decoder
from tfattn.accel import encoder as fast_encoder
from tfattn.accel import losses as fast_losses
from tfattn.accel import seq2seq as fast
from tfattn.data.text import END_ID
from tfattn.search import beam_search, greedy, sample
from tfattn.layers.encoder import Encoder
from tfattn.model import ModelConfig, make_model, masked_loss
from tfattn.training.step import forward_and_loss, make_optimizer, make_train_step
from tfattn.training.trainer import TrainConfig

SOURCE_VOCAB, TARGET_VOCAB = 11, 13
# Sentence 0 has two padding positions in the source and one in the target; sentence 1 none.
SOURCE = np.array([[2, 5, 6, 3, 0, 0], [2, 7, 8, 9, 10, 3]], np.int32)
TARGET = np.array([[2, 4, 9, 3, 0], [2, 12, 5, 7, 3]], np.int32)

KINDS = {
    "bahdanau-gru": dict(attention="bahdanau"),
    "bahdanau-lstm": dict(attention="bahdanau", rnn="lstm"),
    "bahdanau-normalized": dict(attention="bahdanau", normalize=True),
    "luong-feed-gru": dict(attention="luong"),
    "luong-feed-lstm": dict(attention="luong", rnn="lstm"),
    "luong-nofeed-gru": dict(attention="luong", input_feeding=False),
    "luong-nofeed-lstm": dict(attention="luong", input_feeding=False, rnn="lstm"),
    "luong-concat-scaled": dict(attention="luong", score="concat", scale=True),
    "luong-location-2-layers": dict(attention="luong", score="location", num_layers=2, max_source_length=8),
    "bahdanau-unidirectional": dict(attention="bahdanau", bidirectional=False),
    # Tied embeddings (embedding_dim = units): the logits kernel is the embedding table, transposed.
    "bahdanau-tied": dict(attention="bahdanau", tie_embeddings=True, embedding_dim=6),
    "luong-feed-tied": dict(attention="luong", tie_embeddings=True, embedding_dim=6),
    "luong-nofeed-tied-lstm": dict(attention="luong", input_feeding=False, rnn="lstm", tie_embeddings=True,
                                   embedding_dim=6),
}


def model_of(kind, seed=0, dropout=0.0):
    """A built model of `kind` whose every variable is drawn at random, biases included."""
    keras.utils.set_random_seed(seed)
    model = make_model(ModelConfig(**{"embedding_dim": 4, "units": 6, "dropout": dropout, **KINDS[kind]}),
                       SOURCE_VOCAB, TARGET_VOCAB)
    model((SOURCE, TARGET[:, :-1]))
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(variable.dtype))
    return model


def loss_and_gradients(model, accel, training=False):
    with tf.GradientTape() as tape:
        logits, loss = forward_and_loss(model, tf.constant(SOURCE), tf.constant(TARGET), training, accel)
    gradients = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]
    return logits.numpy(), float(loss), gradients


def assert_close(got, want, err_msg=""):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=err_msg)


@pytest.mark.parametrize("kind", KINDS)
def test_forward_and_gradients_equal_the_reference(kind):
    model = model_of(kind)
    reference_logits, reference_attention = model((SOURCE, TARGET[:, :-1]))
    logits, attention = fast.forward(model, SOURCE, TARGET[:, :-1])
    assert_close(logits, reference_logits)
    assert_close(attention, reference_attention)
    # In training (no dropout here) the written-out loops and gradients run.
    ref, got = loss_and_gradients(model, accel=False, training=True), loss_and_gradients(model, True, True)
    assert_close(got[0], ref[0])
    assert got[1] == pytest.approx(ref[1], rel=1e-6)
    for variable, g, r in zip(model.trainable_variables, got[2], ref[2]):
        assert np.abs(r).max() > 0 or variable.path.endswith("embeddings"), variable.path  # each weight matters
        assert_close(g, r, variable.path)


@pytest.mark.parametrize("kind", ["bahdanau-gru", "luong-feed-lstm", "luong-nofeed-gru"])
def test_dropout_draws_the_same_masks_on_both_tiers(kind):
    model = model_of(kind, dropout=0.3)
    seeds = [v.numpy() for v in model.non_trainable_variables]  # the dropout layers' seed generators
    reference = loss_and_gradients(model, accel=False, training=True)
    for variable, value in zip(model.non_trainable_variables, seeds):
        variable.assign(value)  # each tier draws from the same state
    got = loss_and_gradients(model, accel=True, training=True)
    assert_close(got[0], reference[0])
    for g, r in zip(got[2], reference[2]):
        assert_close(g, r)
    # The next draw gives other logits: dropout was on.
    assert np.abs(loss_and_gradients(model, True, True)[0] - got[0]).max() > 1e-3


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional, layers", [(True, 1), (False, 2)])
def test_the_fast_encoder_equals_the_keras_layers(rnn, bidirectional, layers):
    encoder = Encoder(SOURCE_VOCAB, 4, 6, rnn=rnn, bidirectional=bidirectional, num_layers=layers)
    outputs, state, mask = encoder(SOURCE)
    fast_outputs, fast_state, fast_mask = fast_encoder.encode(encoder, SOURCE)
    assert_close(fast_outputs, outputs)
    assert sorted(fast_state) == sorted(state) == (["h"] if rnn == "gru" else ["c", "h"])
    for key in state:
        assert_close(fast_state[key], state[key])
    np.testing.assert_array_equal(fast_mask, mask)
    assert (outputs.numpy()[0, 4:] == 0).all()  # padding gives zero outputs on both


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("token_tables", [False, True])
def test_the_stepper_equals_decoder_step(kind, token_tables):
    model = model_of(kind)
    memory, state = model.encode(SOURCE)
    step = fast_decoder.stepper(model.decoder, fast_decoder.decoding_weights(model.decoder, token_tables))
    fast_state = state
    for token in TARGET.T[:-1]:  # t_out steps, the shifted target's tokens
        logits, weights, state = model.decoder.step(token, state, memory)
        fast_logits, fast_weights, fast_state = step(token, fast_state, memory)
        assert_close(fast_logits, logits)
        assert_close(fast_weights, weights)
        assert sorted(fast_state) == sorted(state)
        for key in state:
            assert_close(fast_state[key], state[key])


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("target", [TARGET[:, 1:], np.zeros((2, 4), np.int32)], ids=["real", "all-padding"])
def test_the_fast_loss_equals_the_reference_loss(target, label_smoothing):
    logits = tf.constant(np.random.default_rng(0).normal(size=(2, 4, TARGET_VOCAB)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        reference = masked_loss(target, logits, label_smoothing=label_smoothing)
        got = fast_losses.masked_loss(target, logits, label_smoothing=label_smoothing)
    assert float(got) == pytest.approx(float(reference), rel=1e-6)
    assert_close(tape.gradient(got, logits), tape.gradient(reference, logits))
    if not target.any():
        assert float(got) == 0.0  # no real token: 0, not NaN


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_twenty_training_steps_give_the_same_losses_on_both_tiers(label_smoothing):
    config = TrainConfig(learning_rate=1e-2)
    losses = {}
    for accel in (False, True):
        model = model_of("bahdanau-gru", seed=3, dropout=0.2)
        keras.utils.set_random_seed(11)  # the same dropout draws on both tiers
        step = make_train_step(model, make_optimizer(config, accel), accel=accel, label_smoothing=label_smoothing)
        losses[accel] = [float(step(SOURCE, TARGET)["loss"]) for _ in range(20)]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)
    assert losses[True][-1] < 0.7 * losses[True][0]  # it trained: the comparison is not of flat lines


@pytest.mark.parametrize("kind", KINDS)
def test_one_sentence_alone_decodes_as_on_the_reference_tier(kind):
    """Greedy search of a batch of one takes the fast tier's own loop, which cuts the sentence's
    padding and masks nothing; the reference loop masks it. Sentence 0 keeps its two padding positions."""
    assert_one_sentence_as_reference(model_of(kind))


def assert_one_sentence_as_reference(model):
    """Each sentence of `SOURCE` alone, greedy on both tiers: the same ids, lengths and attention."""
    for b in range(len(SOURCE)):
        reference, got = greedy(model, SOURCE[b : b + 1], accel=False), greedy(model, SOURCE[b : b + 1], accel=True)
        np.testing.assert_array_equal(got["ids"], reference["ids"])
        np.testing.assert_array_equal(got["length"], reference["length"])
        assert got["attention"].shape == reference["attention"].shape  # (1, t_out, 6): padding's columns too
        assert_close(got["attention"], reference["attention"])
    assert (greedy(model, SOURCE[:1], accel=True)["attention"].numpy()[..., 4:] == 0).all()  # padding: no weight


@pytest.mark.parametrize("kind", ["bahdanau-lstm", "luong-feed-gru", "luong-nofeed-gru"])
def test_decoding_gives_the_same_outputs_on_both_tiers(kind):
    model = model_of(kind)
    for decode in (greedy, lambda m, s, accel: beam_search(m, s, 3, accel=accel),
                   lambda m, s, accel: sample(m, s, seed=5, accel=accel)):
        reference, got = decode(model, SOURCE, accel=False), decode(model, SOURCE, accel=True)
        np.testing.assert_array_equal(got["ids"], reference["ids"])
        assert_close(got["attention"], reference["attention"])
        np.testing.assert_array_equal(got["length"], reference["length"])
        # Not empty: every sentence (and hypothesis) has at least one token and ends in [END].
        ids, length = reference["ids"].numpy(), reference["length"].numpy()
        assert (length >= 1).all() and (np.take_along_axis(ids, length[..., None] - 1, axis=-1) == END_ID).all()


@pytest.mark.long  # both tiers' greedy and beam searches traced and run over the held-out dates: a minute
def test_translators_of_both_tiers_translate_the_held_out_dates_the_same(dates_translator, dates_data):
    from tfattn.serving.translator import Translator

    t = dates_translator
    reference = Translator(t.model, t.source_tokenizer, t.target_tokenizer, t.decode_config, accel=False)
    stored = Translator(t.model, t.source_tokenizer, t.target_tokenizer, t.decode_config, stored_weights=True)
    sources = [s for s, _ in dates_data[1]]
    expected = reference(sources)["text"]
    np.testing.assert_array_equal(t(sources)["text"], expected)
    np.testing.assert_array_equal(stored(sources)["text"], expected)
    np.testing.assert_array_equal(stored.beam(sources[:20])["text"], reference.beam(sources[:20])["text"])
