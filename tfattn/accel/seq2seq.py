"""The fast tier's door: what the rest of the package calls, one name per reference-tier call, and the
one decision of which tier runs a model.

    choose(accel, model, precision)               which tier runs `model` (asked once per entry point)
    forward(model, source, target_in, training)   model((source, target_in), training)
    encode(model, source)                         model.encode(source)
    Stepping(model)                               the model as a decoding loop sees it (encode, step)
    decode(model, source, strategy, config)       tfattn.decoding.loop.dynamic_decode
    decoding_weights(decoder, token_tables)       what a decoder step reads, made ahead (an export's)
    masked_loss, masked_accuracy                  tfattn.core.masked_loss, masked_accuracy
    FusedAdam                                     keras.optimizers.Adam

The training step (`tfattn.training.step`), the decoding entry (`tfattn.search`) and the
`Translator` (`tfattn.serving`) call these when the fast tier runs, and the reference calls
otherwise. The fast tier reads the layers through `tfattn.accel.adapter` only.
"""

from tfattn import tier
from tfattn.accel import adapter
from tfattn.accel import attention as fast_attention
from tfattn.accel import decoder as fast_decoder
from tfattn.accel import encoder as fast_encoder
from tfattn.accel.decoder import decoding_weights  # noqa: F401 (the door's)
from tfattn.accel.decoding import decode  # noqa: F401 (the door's)
from tfattn.accel.losses import masked_accuracy, masked_loss  # noqa: F401 (the door's)
from tfattn.accel.optimizer import FusedAdam  # noqa: F401 (the door's)

# The precisions the fast tier is tested in, equal to the reference tier's (float32 within its
# rounding, mixed_bfloat16 within bfloat16's: tests/accel/test_bfloat16.py). mixed_float16 needs
# loss scaling, which the fast tier does not do: it runs the reference tier.
PRECISIONS = ("float32", "mixed_bfloat16")


def choose(accel, model, precision="float32"):
    """Which tier runs `model`: the one decision, made once at each entry point and handed down.

    The fast tier runs when the switch says so (`accel`, `None` following `tfattn.tier`), it has
    code for the model's parts (`adapter.covers`: an RNN `Encoder` and an attention `Decoder`) and
    for the precision (`PRECISIONS`). The Transformer and the no-attention baseline, and
    mixed_float16, run the reference tier whatever the switch says. A model without an `encoder`
    (anything with `encode` and `decoder.step`, which only a decoding loop sees) runs the fast
    tier's loop with its own steps.

    Args:
        accel: bool or None.
        model: the model, or None to ask only the switch.
        precision: str, the model's Keras dtype policy name. Defaults to `"float32"`.

    Returns:
        bool: `True` for the fast tier.
    """
    if not tier.resolve(accel) or precision not in PRECISIONS:
        return False
    encoder, decoder = adapter.model_parts(model)
    if model is None or encoder is None:
        return True
    return adapter.covers(encoder, decoder)


def forward(model, source, target_in, training=False):
    """`model((source, target_in), training)`: logits `(batch, t_out, vocab)`, attention `(batch, t_out, t_in)`."""
    encoder, decoder = adapter.model_parts(model)
    outputs, state, mask = fast_encoder.encode(encoder, source, training)
    return fast_decoder.teacher_forced(decoder, target_in, outputs, state, mask, training)


def encode(model, source, padded=True):
    """`model.encode(source)`: `(memory, state)` for a decoding loop. `padded=False` says the source
    has no padding (one sentence with its padding cut): the encoder then reads no mask, and the
    memory holds none for the attention to apply."""
    encoder, decoder = adapter.model_parts(model)
    outputs, state, mask = fast_encoder.encode(encoder, source, padded=padded)
    view = adapter.decoder_view(decoder)
    memory = fast_attention.prepare_memory(view.attention_layer, outputs, mask if padded else None)
    return memory, view.initial_state(state)


class Stepping:
    """A model whose decoding loops run the fast tier: `encode`, `encode_unpadded` and `decoder.stepper()`.

    Args:
        model: a `Seq2Seq` model.
        weights: optional function returning `decoding_weights` made ahead (an export's stored weights,
            with token tables); defaults to reading them at each call.
    """

    def __init__(self, model, weights=None):
        self.model, self.weights, self.decoder = model, weights, self

    @property
    def vocab_size(self):
        return adapter.decoder_view(adapter.model_parts(self.model)[1]).vocab_size

    def encode(self, source, padded=True):
        return encode(self.model, source, padded)

    def encode_unpadded(self, source):
        """`encode` of a source without padding: the encoder reads no mask and the memory holds none."""
        return encode(self.model, source, padded=False)

    def stepper(self):
        decoder = adapter.model_parts(self.model)[1]
        return fast_decoder.stepper(decoder, None if self.weights is None else self.weights())

    @property
    def step(self):
        """`Decoder.step` for the reference loop (sampling): the fast step, its weights read now."""
        return self.stepper()
