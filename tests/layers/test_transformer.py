"""The Transformer encoder and decoder: a NumPy oracle of the encoder (Vaswani et al. 2017, section
3.1-3.5), padding, the encoder under the RNN decoder, stepping with the key/value cache equal to
teacher forcing, causality, greedy and beam search through the one decoding loop, padding invariance,
training, and the Keras conventions.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

from multihead_oracles import np_feed_forward, np_layer_norm, np_multihead, np_sinusoids
from tfattn import search
from tfattn.decoding.loop import DecodeConfig
from tfattn.layers.luong import LuongAttention
from tfattn.accel import seq2seq as fast
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.positions import RelativePositions
from tfattn.layers.transformer import TransformerDecoder, TransformerEncoder, transformer_layers
from tfattn.model import Seq2Seq
from tfattn.training.step import make_train_step

SOURCE = np.array([[5, 6, 7, 3, 0, 0], [3, 4, 5, 6, 8, 3]])  # sentence 0: two padding positions
TARGET_IN = np.array([[2, 4, 9, 11, 0], [2, 12, 3, 7, 7]])  # t_out 5
POSITIONS = ["sinusoidal", "learned", "relative", "none"]
SMALL = dict(units=8, heads=2, ff_dim=16, num_layers=2)


def clip(positions):
    """Relative positions clipped at 2 (relative_clip is refused with other positions)."""
    return {"relative_clip": 2} if positions == "relative" else {}


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def transformer(positions="sinusoidal", max_length=8, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    settings = {**SMALL, **clip(positions), **kwargs}
    encoder, decoder = transformer_layers(30, 20, positions=positions, max_length=max_length, **settings)
    if max_length < SOURCE.shape[1]:  # the encoder covers SOURCE: learned positions past max_length are refused
        encoder = transformer_layers(30, 20, positions=positions, max_length=SOURCE.shape[1], **settings)[0]
    model = Seq2Seq(encoder, decoder)
    model((SOURCE, TARGET_IN))
    return model


# -- encoder ----------------------------------------------------------------------------------------


def np_encoder(encoder, source):
    """One block, from Vaswani section 3.1-3.5, with layer norm first (`norm_first=True`) or after
    each residual; the encoder's weights read by name."""
    w = {v.path.split("/", 1)[1]: to_numpy(v).astype("float64") for v in encoder.weights}
    mask = source != 0
    x = w["embedding/embeddings"][source] * np.sqrt(8) + np_sinusoids(range(source.shape[1]), 8)
    attention = lambda h: np_multihead(h, h, h, w["block_0/self_attention/query_kernel"],
                                       w["block_0/self_attention/key_kernel"], w["block_0/self_attention/value_kernel"],
                                       w["block_0/self_attention/output_kernel"], mask[:, None, :])[0]
    ffn = lambda h: np_feed_forward(h, w["block_0/ff_hidden/kernel"], w["block_0/ff_hidden/bias"],
                                    w["block_0/ff_out/kernel"], w["block_0/ff_out/bias"])
    norm = lambda h, name: np_layer_norm(h, w[f"{name}/gamma"], w[f"{name}/beta"])
    if encoder.norm_first:
        x = x + attention(norm(x, "block_0/norm_0"))
        x = norm(x + ffn(norm(x, "block_0/norm_1")), "final_norm")
    else:
        x = norm(x + attention(x), "block_0/norm_0")
        x = norm(x + ffn(x), "block_0/norm_1")
    x = np.where(mask[:, :, None], x, 0.0)
    return x, x.sum(1) / mask.sum(1, keepdims=True)


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_matches_the_numpy_transformer_block(norm_first):
    encoder = TransformerEncoder(30, 8, num_heads=2, ff_dim=16, num_layers=1, norm_first=norm_first)
    encoder(SOURCE)
    rng = np.random.default_rng(0)
    for variable in encoder.weights:  # every weight random, layer norms' gains and biases too
        variable.assign(rng.normal(scale=0.5, size=variable.shape))
    outputs, state, mask = encoder(SOURCE)
    want_outputs, want_h = np_encoder(encoder, SOURCE)
    np.testing.assert_allclose(to_numpy(outputs), want_outputs, atol=1e-4)
    np.testing.assert_allclose(to_numpy(state["h"]), want_h, atol=1e-4)
    np.testing.assert_array_equal(to_numpy(mask), SOURCE != 0)


def np_decoder(decoder, target_in, outputs, source_mask):
    """One decoder block (Vaswani section 3.1: masked self-attention, attention over the encoder
    outputs, feed-forward), layer norm first then a final norm (`norm_first=True`), or the paper's
    `LayerNorm(x + Sublayer(x))` after each residual; then the vocabulary projection."""
    w = {v.path.split("/", 1)[1]: to_numpy(v).astype("float64") for v in decoder.weights}
    kernels = lambda name: [w[f"block_0/{name}/{k}_kernel"] for k in ("query", "key", "value", "output")]
    norm = lambda h, name: np_layer_norm(h, w[f"{name}/gamma"], w[f"{name}/beta"])
    t_out = target_in.shape[1]
    x = w["embedding/embeddings"][target_in] * np.sqrt(8) + np_sinusoids(range(t_out), 8)
    causal = np.tril(np.ones((t_out, t_out), bool))
    self_attention = lambda h: np_multihead(h, h, h, *kernels("self_attention"), causal)[0]
    cross_attention = lambda h: np_multihead(h, outputs, outputs, *kernels("cross_attention"), source_mask[:, None, :])
    ffn = lambda h: np_feed_forward(h, w["block_0/ff_hidden/kernel"], w["block_0/ff_hidden/bias"],
                                    w["block_0/ff_out/kernel"], w["block_0/ff_out/bias"])
    if decoder.norm_first:
        x = x + self_attention(norm(x, "block_0/norm_0"))
        context, cross = cross_attention(norm(x, "block_0/norm_1"))
        x = x + context
        x = norm(x + ffn(norm(x, "block_0/norm_2")), "final_norm")
    else:
        x = norm(x + self_attention(x), "block_0/norm_0")
        context, cross = cross_attention(x)
        x = norm(x + context, "block_0/norm_1")
        x = norm(x + ffn(x), "block_0/norm_2")
    logits = x @ w["logits_dense/kernel"] + w["logits_dense/bias"]
    return logits, cross.mean(axis=1)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_matches_the_numpy_transformer_block(norm_first):
    decoder = TransformerDecoder(20, 8, num_heads=2, ff_dim=16, num_layers=1, norm_first=norm_first)
    outputs = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    state = {"h": outputs[:, 0]}
    decoder(TARGET_IN, outputs, state, SOURCE != 0)
    rng = np.random.default_rng(0)
    for variable in decoder.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape))
    logits, attention = map(to_numpy, decoder(TARGET_IN, outputs, state, SOURCE != 0))
    want_logits, want_attention = np_decoder(decoder, TARGET_IN, outputs.astype("float64"), SOURCE != 0)
    np.testing.assert_allclose(logits, want_logits, atol=1e-4)
    np.testing.assert_allclose(attention, want_attention, atol=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_model_config_norm_builds_pre_or_post_norm_stacks(norm):
    from tfattn.model import ModelConfig, make_model

    model = make_model(ModelConfig(attention="transformer", heads=2, units=8, norm=norm), 30, 20)
    assert model.encoder.norm_first == model.decoder.norm_first == (norm == "pre")
    assert all(block.norm_first == (norm == "pre") for block in model.encoder.blocks + model.decoder.blocks)
    with pytest.raises(ValueError, match="Received: norm='middle'"):
        ModelConfig(attention="transformer", norm="middle")
    # Every weight takes part: a post-norm stack has no final norm (its gradient would be None).
    model((SOURCE, TARGET_IN))
    with tf.GradientTape() as tape:
        logits, _ = model((SOURCE, TARGET_IN), training=True)
        loss = tf.reduce_sum(logits ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads), [v.path for v, g in zip(model.trainable_variables, grads) if g is None]
    assert (model.encoder.final_norm is None) == (norm == "post")


@pytest.mark.parametrize("positions", POSITIONS)
def test_encoder_outputs_do_not_depend_on_padding(positions):
    keras.utils.set_random_seed(0)
    encoder = TransformerEncoder(30, **SMALL, **clip(positions), positions=positions, max_length=8)
    outputs, state, _ = encoder(SOURCE)
    alone, alone_state, _ = encoder(SOURCE[:1, :4])  # sentence 0 without its padding
    np.testing.assert_allclose(to_numpy(outputs)[0, :4], to_numpy(alone)[0], atol=1e-5)
    np.testing.assert_allclose(to_numpy(state["h"])[0], to_numpy(alone_state["h"])[0], atol=1e-5)
    assert (to_numpy(outputs)[0, 4:] == 0).all()


@pytest.mark.parametrize("style", ["luong", "bahdanau"])
def test_the_rnn_decoders_attend_over_the_transformer_encoder_unchanged(style):
    keras.utils.set_random_seed(0)
    attention = LuongAttention("general") if style == "luong" else None
    model = Seq2Seq(TransformerEncoder(30, **SMALL), Decoder(20, 4, 8, attention=style, attention_layer=attention))
    logits, weights = map(to_numpy, model((SOURCE, TARGET_IN)))
    assert logits.shape == (2, 5, 20) and weights.shape == (2, 5, 6)
    assert (weights[0, :, 4:] == 0).all(), "the encoder's mask reaches the RNN decoder's attention"
    ids = to_numpy(search.greedy(model, SOURCE, config=DecodeConfig(max_length=6), accel=False)["ids"])
    assert ids.shape[0] == 2


def test_encoder_outputs_carry_the_keras_mask_and_the_decoder_takes_it():
    encoder, decoder = transformer_layers(30, 20, **SMALL)
    outputs, state, _ = encoder(SOURCE)
    np.testing.assert_array_equal(to_numpy(outputs._keras_mask), SOURCE != 0)
    _, attention = decoder(TARGET_IN, outputs, state)  # no mask passed: Keras passes the outputs' own
    assert (to_numpy(attention)[0, :, 4:] == 0).all()


# -- decoder ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_length", [5, 8])  # 5: the cache is exactly full after the last step
@pytest.mark.parametrize("positions", POSITIONS)
def test_stepping_with_the_cache_equals_teacher_forcing(positions, max_length):
    model = transformer(positions, max_length)
    logits, attention = map(to_numpy, model((SOURCE, TARGET_IN)))
    memory, state = model.encode(SOURCE)
    for t in range(TARGET_IN.shape[1]):
        step_logits, step_weights, state = model.decoder.step(TARGET_IN[:, t], state, memory)
        np.testing.assert_allclose(to_numpy(step_logits), logits[:, t], atol=1e-5, err_msg=f"t={t}")
        np.testing.assert_allclose(to_numpy(step_weights), attention[:, t], atol=1e-6, err_msg=f"t={t}")
    np.testing.assert_array_equal(to_numpy(state["position"]), [5, 5])
    assert to_numpy(state["keys"][0]).shape == (2, 2, max_length, 4)


def test_stepping_equals_teacher_forcing_with_the_papers_post_norm():
    model = transformer("relative", norm_first=False)
    logits, _ = model((SOURCE, TARGET_IN))
    memory, state = model.encode(SOURCE)
    for t in range(TARGET_IN.shape[1]):
        step_logits, _, state = model.decoder.step(TARGET_IN[:, t], state, memory)
        np.testing.assert_allclose(to_numpy(step_logits), to_numpy(logits)[:, t], atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
def test_decoder_is_causal(positions):
    # A later target token changes nothing before it.
    model = transformer(positions)
    changed = TARGET_IN.copy()
    changed[:, 3] = 13
    logits, _ = model((SOURCE, TARGET_IN))
    logits2, _ = model((SOURCE, changed))
    np.testing.assert_allclose(to_numpy(logits2)[:, :3], to_numpy(logits)[:, :3], atol=1e-6)
    assert not np.allclose(to_numpy(logits2)[:, 3:], to_numpy(logits)[:, 3:], atol=1e-3)


def test_attention_is_the_last_blocks_cross_attention_averaged_over_heads():
    model = transformer()
    _, attention = model((SOURCE, TARGET_IN))
    outputs, _, mask = model.encoder(SOURCE)
    heads = to_numpy(model.decoder.cross_attention_heads(TARGET_IN, outputs, mask))
    assert heads.shape == (2, 2, 2, 5, 6)  # (batch, num_layers, heads, t_out, t_in)
    np.testing.assert_allclose(to_numpy(attention), heads[:, -1].mean(axis=1), atol=1e-6)
    assert (heads[0, ..., 4:] == 0).all(), "source padding gets exactly 0 in every layer and head"
    np.testing.assert_allclose(heads.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
def test_float16_is_finite_and_padding_still_gets_exactly_zero(positions):
    keras.utils.set_random_seed(0)
    encoder, decoder = transformer_layers(30, 20, positions=positions, max_length=8, dtype="float16", **SMALL,
                                          **clip(positions))
    logits, attention = map(to_numpy, Seq2Seq(encoder, decoder)((SOURCE, TARGET_IN)))
    assert logits.dtype == "float16" and np.isfinite(logits).all()
    assert (attention[0, :, 4:] == 0).all()
    np.testing.assert_allclose(attention.astype("float64").sum(-1), 1.0, atol=5 * 2.0**-11)


def test_decoder_logits_do_not_depend_on_source_padding():
    model = transformer("relative")
    logits, _ = model((SOURCE, TARGET_IN))
    alone, _ = model((SOURCE[:1, :4], TARGET_IN[:1]))
    np.testing.assert_allclose(to_numpy(alone)[0], to_numpy(logits)[0], atol=1e-5)


# -- decoding through the one loop ------------------------------------------------------------------

CONFIG = DecodeConfig(max_length=8)


@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
def test_greedy_and_beam_search_translate_a_sentence_the_same_alone_and_in_a_padded_batch(positions):
    model = transformer(positions)
    greedy = to_numpy(search.greedy(model, SOURCE, config=CONFIG, accel=False)["ids"])
    alone = to_numpy(search.greedy(model, SOURCE[:1, :4], config=CONFIG, accel=False)["ids"])
    np.testing.assert_array_equal(alone[0], greedy[0, :alone.shape[1]])
    beam = search.beam_search(model, SOURCE, beam_width=3, config=CONFIG, accel=False)
    beam_alone = search.beam_search(model, SOURCE[:1, :4], beam_width=3, config=CONFIG, accel=False)
    ids, ids_alone = to_numpy(beam["ids"]), to_numpy(beam_alone["ids"])
    np.testing.assert_array_equal(ids_alone[0], ids[0, :, :ids_alone.shape[2]])
    np.testing.assert_allclose(to_numpy(beam_alone["scores"])[0], to_numpy(beam["scores"])[0], atol=1e-5)
    # Beam 1 is greedy search.
    one = search.beam_search(model, SOURCE, beam_width=1, length_penalty=0.0, config=CONFIG, accel=False)
    np.testing.assert_array_equal(to_numpy(one["ids"])[:, 0], greedy)


@pytest.mark.parametrize("positions", ["learned", "relative"])
def test_decoding_past_max_length_is_refused_by_name(positions):
    # The cache holds max_length positions: a longer DecodeConfig.max_length is refused up front.
    model = transformer(positions, max_length=5)
    with pytest.raises(ValueError, match=r"decoder's max_length \(5: .*Received: max_length=9"):
        search.greedy(model, SOURCE, config=DecodeConfig(max_length=9, ratio=0.0, extra=9), accel=False)
    out = search.greedy(model, SOURCE, config=DecodeConfig(max_length=5, ratio=0.0, extra=9), accel=False)
    assert to_numpy(out["ids"]).shape[1] <= 5


def test_decoding_inside_a_tf_function_of_any_batch_and_length():
    model = transformer("learned")
    signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    decode = tf.function(lambda source, width: search.beam_search(model, source, width, config=CONFIG, accel=False),
                         input_signature=signature)
    eager = search.beam_search(model, SOURCE, beam_width=2, config=CONFIG, accel=False)
    traced = decode(tf.constant(SOURCE, tf.int32), tf.constant(2))
    np.testing.assert_array_equal(traced["ids"].numpy(), to_numpy(eager["ids"]))
    assert decode(tf.constant(SOURCE[:1, :3], tf.int32), tf.constant(3))["ids"].shape[:2] == (1, 3)


def test_multihead_attention_in_the_rnn_decoder_gives_the_same_on_the_fast_tier():
    # The fast tier does not know MultiHeadAttention and runs the layer's own call: the same numbers.
    # (Kept here, beside the other TensorFlow-only tests; test_multihead.py is backend-neutral.)
    keras.utils.set_random_seed(0)
    model = Seq2Seq(Encoder(30, 8, 16), Decoder(20, 8, 16, attention="luong", attention_layer=MultiHeadAttention(4)))
    logits, attention = model((SOURCE, TARGET_IN))
    fast_logits, fast_attention = fast.forward(model, tf.constant(SOURCE), tf.constant(TARGET_IN))
    np.testing.assert_allclose(fast_logits.numpy(), to_numpy(logits), atol=1e-5)
    np.testing.assert_allclose(fast_attention.numpy(), to_numpy(attention), atol=1e-6)
    fast_beam, beam = (search.beam_search(model, SOURCE, beam_width=3, config=CONFIG, accel=accel)
                       for accel in (True, False))
    np.testing.assert_array_equal(to_numpy(fast_beam["ids"]), to_numpy(beam["ids"]))
    np.testing.assert_allclose(to_numpy(fast_beam["scores"]), to_numpy(beam["scores"]), atol=1e-5)


# -- training ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions, dropout", [("sinusoidal", 0.0), ("relative", 0.1)])
def test_the_transformer_trains_with_the_reference_train_step(dates_data, positions, dropout):
    train, _, source_tokenizer, target_tokenizer = dates_data
    pairs = train[:32]
    source = source_tokenizer([s for s, _ in pairs])
    target = target_tokenizer([t for _, t in pairs])
    keras.utils.set_random_seed(0)
    encoder, decoder = transformer_layers(source_tokenizer.vocab_size, target_tokenizer.vocab_size, units=16,
                                          heads=2, ff_dim=32, num_layers=1, positions=positions, max_length=16,
                                          dropout=dropout)
    model = Seq2Seq(encoder, decoder)
    step = make_train_step(model, keras.optimizers.Adam(3e-3), accel=False)
    losses = [float(step(source, target)["loss"]) for _ in range(30)]
    assert abs(losses[0] - np.log(target_tokenizer.vocab_size)) < 1.0, "untrained: about ln(vocab)"
    assert losses[-1] < 0.6 * losses[0], losses


# -- arguments and Keras conventions ----------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"units": 8, "num_heads": 3}, "num_heads must divide units"),
    ({"units": 8, "positions": "rotary"}, "positions must be one of"),
    ({"units": 8, "max_length": 0}, "max_length must be a positive int"),
    ({"units": 8, "dropout": 1.5}, "dropout must be a float in"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, message):
    for layer in (TransformerEncoder, TransformerDecoder):
        with pytest.raises(ValueError, match=message):
            layer(30, **kwargs)


@pytest.mark.parametrize("layer", [TransformerEncoder, TransformerDecoder])
def test_num_heads_is_keras_name_and_a_config_saved_with_heads_still_loads(layer):
    new = layer(30, 8, num_heads=2, ff_dim=16, num_layers=1)
    config = new.get_config()
    assert config["num_heads"] == 2 and "heads" not in config
    assert layer.from_config(config).get_config() == config
    with pytest.warns(DeprecationWarning, match=f"{layer.__name__}\\(heads=...\\) is renamed num_heads"):
        old = layer.from_config({**{k: v for k, v in config.items() if k != "num_heads"}, "heads": 2})
    assert old.num_heads == 2 and old.blocks[0].self_attention.num_heads == 2
    with pytest.raises(ValueError, match="Give num_heads only"):
        layer(30, 8, num_heads=2, heads=2)


def test_a_target_longer_than_max_length_and_outputs_of_another_size_are_refused():
    encoder, decoder = transformer_layers(30, 20, max_length=4, **SMALL)
    outputs, state, _ = encoder(SOURCE)
    decoder(TARGET_IN[:, :4], outputs, state)  # 4 steps fit
    with pytest.raises(ValueError, match="target_in has 5 steps but the decoder's max_length is 4"):
        decoder(TARGET_IN, outputs, state)
    with pytest.raises(ValueError, match=r"encoder_outputs must have shape \(batch, t_in, units\) with units = 8"):
        decoder(TARGET_IN[:, :4], np.ones((2, 6, 10), "float32"), state)


@pytest.mark.parametrize("layer", [TransformerEncoder, TransformerDecoder])
def test_config_round_trip(layer):
    original = layer(30, 8, heads=2, ff_dim=12, num_layers=3, positions="relative", max_length=9,
                     relative_clip=3, dropout=0.1, norm_first=False, name="x")
    config = original.get_config()
    assert layer.from_config(config).get_config() == config


def test_the_transformer_survives_keras_save_and_load(tmp_path):
    model = transformer("relative")
    logits, attention = model((SOURCE, TARGET_IN))
    model.save(tmp_path / "transformer.keras")
    loaded = keras.saving.load_model(tmp_path / "transformer.keras")
    again, again_attention = loaded((SOURCE, TARGET_IN))
    np.testing.assert_allclose(to_numpy(again), to_numpy(logits), atol=1e-6)
    np.testing.assert_allclose(to_numpy(again_attention), to_numpy(attention), atol=1e-6)


def test_the_encoder_in_a_functional_model():
    tokens = keras.Input((None,), dtype="int32")
    outputs, state, _ = TransformerEncoder(30, **SMALL)(tokens)
    context, _ = LuongAttention("dot")(keras.layers.Reshape((1, 8))(state["h"]), outputs)
    model = keras.Model(tokens, context)
    assert model(SOURCE).shape == (2, 1, 8)


class KerasHarness(testing.TestCase):
    def test_relative_positions(self):
        self.run_layer_test(RelativePositions, init_kwargs={"clip": 2, "key_dim": 3, "value_dim": 4},
                            input_shape={"query_positions_shape": (2, 5), "key_positions_shape": (2, 7)},
                            input_dtype={"query_positions_shape": "int32", "key_positions_shape": "int32"},
                            expected_output_shape=((2, 5, 7, 3), (2, 5, 7, 4)), expected_num_trainable_weights=2,
                            run_training_check=False)

    def test_encoder(self):
        self.run_layer_test(TransformerEncoder, init_kwargs={"vocab_size": 30, **SMALL, **clip("relative"), "positions": "relative"},
                            input_data=SOURCE, expected_output_shape=((2, 6, 8), {"h": (2, 8)}, (2, 6)),
                            run_training_check=False, run_mixed_precision_check=False)

    def test_decoder(self):
        outputs = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
        self.run_layer_test(TransformerDecoder, init_kwargs={"vocab_size": 20, **SMALL},
                            input_shape={"target_in_shape": (2, 5), "encoder_outputs_shape": (2, 6, 8)},
                            input_dtype={"target_in_shape": "int32", "encoder_outputs_shape": "float32"},
                            expected_output_shape=((2, 5, 20), (2, 5, 6)), run_training_check=False)


def test_learned_positions_past_max_length_are_refused_by_the_encoder():
    from tfattn.layers.transformer import TransformerEncoder

    encoder = TransformerEncoder(vocab_size=10, units=8, num_heads=2, positions="learned", max_length=4)
    encoder(np.ones((1, 4), "int32"))  # as long as max_length: taken
    with pytest.raises(ValueError, match=r"has learned position vectors for max_length=4 steps and was given 6: .*"
                                         r"Received: ids.shape=\(1, 6\)"):
        encoder(np.ones((1, 6), "int32"))
