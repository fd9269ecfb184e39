"""The fast tier's entry points for a whole `Seq2Seq` model, one per reference-tier call:

    forward(model, source, target_in, training)   model((source, target_in), training)
    encode(model, source)                         model.encode(source)
    stepper(model.decoder)                        model.decoder.step
    losses.masked_loss                            tfattn.model.masked_loss
    optimizer.FusedAdam                           keras.optimizers.Adam

`tfattn.training`, `tfattn.decoding` and `tfattn.serving` call these when `accel=True` (their
default) and the reference calls otherwise.
"""

from tfattn.accel import attention as fast_attention
from tfattn.accel import decoder as fast_decoder
from tfattn.accel import encoder as fast_encoder
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.model import Seq2Seq


def forward(model, source, target_in, training=False):
    """`model((source, target_in), training)`: logits `(batch, t_out, vocab)`, attention `(batch, t_out, t_in)`."""
    outputs, state, mask = fast_encoder.encode(model.encoder, source, training)
    return fast_decoder.teacher_forced(model.decoder, target_in, outputs, state, mask, training)


def encode(model, source, padded=True):
    """`model.encode(source)`: `(memory, state)` for a decoding loop. `padded=False` says the source
    has no padding (one sentence with its padding cut): the encoder then reads no mask, and the
    memory holds none for the attention to apply."""
    outputs, state, mask = fast_encoder.encode(model.encoder, source, padded=padded)
    memory = fast_attention.prepare_memory(model.decoder, outputs, mask if padded else None)
    return memory, model.decoder.initial_state(state)


stepper = fast_decoder.stepper


def supports(model):
    """Whether the fast tier has code for every part of `model`.

    It has for a `Seq2Seq` of an RNN `Encoder` and a `Decoder`, with any attention layer (those it
    has no written-out code for, such as local, hard or multi-head attention, are called as the
    layers themselves), and for any other model with `encode` and `decoder.step`, which only its
    decoding loop sees. A `Seq2Seq` with another encoder or decoder (the Transformer, the
    no-attention baseline) runs the reference tier: `tfattn.config.resolve_accel(accel, model)`
    asks this.
    """
    if not isinstance(model, Seq2Seq):
        return True
    return isinstance(model.encoder, Encoder) and isinstance(model.decoder, Decoder)


class Stepping:
    """A model whose decoding loops run the fast tier: `encode` and `decoder.stepper()`.

    Args:
        model: a `Seq2Seq` model.
        weights: optional function returning `tfattn.accel.decoder.decoding_weights` made ahead (an export's
            stored weights, with token tables); defaults to reading them at each call.
    """

    def __init__(self, model, weights=None):
        self.model, self.weights, self.decoder = model, weights, self

    @property
    def vocab_size(self):
        return self.model.decoder.vocab_size

    def encode(self, source, padded=True):
        return encode(self.model, source, padded)

    def stepper(self):
        return stepper(self.model.decoder, None if self.weights is None else self.weights())

    @property
    def step(self):
        """`Decoder.step` for the reference loop (sampling): the fast step, its weights read now."""
        return self.stepper()
