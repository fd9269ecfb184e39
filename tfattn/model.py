"""The `Seq2Seq` model (an `Encoder` and a `Decoder`) and its config."""

import dataclasses
import types

import keras
from keras import ops

from tfattn.core import ensure_built, masked_accuracy, masked_loss  # noqa: F401 (public here too)
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.baseline import NoAttentionDecoder
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.multihead import MultiHeadAttention
from tfattn.layers.options import ATTENTIONS, ENCODERS, LOCALS, NORMS, POSITIONS, RNNS, SCORES  # noqa: F401 (public here too)
from tfattn.layers.transformer import TransformerDecoder, TransformerEncoder
from tfattn.training import step


@dataclasses.dataclass
class ModelConfig:
    """Everything that defines a `Seq2Seq` model's architecture (the vocab sizes come from the data).

    The model kinds, by `attention`:
    - `"bahdanau"`: a Bahdanau-style RNN decoder with additive attention (Bahdanau et al. 2014).
    - `"luong"`: a Luong-style RNN decoder (Luong et al. 2015): global or local (`local`), soft or
      hard (`hard`), with one of the `score`s, or multi-head (`heads > 1`).
    - `"transformer"`: the Transformer (Vaswani et al. 2017): self-attention encoder and decoder.
    - `"none"`: the RNN Encoder-Decoder without attention (Cho et al. 2014), the baseline.
    The RNN decoders read either an RNN encoder or a self-attention encoder (`encoder`).

    An option that does not apply to the model's kind (`APPLIES` below says where each applies) is
    refused when it is not at its default: `ModelConfig(attention="luong", normalize=True)` raises
    "normalize applies to attention='bahdanau' only. Received: normalize=True with attention='luong'".

    Attributes:
        attention: `"bahdanau"`, `"luong"`, `"transformer"` or `"none"`.
        score: Luong score, one of `"dot"`, `"general"`, `"concat"`, `"location"`, `"cosine"`.
        normalize: Bahdanau only: weight-normalized attention.
        scale: Luong only: a learned scalar on the scores, starting at `1 / sqrt(units)` for the
            `dot` and `general` scores. On by default: the paper's unscaled general score can settle
            on the first source positions for every step (`docs/models.md`, "Scaling the dot and
            general scores").
        local: Luong only: `None` (global attention), `"m"` (monotonic) or `"p"` (predictive) local
            attention over a window of `2 * window + 1` source positions.
        window: the local window's half width `D`.
        hard: Bahdanau or Luong: hard attention, one source position per step.
        heads: attention heads of the self-attention encoder and decoder, and of a Luong decoder's
            cross-attention (multi-head when > 1; global and soft). Must divide `units`.
        input_feeding: Luong only: feed the attentional vector to the next step.
        feed_summary: `"none"` only: the decoder reads the source's summary at every step (Cho et al.
            2014); `False`: only as its first state (Sutskever et al. 2014).
        encoder: `"rnn"` or `"transformer"` (self-attention) for the RNN decoders; the Transformer
            always has a self-attention encoder.
        positions: self-attention only: `"sinusoidal"`, `"learned"` or `"relative"` positions.
        relative_clip: relative positions only: the largest distance told apart (Shaw et al.'s k).
        ff_dim: self-attention only: the feed-forward layer's size; `None` is `4 * units`.
        embedding_dim, units: sizes of the embeddings (RNN decoders only) and recurrent states (the
            Transformer's model size, its embeddings' too, is `units`).
        rnn: `"gru"` or `"lstm"`, for both encoder and decoder.
        bidirectional, num_layers: encoder shape (self-attention: blocks in encoder and decoder).
        dropout: dropout rate in encoder and decoder.
        max_source_length: source positions the `"location"` score and learned positions cover.
        max_target_length: target positions a Transformer decoder covers (its key/value cache).
        tie_embeddings: the decoder's vocabulary projection is its target embedding table,
            transposed, plus a bias (Press & Wolf 2017, `tfattn.layers.tied`). Every decoder has it;
            an RNN decoder needs `embedding_dim == units` (the Transformer's embedding is `units`).
        norm: self-attention only: `"pre"` (layer norm before each sublayer, and a final one) or
            `"post"` (after each residual, as Vaswani et al. 2017).
    """

    attention: str = "luong"
    score: str = "general"
    normalize: bool = False
    scale: bool = True
    local: str | None = None
    window: int = 10
    hard: bool = False
    heads: int = 1
    input_feeding: bool = True
    feed_summary: bool = True
    encoder: str = "rnn"
    positions: str = "sinusoidal"
    relative_clip: int = 16
    ff_dim: int | None = None
    embedding_dim: int = 256
    units: int = 256
    rnn: str = "gru"
    bidirectional: bool = True
    num_layers: int = 1
    dropout: float = 0.0
    max_source_length: int = 64
    max_target_length: int = 64
    tie_embeddings: bool = False
    norm: str = "pre"

    def __post_init__(self):
        for name, choices in (("attention", ATTENTIONS), ("rnn", RNNS), ("score", SCORES), ("local", LOCALS),
                              ("encoder", ENCODERS), ("positions", POSITIONS), ("norm", NORMS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}. Received: {name}={getattr(self, name)!r}")
        for name in ("embedding_dim", "units", "num_layers", "max_source_length", "max_target_length", "window",
                     "heads", "relative_clip") + (("ff_dim",) if self.ff_dim is not None else ()):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1). Received: dropout={self.dropout!r}")
        self._check_combinations()

    def _check_combinations(self):
        """Options that only some kinds have: refused, naming the option, rather than ignored (`APPLIES`)."""
        unused = unused_options(self)
        if unused:
            option, part = unused[0]
            raise ValueError(f"{option} applies to {part.field_words} only. Received: {option}="
                             f"{getattr(self, option)!r} with {_fields_text(self, part.decided_by)}")
        if self.units % self.heads:
            raise ValueError(f"heads must divide units. Received: heads={self.heads}, units={self.units}")
        if not self.self_attention_encoder and self.bidirectional and self.units % 2:
            raise ValueError(f"a bidirectional encoder needs an even units. Received: units={self.units}")

    @property
    def self_attention_encoder(self):
        """Whether the encoder is a self-attention (Transformer) encoder."""
        return _self_attention(self)


# -- which options apply to which models ------------------------------------------------------------
# `APPLIES` says, once, which part of a model each option of `ModelConfig` configures; a model
# without that part would ignore the option, so it is refused instead: by `ModelConfig` when its value
# is not the default (a config.json stores every field, defaults included), by `tfattn train` when its
# flag is given (`refused_flag`). Runs of earlier versions recorded such options; reading their
# config.json drops them (`without_unused`), as their models did.


def _self_attention(c):
    return c.attention == "transformer" or c.encoder == "transformer"


@dataclasses.dataclass(frozen=True)
class Part:
    """A part some models have: `has(config)` says whether one does; `field_words` and `flag_words`
    name it in `ModelConfig`'s and in `tfattn train`'s messages; `decided_by`, the fields that decide it."""

    has: object
    field_words: str
    flag_words: str
    decided_by: tuple


def _single_luong(c):
    return c.attention == "luong" and c.heads == 1


PARTS = {
    "every": Part(lambda c: True, "every model", "every model", ()),
    "bahdanau": Part(lambda c: c.attention == "bahdanau", "attention='bahdanau'", "bahdanau attention",
                     ("attention",)),
    "luong": Part(lambda c: c.attention == "luong", "attention='luong'", "luong attention", ("attention",)),
    "none": Part(lambda c: c.attention == "none", "attention='none'", "the no-attention decoder (--attention none)",
                 ("attention",)),
    "luong_layer": Part(_single_luong, "attention='luong' with heads=1", "luong attention with one head",
                        ("attention", "heads")),
    "local": Part(lambda c: _single_luong(c) and c.local is not None, "local attention (local='m' or 'p')",
                  "local attention (--local m or p)", ("attention", "local")),
    "hard": Part(lambda c: c.attention == "bahdanau" or _single_luong(c),
                 "attention='bahdanau', or 'luong' with heads=1", "bahdanau attention, or luong with one head",
                 ("attention", "heads")),
    "heads": Part(lambda c: c.attention == "luong" or _self_attention(c),
                  "attention='luong' or 'transformer', or encoder='transformer'",
                  "luong attention, the transformer or a self-attention encoder", ("attention", "encoder")),
    "rnn_decoder": Part(lambda c: c.attention != "transformer", "attention='bahdanau', 'luong' or 'none'",
                        "an RNN decoder (bahdanau, luong or none)", ("attention",)),
    "rnn_encoder": Part(lambda c: not _self_attention(c), "an RNN encoder (encoder='rnn', attention not "
                        "'transformer')", "an RNN encoder", ("attention", "encoder")),
    "self_attention": Part(_self_attention, "attention='transformer' or encoder='transformer'",
                           "self-attention (--attention transformer or --encoder transformer)",
                           ("attention", "encoder")),
    "relative": Part(lambda c: _self_attention(c) and c.positions == "relative", "positions='relative' "
                     "(with self-attention)", "relative positions (--positions relative)",
                     ("attention", "encoder", "positions")),
}

# Each option of `ModelConfig` -> the part of a model it configures (a key of `PARTS`).
APPLIES = {
    "attention": "every", "score": "luong_layer", "normalize": "bahdanau", "scale": "luong_layer",
    "local": "luong_layer", "window": "local", "hard": "hard", "heads": "heads", "input_feeding": "luong",
    "encoder": "rnn_decoder", "positions": "self_attention", "relative_clip": "relative",
    "ff_dim": "self_attention", "embedding_dim": "rnn_decoder", "units": "every", "rnn": "rnn_decoder",
    "bidirectional": "rnn_encoder", "num_layers": "every", "dropout": "every", "feed_summary": "none",
    "tie_embeddings": "every", "norm": "self_attention",
    # The sentences' length limits (`--max-length`): the location score, learned positions and the
    # Transformer's cache read them; every model is given them.
    "max_source_length": "every", "max_target_length": "every",
}


def applies(option, config):
    """Whether the `ModelConfig` field `option` configures a part that `config` has."""
    return PARTS[APPLIES[option]].has(config)


def unused_options(config):
    """`[(option, part)]`: the options of `config` not at their default whose part it lacks."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    return [(option, PARTS[APPLIES[option]]) for option in APPLIES
            if getattr(config, option) != defaults[option] and not applies(option, config)]


def without_unused(fields):
    """The fields of a `ModelConfig` (a dict, as a config.json holds them) without those whose part
    the model lacks: what a run of an earlier version recorded but did not use."""
    config = types.SimpleNamespace(**{**{f.name: f.default for f in dataclasses.fields(ModelConfig)}, **fields})
    return {k: v for k, v in fields.items() if k not in APPLIES or applies(k, config)}


def refused_flag(option, flag, config):
    """The message of `tfattn train` for a given `flag` (of the field `option`) that `config` would
    ignore, e.g. "--normalize applies to bahdanau attention only; the model is luong"; None if it applies."""
    if applies(option, config):
        return None
    part = PARTS[APPLIES[option]]
    return f"{flag} applies to {part.flag_words} only; the model is {describe(config, part.decided_by)}"


def describe(config, fields=()):
    """The kind of `config` in words, with what `fields` decide: "luong with global attention"."""
    c, words = config, [config.attention]
    if "local" in fields and c.attention == "luong":
        words.append("with global attention" if c.local is None else f"with local-{c.local} attention")
    if "heads" in fields and c.heads > 1:
        words.append(f"with {c.heads} heads")
    if "encoder" in fields and c.attention != "transformer":
        words.append("with a self-attention encoder" if c.encoder == "transformer" else "with an RNN encoder")
    if "positions" in fields and _self_attention(c):
        words.append(f"with {c.positions} positions")
    return " ".join(words)


def _fields_text(config, fields):
    return ", ".join(f"{name}={getattr(config, name)!r}" for name in fields) or "any model"


def make_model(config, source_vocab_size, target_vocab_size):
    """Builds a `Seq2Seq` model from a `ModelConfig` and the two vocabulary sizes."""
    c = config
    encoder = make_encoder(c, source_vocab_size)
    if c.attention == "transformer":
        decoder = TransformerDecoder(target_vocab_size, c.units, num_heads=c.heads, ff_dim=c.ff_dim,
                                     num_layers=c.num_layers, positions=c.positions,
                                     max_length=c.max_target_length, relative_clip=c.relative_clip,
                                     dropout=c.dropout, norm_first=c.norm == "pre",
                                     tie_embeddings=c.tie_embeddings, name="decoder")
    elif c.attention == "none":
        decoder = NoAttentionDecoder(target_vocab_size, c.embedding_dim, c.units, rnn=c.rnn, dropout=c.dropout,
                                     feed_summary=c.feed_summary, tie_embeddings=c.tie_embeddings, name="decoder")
    else:
        decoder = Decoder(target_vocab_size, c.embedding_dim, c.units, attention=c.attention,
                          attention_layer=make_attention(c), input_feeding=c.input_feeding, rnn=c.rnn,
                          dropout=c.dropout, tie_embeddings=c.tie_embeddings, name="decoder")
    return Seq2Seq(encoder, decoder)


def make_encoder(config, source_vocab_size):
    """The encoder a `ModelConfig` asks for: an RNN `Encoder` or a `TransformerEncoder`."""
    c = config
    if c.self_attention_encoder:
        return TransformerEncoder(source_vocab_size, c.units, num_heads=c.heads, ff_dim=c.ff_dim,
                                  num_layers=c.num_layers, positions=c.positions, max_length=c.max_source_length,
                                  relative_clip=c.relative_clip, dropout=c.dropout, norm_first=c.norm == "pre",
                                  name="encoder")
    return Encoder(source_vocab_size, c.embedding_dim, c.units, rnn=c.rnn, bidirectional=c.bidirectional,
                   num_layers=c.num_layers, dropout=c.dropout, name="encoder")


def make_attention(config):
    """The attention layer of an RNN decoder, from a `ModelConfig`."""
    c = config
    probability = "hard" if c.hard else "soft"
    if c.attention == "bahdanau":
        return BahdanauAttention(c.units, normalize=c.normalize, probability=probability)
    if c.heads > 1:
        return MultiHeadAttention(num_heads=c.heads)
    return LuongAttention(c.score, scale=c.scale, max_length=c.max_source_length, local=c.local, window=c.window,
                          probability=probability)


@keras.saving.register_keras_serializable(package="tfattn")
class Seq2Seq(keras.Model):
    """An attention encoder-decoder: source ids and shifted target ids in, logits and attention out.

    Args:
        encoder: an `Encoder`.
        decoder: a `Decoder` whose `units` equal the encoder's.
        **kwargs: base model arguments (`name`, ...).

    Call arguments:
        inputs: a pair `(source, target_in)`: int `(batch, t_in)` and int `(batch, t_out)`, both
            right-padded with 0; `target_in` starts with `[START]`.
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(logits, attention)`: logits `(batch, t_out, vocab)`, attention `(batch, t_out, t_in)`.

    Example:

    >>> model = make_model(ModelConfig(units=16, embedding_dim=8), 40, 50)
    >>> logits, attention = model((np.array([[4, 5, 3]]), np.array([[2, 6]])))
    >>> logits.shape, attention.shape
    (TensorShape([1, 2, 50]), TensorShape([1, 2, 3]))
    """

    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        if encoder.units != decoder.units:
            raise ValueError(
                f"Encoder and decoder units must match. Received: encoder units {encoder.units}, "
                f"decoder units {decoder.units}"
            )
        self.encoder = encoder
        self.decoder = decoder

    def build(self, inputs_shape):
        source_shape, target_shape = inputs_shape
        if not self.encoder.built:
            self.encoder.build(source_shape)
        if not self.decoder.built:
            self.decoder.build(target_shape, (*source_shape[:2], self.encoder.units))

    def call(self, inputs, training=None):
        source, target_in = inputs
        outputs, state, mask = self.encoder(source, training=training)
        return self.decoder(target_in, outputs, state, mask, training=training)

    def encode(self, source):
        """Inference: source ids `(batch, t_in)` -> `(memory, state)` for `decoder.step`."""
        outputs, state, mask = self.encoder(source)
        return self.decoder.prepare_memory(outputs, mask), self.decoder.initial_state(state)

    def attention_heads(self, source, target_in):
        """Every layer's every head of the cross-attention, teacher-forced, for plots:
        `(batch, layers, heads, t_out, t_in)`.

        A Transformer gives each decoder block's heads; an RNN decoder one layer, with the heads of
        its `MultiHeadAttention` or the one head of any other attention; the no-attention baseline
        its zeros. `tfattn.plot.plot_heads` draws one sentence's.
        """
        ensure_built(self)
        outputs, state, mask = self.encoder(source)
        if hasattr(self.decoder, "cross_attention_heads"):
            return self.decoder.cross_attention_heads(target_in, outputs, mask)
        if hasattr(self.decoder, "attention_heads"):
            return self.decoder.attention_heads(target_in, outputs, state, mask)[:, None]
        _, attention = self.decoder(target_in, outputs, state, mask)
        return attention[:, None, None]

    def get_config(self):
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "decoder": keras.saving.serialize_keras_object(self.decoder),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("encoder", "decoder"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)

    # -- Keras' fit and evaluate (TensorFlow backend) ----------------------------------------------
    # `model.compile(optimizer=...)` then `model.fit(dataset)`, where the dataset yields `(source,
    # target)` batches as tfattn's loop takes them: the step is tfattn's own
    # (`tfattn.training.step.train_update`: teacher forcing, the masked loss, gradients clipped to a
    # global norm of 5, an update whose loss is not finite skipped), on the tier `tfattn.tier` and
    # the model's dtype policy choose (`tfattn.training.step.keras_tier`). `loss` and `accuracy`
    # are means over the target tokens of the epoch so far; compile's `loss` and `metrics` are not used.

    def train_step(self, data):
        source, target, _ = keras.utils.unpack_x_y_sample_weight(data)
        ensure_built(self)  # (first trace) the fast tier reads the weights before any layer call
        accel = step.keras_tier(self)
        out = step.train_update(self, self.optimizer, source, target, clip_norm=5.0, accel=accel)
        return self._token_means(out, out["finite"])

    def test_step(self, data):
        source, target, _ = keras.utils.unpack_x_y_sample_weight(data)
        ensure_built(self)  # (first trace) the fast tier reads the weights before any layer call
        accel = step.keras_tier(self)
        logits, loss = step.forward_and_loss(self, source, target, training=False, accel=accel)
        return self._token_means({"loss": loss, "accuracy": masked_accuracy(target[:, 1:], logits),
                                  "tokens": ops.count_nonzero(target[:, 1:])}, ops.isfinite(loss))

    @property
    def metrics(self):
        """The token-weighted means `fit` and `evaluate` report: `loss` and `accuracy`."""
        if "_fit_means" not in self.__dict__:  # made at fit's or evaluate's start, outside the step
            # Not tracked as the layer's state (a built layer takes none): they hold no weight, and
            # the model's `variables`, which checkpoints list in order, stay what they were.
            object.__setattr__(self, "_fit_means", [keras.metrics.Mean(name="loss"),
                                                    keras.metrics.Mean(name="accuracy")])
        return list(self._fit_means)

    def _token_means(self, out, finite):
        """Adds a batch to the running means, weighted by its target tokens (0 for a skipped step)."""
        weight = ops.where(finite, ops.cast(out["tokens"], "float32"), 0.0)
        for mean, key in zip(self.metrics, ("loss", "accuracy")):
            mean.update_state(ops.where(finite, out[key], 0.0), sample_weight=weight)
        return {mean.name: mean.result() for mean in self.metrics}
