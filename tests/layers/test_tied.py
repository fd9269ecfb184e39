"""Tied target embedding and output projection (Press & Wolf 2017; `tfattn.layers.tied`).

The oracle is Keras' own `Dense`: a decoder with `tie_embeddings=True` gives the logits (and, on
its embedding table, the gradients) of the same decoder untied, whose `logits_dense` kernel is set
to the embedding table transposed and bias to the tied bias. Every decoder kind: Bahdanau, Luong
with and without input feeding, the no-attention baseline and the Transformer.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.layers.baseline import NoAttentionDecoder
from tfattn.layers.decoder import Decoder
from tfattn.layers.transformer import TransformerDecoder
from tfattn.model import ModelConfig, Seq2Seq, make_model

SOURCE = np.array([[5, 6, 7, 3, 0], [3, 4, 5, 6, 3]])
TARGET_IN = np.array([[2, 4, 9, 0], [2, 10, 3, 7]])
UNITS, VOCAB = 6, 11

DECODERS = {
    "bahdanau": lambda tied: Decoder(VOCAB, UNITS, UNITS, attention="bahdanau", tie_embeddings=tied),
    "luong-feed": lambda tied: Decoder(VOCAB, UNITS, UNITS, attention="luong", tie_embeddings=tied),
    "luong-nofeed": lambda tied: Decoder(VOCAB, UNITS, UNITS, attention="luong", input_feeding=False,
                                         tie_embeddings=tied),
    "none": lambda tied: NoAttentionDecoder(VOCAB, UNITS, UNITS, tie_embeddings=tied),
    "transformer": lambda tied: TransformerDecoder(VOCAB, UNITS, num_heads=2, ff_dim=8, num_layers=1, max_length=8,
                                                   tie_embeddings=tied),
}


def encoder_outputs():
    outputs = np.random.default_rng(1).normal(size=(2, 5, UNITS)).astype("float32")
    return outputs, {"h": outputs[:, 0]}, SOURCE != 0


def tied_and_untied(kind):
    """A tied decoder with random weights, and the same decoder untied: `logits_dense` = (E^T, bias)."""
    outputs, state, mask = encoder_outputs()
    keras.utils.set_random_seed(0)
    tied, untied = DECODERS[kind](True), DECODERS[kind](False)
    for decoder in (tied, untied):
        decoder(TARGET_IN, outputs, state, mask)
    rng = np.random.default_rng(0)
    for variable in tied.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(variable.dtype))
    # The other weights pair up in order (their sub-layers' automatic names may differ).
    tied_rest = [v for v in tied.weights if not v.path.endswith("logits_bias")]
    untied_rest = [v for v in untied.weights if "logits_dense" not in v.path]
    for mine, theirs in zip(tied_rest, untied_rest, strict=True):
        assert mine.shape == theirs.shape, (mine.path, theirs.path)
        theirs.assign(mine)
    untied.logits_dense.kernel.assign(tf.transpose(tied.embedding.embeddings))
    untied.logits_dense.bias.assign(tied.logits_bias)
    return tied, untied


def _name(variable):
    """`embedding/embeddings`, `logits_dense/kernel`, `logits_bias`: the path inside the decoder."""
    return variable.path.split("/", 1)[1]


@pytest.mark.parametrize("kind", DECODERS)
def test_tied_logits_equal_a_dense_layer_holding_the_transposed_embedding(kind):
    tied, untied = tied_and_untied(kind)
    assert tied.logits_dense is None and len(tied.weights) == len(untied.weights) - 1  # no kernel of its own
    outputs, state, mask = encoder_outputs()
    results = []
    for decoder in (tied, untied):
        with tf.GradientTape() as tape:
            logits, _ = decoder(TARGET_IN, outputs, state, mask)
            loss = tf.reduce_sum(logits * np.linspace(-1, 1, VOCAB))  # an upstream gradient that is not all ones
        named = {_name(v): tf.convert_to_tensor(g).numpy()
                 for v, g in zip(decoder.trainable_weights, tape.gradient(loss, decoder.trainable_weights))}
        results.append((logits.numpy(), named))
    (tied_logits, tied_grads), (logits, grads) = results
    np.testing.assert_allclose(tied_logits, logits, rtol=1e-5, atol=1e-6)
    # The table's gradient: from its lookups plus the projection's kernel gradient, transposed.
    want = grads["embedding/embeddings"] + grads["logits_dense/kernel"].T
    np.testing.assert_allclose(tied_grads["embedding/embeddings"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tied_grads["logits_bias"], grads["logits_dense/bias"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", DECODERS)
def test_a_tied_step_gives_the_teacher_forced_logits(kind):
    tied, _ = tied_and_untied(kind)
    outputs, state, mask = encoder_outputs()
    want, _ = tied(TARGET_IN, outputs, state, mask)
    memory, step_state = tied.prepare_memory(outputs, mask), tied.initial_state(state)
    for t, token in enumerate(TARGET_IN.T):
        logits, _, step_state = tied.step(token, step_state, memory)
        np.testing.assert_allclose(logits.numpy(), want.numpy()[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [lambda: Decoder(VOCAB, 4, UNITS, tie_embeddings=True),
                                  lambda: NoAttentionDecoder(VOCAB, 4, UNITS, tie_embeddings=True)])
def test_an_rnn_decoder_with_embedding_dim_other_than_units_is_refused(make):
    with pytest.raises(ValueError, match="embedding_dim = units. Received: embedding_dim=4, units=6"):
        make()


def test_model_config_ties_every_decoder_and_round_trips():
    for attention in ("bahdanau", "luong", "none", "transformer"):
        sizes = dict(heads=2) if attention == "transformer" else dict(embedding_dim=UNITS)  # its embeddings are units wide
        config = ModelConfig(attention=attention, units=UNITS, tie_embeddings=True, **sizes)
        model = make_model(config, 9, VOCAB)
        model((SOURCE, TARGET_IN))
        assert model.decoder.tie_embeddings and model.decoder.logits_dense is None, attention
        again = Seq2Seq.from_config(json.loads(json.dumps(model.get_config())))
        again((SOURCE, TARGET_IN))
        assert again.decoder.tie_embeddings and len(again.weights) == len(model.weights), attention
    with pytest.raises(ValueError, match="Received: embedding_dim=4, units=6"):
        make_model(ModelConfig(embedding_dim=4, units=UNITS, tie_embeddings=True), 9, VOCAB)
