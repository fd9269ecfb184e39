"""The `Seq2Seq` model (an `Encoder` and a `Decoder`), its config, and the masked loss and accuracy."""

import dataclasses

import keras
from keras import ops

from tfattn.layers.attention import SCORES, BahdanauAttention, LuongAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import RNNS, Encoder

ATTENTIONS = ("bahdanau", "luong")


@dataclasses.dataclass
class ModelConfig:
    """Everything that defines a `Seq2Seq` model's architecture (the vocab sizes come from the data).

    Attributes:
        attention: `"bahdanau"` (additive attention, Bahdanau-style decoder) or `"luong"`.
        score: Luong score, one of `"dot"`, `"general"`, `"concat"`, `"location"`.
        normalize: Bahdanau only: weight-normalized attention.
        scale: Luong only: a learned scalar on the scores.
        input_feeding: Luong only: feed the attentional vector to the next step.
        embedding_dim, units: sizes of the embeddings and recurrent states.
        rnn: `"gru"` or `"lstm"`, for both encoder and decoder.
        bidirectional, num_layers: encoder shape.
        dropout: dropout rate in encoder and decoder.
        max_source_length: source positions the `"location"` score covers.
    """

    attention: str = "luong"
    score: str = "general"
    normalize: bool = False
    scale: bool = False
    input_feeding: bool = True
    embedding_dim: int = 256
    units: int = 256
    rnn: str = "gru"
    bidirectional: bool = True
    num_layers: int = 1
    dropout: float = 0.0
    max_source_length: int = 64

    def __post_init__(self):
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}. Received: attention={self.attention!r}")
        if self.rnn not in RNNS:
            raise ValueError(f"rnn must be one of {RNNS}. Received: rnn={self.rnn!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}. Received: score={self.score!r}")
        for name in ("embedding_dim", "units", "num_layers", "max_source_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1). Received: dropout={self.dropout!r}")


def make_model(config, source_vocab_size, target_vocab_size):
    """Builds a `Seq2Seq` model from a `ModelConfig` and the two vocabulary sizes."""
    c = config
    if c.attention == "bahdanau":
        attention = BahdanauAttention(c.units, normalize=c.normalize)
    else:
        attention = LuongAttention(c.score, scale=c.scale, max_length=c.max_source_length)
    encoder = Encoder(source_vocab_size, c.embedding_dim, c.units, rnn=c.rnn, bidirectional=c.bidirectional,
                      num_layers=c.num_layers, dropout=c.dropout, name="encoder")
    decoder = Decoder(target_vocab_size, c.embedding_dim, c.units, attention=c.attention, attention_layer=attention,
                      input_feeding=c.input_feeding, rnn=c.rnn, dropout=c.dropout, name="decoder")
    return Seq2Seq(encoder, decoder)


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
        training: bool. Whether dropout is active.

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

    def call(self, inputs, training=False):
        source, target_in = inputs
        outputs, state, mask = self.encoder(source, training=training)
        return self.decoder(target_in, outputs, state, mask, training=training)

    def encode(self, source):
        """Inference: source ids `(batch, t_in)` -> `(memory, state)` for `decoder.step`."""
        outputs, state, mask = self.encoder(source)
        return self.decoder.prepare_memory(outputs, mask), self.decoder.initial_state(state)

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
    # global norm of 5, an update whose loss is not finite skipped), on the tier `tfattn.config` and
    # the model's dtype policy choose (`tfattn.training.precision.tier_for`). `loss` and `accuracy`
    # are means over the target tokens of the epoch so far; compile's `loss` and `metrics` are not used.

    def train_step(self, data):
        from tfattn.training import precision, step  # training imports this module: imported here

        source, target, _ = keras.utils.unpack_x_y_sample_weight(data)
        ensure_built(self)  # (first trace) the fast tier reads the weights before any layer call
        accel = precision.tier_for(self.dtype_policy.name)
        out = step.train_update(self, self.optimizer, source, target, clip_norm=5.0, accel=accel)
        return self._token_means(out, out["finite"])

    def test_step(self, data):
        from tfattn.training import precision, step

        source, target, _ = keras.utils.unpack_x_y_sample_weight(data)
        ensure_built(self)  # (first trace) the fast tier reads the weights before any layer call
        accel = precision.tier_for(self.dtype_policy.name)
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


def ensure_built(model):
    """Creates a model's variables with a one-token dummy batch (call it outside any tf.function)."""
    if not model.built:
        model((ops.ones((1, 2), "int32"), ops.ones((1, 1), "int32")))
    return model


def masked_loss(target_out, logits):
    """Mean cross-entropy over non-padding target positions (id 0 is padding).

    Args:
        target_out: int `(batch, t_out)`. logits: float `(batch, t_out, vocab)`.

    Returns:
        A float32 scalar: the sum of per-token losses over real tokens divided by their count
        (0 when the batch holds no real token).
    """
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    losses = ops.sparse_categorical_crossentropy(target_out, ops.cast(logits, "float32"), from_logits=True)
    return ops.sum(losses * mask) / ops.maximum(ops.sum(mask), 1.0)  # losses (batch, t_out)


def masked_accuracy(target_out, logits):
    """Share of non-padding target positions whose argmax is right; padding counts nowhere."""
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    predicted = ops.argmax(logits, axis=-1)  # (batch, t_out)
    correct = ops.cast(ops.equal(ops.cast(predicted, "int32"), ops.cast(target_out, "int32")), "float32") * mask
    return ops.sum(correct) / ops.maximum(ops.sum(mask), 1.0)
