"""Tests for tfattn.model, and the config round trip of every public layer and model of the package.

Every public layer and model must come back equal from `from_config(get_config())`, and one
parametrized test, `test_config_round_trip`, checks them all: the attention layers, the encoder, the
decoder and `Seq2Seq`, since `model` is where they all meet.
"""

import inspect
import json
import math

import keras
import numpy as np
import pytest

from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.model import ModelConfig, Seq2Seq, make_model, masked_accuracy, masked_loss

SOURCE_VOCAB, TARGET_VOCAB, EMB, UNITS = 11, 13, 4, 6
SOURCE = np.array([[5, 6, 7, 0, 0], [3, 4, 5, 6, 8]])  # (batch, t_in), sentence 0 padded
TARGET_IN = np.array([[1, 4, 9, 0], [1, 12, 3, 7]])  # (batch, t_out)
MASK = SOURCE != 0


def tiny_config(**overrides):
    sizes = {"units": UNITS} if overrides.get("attention") == "transformer" else {"embedding_dim": EMB, "units": UNITS}
    return ModelConfig(**{**sizes, **overrides})  # (the Transformer's embeddings are units wide: it takes no other)


# -- config round trip for every public class -------------------------------------------------------

_rng = np.random.default_rng(0)
QUERY = _rng.normal(size=(2, 3, UNITS)).astype("float32")  # (batch, t_q, dq)
KEY = _rng.normal(size=(2, 5, 2)).astype("float32")  # (batch, t_in, dk)
VALUE = _rng.normal(size=(2, 5, UNITS)).astype("float32")  # (batch, t_in, dv): encoder outputs too
STATE = {name: _rng.normal(size=(2, UNITS)).astype("float32") for name in ("h", "c")}  # (batch, units)


def call_attention(layer):
    key = VALUE if layer.get_config().get("score") == "dot" else KEY
    return layer(QUERY, VALUE, key=key, value_mask=MASK)


def call_encoder(layer):
    return layer(SOURCE)


def call_decoder(layer):
    state = STATE if layer.rnn == "lstm" else {"h": STATE["h"]}
    return layer(TARGET_IN, VALUE, state, MASK)


def call_model(model):
    return model((SOURCE, TARGET_IN))


ROUND_TRIP = {
    "bahdanau": (lambda: BahdanauAttention(4), call_attention),
    "bahdanau-normalized": (lambda: BahdanauAttention(4, normalize=True, name="att"), call_attention),
    "luong-dot-scale": (lambda: LuongAttention("dot", scale=True), call_attention),
    "luong-general": (lambda: LuongAttention("general"), call_attention),
    "luong-concat-scale": (lambda: LuongAttention("concat", scale=True, units=3), call_attention),
    "luong-location-scale": (lambda: LuongAttention("location", scale=True, max_length=3), call_attention),
    "encoder-gru-bi-2": (lambda: Encoder(SOURCE_VOCAB, EMB, UNITS, num_layers=2), call_encoder),
    "encoder-lstm-bi-2": (lambda: Encoder(SOURCE_VOCAB, EMB, UNITS, rnn="lstm", num_layers=2), call_encoder),
    "encoder-gru-uni-1": (lambda: Encoder(SOURCE_VOCAB, EMB, 5, bidirectional=False), call_encoder),
    "encoder-lstm-uni-2": (
        lambda: Encoder(SOURCE_VOCAB, EMB, UNITS, rnn="lstm", bidirectional=False, num_layers=2, dropout=0.1),
        call_encoder,
    ),
    "decoder-bahdanau-gru": (lambda: Decoder(TARGET_VOCAB, EMB, UNITS), call_decoder),
    "decoder-bahdanau-lstm-normalized": (
        lambda: Decoder(TARGET_VOCAB, EMB, UNITS, attention_layer=BahdanauAttention(3, normalize=True), rnn="lstm"),
        call_decoder,
    ),
    "decoder-luong-feed-gru": (lambda: Decoder(TARGET_VOCAB, EMB, UNITS, attention="luong"), call_decoder),
    "decoder-luong-feed-lstm-location": (
        lambda: Decoder(TARGET_VOCAB, EMB, UNITS, attention_layer=LuongAttention("location", max_length=4),
                        attention="luong", rnn="lstm", dropout=0.2),
        call_decoder,
    ),
    "decoder-luong-nofeed-lstm-concat": (
        lambda: Decoder(TARGET_VOCAB, EMB, UNITS, attention_layer=LuongAttention("concat", scale=True),
                        attention="luong", input_feeding=False, rnn="lstm"),
        call_decoder,
    ),
    "decoder-luong-nofeed-gru-dot": (
        lambda: Decoder(TARGET_VOCAB, EMB, UNITS, attention_layer=LuongAttention("dot"), attention="luong",
                        input_feeding=False),
        call_decoder,
    ),
    "seq2seq-luong": (lambda: make_model(tiny_config(), SOURCE_VOCAB, TARGET_VOCAB), call_model),
    "seq2seq-bahdanau-lstm": (
        lambda: make_model(tiny_config(attention="bahdanau", normalize=True, rnn="lstm", num_layers=2),
                           SOURCE_VOCAB, TARGET_VOCAB),
        call_model,
    ),
    "seq2seq-dot": (lambda: make_model(tiny_config(score="dot"), SOURCE_VOCAB, TARGET_VOCAB), call_model),
    "seq2seq-hand-built": (
        lambda: Seq2Seq(Encoder(SOURCE_VOCAB, EMB, UNITS, bidirectional=False),
                        Decoder(TARGET_VOCAB, EMB, UNITS, attention="luong", input_feeding=False), name="s2s"),
        call_model,
    ),
}




def flat(outputs):
    return [np.asarray(x) for x in keras.tree.flatten(outputs)]


@pytest.mark.parametrize("case", list(ROUND_TRIP))
def test_config_round_trip(case):
    make, call = ROUND_TRIP[case]
    layer = make()
    expected = call(layer)
    config = layer.get_config()
    # Every constructor argument is in the config, and the config is plain JSON.
    arguments = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs"}
    assert arguments <= set(config)
    config = json.loads(json.dumps(config))
    clone = type(layer).from_config(config)
    assert type(clone) is type(layer)
    assert json.loads(json.dumps(clone.get_config())) == config
    call(clone)  # builds
    clone.set_weights(layer.get_weights())
    for got, want in zip(flat(call(clone)), flat(expected), strict=True):
        np.testing.assert_array_equal(got, want)


# -- saving -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="luong"),
        pytest.param({"attention": "bahdanau", "normalize": True, "rnn": "lstm"}, id="bahdanau-lstm"),
        pytest.param({"score": "location", "scale": True, "input_feeding": False, "max_source_length": 4},
                     id="luong-location"),
        pytest.param({"score": "dot", "rnn": "lstm", "num_layers": 2}, id="luong-dot-lstm"),
        pytest.param({"attention": "bahdanau", "tie_embeddings": True, "embedding_dim": UNITS}, id="bahdanau-tied"),
        pytest.param({"attention": "transformer", "heads": 2, "tie_embeddings": True, "norm": "post"},
                     id="transformer-tied-post"),
    ],
)
def test_keras_file_round_trip(overrides, tmp_path):
    model = make_model(tiny_config(**overrides), SOURCE_VOCAB, TARGET_VOCAB)
    logits, attention = model((SOURCE, TARGET_IN))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(loaded, Seq2Seq)
    loaded_logits, loaded_attention = loaded((SOURCE, TARGET_IN))
    np.testing.assert_array_equal(loaded_logits, logits)
    np.testing.assert_array_equal(loaded_attention, attention)


def test_encode_then_step_equals_the_model_call():
    model = make_model(tiny_config(rnn="lstm"), SOURCE_VOCAB, TARGET_VOCAB)
    logits, attention = model((SOURCE, TARGET_IN))
    memory, state = model.encode(SOURCE)
    for t in range(TARGET_IN.shape[1]):
        step_logits, step_weights, state = model.decoder.step(TARGET_IN[:, t], state, memory)
        np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-5)
        np.testing.assert_allclose(step_weights, attention[:, t], atol=1e-5)


# -- loss and accuracy ------------------------------------------------------------------------------

LN2 = math.log(2)
TARGET_OUT = np.array([[1, 2, 0], [2, 0, 0]])  # 3 real tokens, 3 padding positions; vocab 3


def hand_logits(padding_logits):
    """Logits `(2, 3, 3)` for TARGET_OUT, with the given logits at the three padding positions.

    Real tokens (softmax of (0, ln 2, 0) is (1/4, 1/2, 1/4)):
      (0, 0) target 1, logits (0, ln 2, 0): p = 1/2, loss ln 2,  argmax 1: right
      (0, 1) target 2, logits (0, ln 2, 0): p = 1/4, loss 2 ln 2, argmax 1: wrong
      (1, 0) target 2, logits (0, 0, ln 2): p = 1/2, loss ln 2,  argmax 2: right
    so the loss is 4 ln 2 / 3 and the accuracy 2 / 3.
    """
    logits = np.tile(np.asarray(padding_logits, "float32"), (2, 3, 1))
    logits[0, 0] = logits[0, 1] = [0, LN2, 0]
    logits[1, 0] = [0, 0, LN2]
    return logits


# Padding logits (ln 2, 0, 0): argmax 0, "right" if counted; loss ln 2 each.
#   Counted in numerator and denominator: loss 7 ln 2 / 6, accuracy 5 / 6.
# Padding logits (0, ln 2, 0): argmax 1, wrong if counted; loss 2 ln 2 each.
#   Counted: loss 10 ln 2 / 6, accuracy 2 / 6.
# Counted in the denominator only: loss 4 ln 2 / 6, accuracy 2 / 6.
@pytest.mark.parametrize("padding_logits", [[LN2, 0, 0], [0, LN2, 0]], ids=["pad-as-pad", "pad-as-token"])
@pytest.mark.parametrize("logits_dtype", ["float32", "float16"])
def test_masked_loss_and_accuracy_by_hand(padding_logits, logits_dtype):
    logits = hand_logits(padding_logits).astype(logits_dtype)
    loss = masked_loss(TARGET_OUT, logits)
    accuracy = masked_accuracy(TARGET_OUT, logits)
    assert loss.dtype == "float32" and accuracy.dtype == "float32"
    np.testing.assert_allclose(float(loss), 4 * LN2 / 3, rtol=1e-6 if logits_dtype == "float32" else 1e-3)
    np.testing.assert_allclose(float(accuracy), 2 / 3, rtol=1e-6)


def test_loss_and_accuracy_of_an_all_padding_batch_are_zero():
    target_out = np.zeros((2, 3), "int32")
    logits = hand_logits([LN2, 0, 0])
    assert float(masked_loss(target_out, logits)) == 0.0
    assert float(masked_accuracy(target_out, logits)) == 0.0


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_untrained_loss_is_about_ln_vocab(attention):
    vocab = 50
    rng = np.random.default_rng(1)
    source = rng.integers(1, 30, size=(8, 7))
    source[:4, 5:] = 0  # some padding
    target = rng.integers(1, vocab, size=(8, 6))
    target[4:, 4:] = 0
    model = make_model(ModelConfig(embedding_dim=8, units=16, attention=attention), 30, vocab)
    logits, _ = model((source, target[:, :-1]))
    loss = float(masked_loss(target[:, 1:], logits))
    assert abs(loss - math.log(vocab)) < 0.1 * math.log(vocab)


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("attention", "rnnsearch"),
        ("score", "bilinear"),
        ("local", "q"),
        ("window", 0),
        ("heads", 0),
        ("encoder", "cnn"),
        ("positions", "rotary"),
        ("relative_clip", 0),
        ("ff_dim", 0),
        ("max_target_length", 0),
        ("embedding_dim", 0),
        ("units", -8),
        ("units", 8.0),
        ("num_layers", 0),
        ("max_source_length", 0),
        ("dropout", 1.0),
        ("dropout", -0.1),
        ("rnn", "rnn"),
    ],
)
def test_model_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        ModelConfig(**{field: value})


# -- every option against every kind -------------------------------------------------------------------
# The kinds, and a value other than the default for every option of ModelConfig. `ACCEPTED` is written
# by hand from docs/models.md (not from tfattn.model.APPLIES): the kinds where the option, set on top of
# the kind's own fields, gives a model that uses it. Everywhere else it is refused, naming it.

KINDS = {
    "bahdanau": dict(attention="bahdanau"),
    "bahdanau+self-attention encoder": dict(attention="bahdanau", encoder="transformer"),
    "luong": dict(attention="luong"),
    "luong local": dict(attention="luong", local="m"),
    "luong multi-head": dict(attention="luong", heads=2),
    "transformer": dict(attention="transformer"),
    "transformer relative": dict(attention="transformer", positions="relative"),
    "none": dict(attention="none"),
}
OTHER = {"score": "dot", "normalize": True, "scale": False, "local": "p", "window": 3, "hard": True, "heads": 4,
         "input_feeding": False, "encoder": "transformer", "positions": "learned", "relative_clip": 4,
         "ff_dim": 64, "embedding_dim": 32, "rnn": "lstm", "bidirectional": False, "units": 128, "num_layers": 2,
         "dropout": 0.1, "max_source_length": 32, "max_target_length": 32, "feed_summary": False,
         "tie_embeddings": True, "norm": "post"}
EVERY = set(KINDS)
RNN_DECODERS = EVERY - {"transformer", "transformer relative"}
ACCEPTED = {
    "score": {"luong", "luong local"},
    "normalize": {"bahdanau", "bahdanau+self-attention encoder"},
    "scale": {"luong", "luong local"},
    "local": {"luong", "luong local"},
    "window": {"luong local"},
    "hard": {"bahdanau", "bahdanau+self-attention encoder", "luong", "luong local"},
    "heads": {"bahdanau+self-attention encoder", "luong", "luong multi-head", "transformer", "transformer relative"},
    "input_feeding": {"luong", "luong local", "luong multi-head"},
    "encoder": RNN_DECODERS,
    "positions": {"bahdanau+self-attention encoder", "transformer", "transformer relative"},
    "relative_clip": {"transformer relative"},
    "ff_dim": {"bahdanau+self-attention encoder", "transformer", "transformer relative"},
    "embedding_dim": RNN_DECODERS,
    "rnn": RNN_DECODERS,
    "bidirectional": RNN_DECODERS - {"bahdanau+self-attention encoder"},
    "units": EVERY, "num_layers": EVERY, "dropout": EVERY, "max_source_length": EVERY, "max_target_length": EVERY,
    "feed_summary": {"none"},  # Cho et al.'s summary at every step, or Sutskever et al.'s first state only
    "tie_embeddings": EVERY,  # every decoder has a vocabulary projection (embedding_dim == units here)
    "norm": {"bahdanau+self-attention encoder", "transformer", "transformer relative"},  # Transformer blocks
}


def test_the_walk_covers_every_option_of_model_config():
    import dataclasses

    assert set(OTHER) == set(ACCEPTED) == {f.name for f in dataclasses.fields(ModelConfig)} - {"attention"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", OTHER)
def test_every_option_is_taken_or_refused_by_name_for_every_kind(option, kind):
    import dataclasses

    default = {f.name: f.default for f in dataclasses.fields(ModelConfig)}[option]
    assert getattr(ModelConfig(**{**KINDS[kind], option: default}), option) == default  # a default: never refused
    fields = {**KINDS[kind], option: OTHER[option]}
    if kind in ACCEPTED[option]:
        assert getattr(ModelConfig(**fields), option) == OTHER[option]
        return
    with pytest.raises(ValueError, match=r"applies to .* only\. Received: ") as error:
        ModelConfig(**fields)
    assert f"{option}=" in str(error.value) and str(error.value).count("\n") == 0


@pytest.mark.parametrize("fields, message", [
    (dict(attention="luong", normalize=True), "normalize applies to attention='bahdanau' only. Received: "
                                              "normalize=True with attention='luong'"),
    (dict(attention="luong", window=3), "window applies to local attention (local='m' or 'p') only. Received: "
                                        "window=3 with attention='luong', local=None"),
    (dict(attention="luong", heads=2, local="p"), "local applies to attention='luong' with heads=1 only. "
                                                  "Received: local='p' with attention='luong', heads=2"),
    (dict(attention="transformer", rnn="lstm"), "rnn applies to attention='bahdanau', 'luong' or 'none' only. "
                                                "Received: rnn='lstm' with attention='transformer'"),
    (dict(attention="transformer", heads=3, units=16), "heads must divide units. Received: heads=3, units=16"),
])
def test_model_config_refuses_what_a_kind_lacks_in_one_line(fields, message):
    with pytest.raises(ValueError) as error:
        ModelConfig(**fields)
    assert str(error.value) == message


def test_a_config_json_of_an_earlier_version_drops_the_options_its_model_ignored():
    # Runs before issue 43 recorded ignored options (`--attention luong --normalize --window 3`): their
    # config.json still reads, as the model that trained, without them; a refused value of an option
    # that applies is still refused.
    from tfattn.runs.config import RunConfig

    old = {"corpus": {"corpus": "c.txt"}, "model": {"attention": "luong", "normalize": True, "window": 3,
                                                     "positions": "relative", "ff_dim": 7, "score": "dot"}}
    model = RunConfig.from_dict(old).model
    assert (model.normalize, model.window, model.positions, model.ff_dim, model.score) == (
        False, 10, "sinusoidal", None, "dot")
    with pytest.raises(ValueError, match="score must be one of"):
        RunConfig.from_dict({**old, "model": {"attention": "luong", "score": "nope"}})


@pytest.mark.parametrize("fields", [
    dict(attention="bahdanau", encoder="transformer", heads=2),  # the heads are the encoder's
    dict(attention="luong", heads=4, units=16),
    dict(attention="luong", local="p", window=3, hard=True),
    dict(attention="transformer", units=7, heads=7),  # no bidirectional RNN: an odd size is fine
    dict(attention="none", feed_summary=False),
])
def test_model_config_takes_every_kind_it_documents(fields):
    ModelConfig(**fields)


@pytest.mark.parametrize(
    "overrides, message",
    [({"rnn": "rnn"}, r"rnn='rnn'"), ({"units": 7}, r"even.*units=7")],
)
def test_make_model_rejects_what_the_layers_cannot_build(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_model(tiny_config(**overrides), SOURCE_VOCAB, TARGET_VOCAB)


def test_encoder_and_decoder_units_must_match():
    with pytest.raises(ValueError, match=r"units must match.*encoder units 8, decoder units 6"):
        Seq2Seq(Encoder(SOURCE_VOCAB, EMB, 8), Decoder(TARGET_VOCAB, EMB, 6))
