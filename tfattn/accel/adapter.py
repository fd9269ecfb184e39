"""The fast tier's one reading of the layers: every weight and flag it takes from a layer, by name.

The fast tier computes what the reference layers compute, from the layers' own weights. Everything
it reads off a layer object (a weight, a flag, a sub-layer) is read here and nowhere else in
`tfattn.accel`, so renaming a layer's attribute is a change to this file alone. The rest of the
fast tier calls the layers' public methods (`prepare_keys`, `compute_scores`, `initial_state`,
`merge_states`, the layer itself) and reads the views below.

`KNOWN` lists, for each layer class the fast tier writes out, every constructor option and how the
fast tier honours it. A test compares it with the classes' constructors: a layer that gains an
option fails that test until the option is listed here, with what the fast tier does about it
(computes it, or hands the layer back to its own `call`), so no option is ignored by accident.
"""

import dataclasses

from keras import ops

from tfattn.layers.attention import ScoredAttention
from tfattn.layers.bahdanau import BahdanauAttention
from tfattn.layers.decoder import Decoder
from tfattn.layers.encoder import Encoder
from tfattn.layers.luong import LuongAttention

_ATTENTION_OPTIONS = {
    "dropout": "dropout on the weights: the layer's own call (`trains_itself`)",
    "seed": "the seed of that dropout and of hard draws: the layer's own call",
    "probability": "hard attention: the layer's own call (`attention_kind` is None)",
}
KNOWN = {
    Encoder: {
        "vocab_size": "the embedding layer, called", "embedding_dim": "the embedding layer, called",
        "units": "the cells' weights", "rnn": "`rnn.step` of a GRU or an LSTM",
        "bidirectional": "both directions in one loop (`rnn.run_masked`)",
        "num_layers": "one loop per layer", "dropout": "the encoder's dropout layer, called",
    },
    Decoder: {
        "vocab_size": "the logits kernel", "embedding_dim": "the split of the RNN kernel's rows",
        "units": "the cell's weights", "attention": "the step of either style (`style`)",
        "attention_layer": "`tfattn.accel.attention`, or the layer's own call", "input_feeding": "`feeds_input`",
        "rnn": "`rnn.step` of a GRU or an LSTM", "dropout": "the decoder's dropout layer, called",
        "tie_embeddings": "`tied`: the logits kernel is the embedding table, transposed",
    },
    BahdanauAttention: {**_ATTENTION_OPTIONS, "units": "the kernels' shapes", "normalize": "`key_bias`, `v`"},
    LuongAttention: {
        **_ATTENTION_OPTIONS, "score": "`FAST_SCORES` written out; the cosine: the layer's own call",
        "scale": "`gain`", "units": "the kernels' shapes", "max_length": "`compute_scores` (location)",
        "local": "local windows: the layer's own call", "window": "local windows: the layer's own call",
    },
}

# -- attention ------------------------------------------------------------------------------------

# Luong's scores that `tfattn.accel.attention` writes out (the cosine runs the layer's own call).
FAST_SCORES = ("dot", "general", "concat", "location")
# The methods a subclass may override; one that does runs its own call.
_METHODS = ("prepare_keys", "compute_scores", "attention_range", "one_position")


def attention_kind(layer):
    """`"additive"` for a `BahdanauAttention`, `"luong"` for a `LuongAttention` with one of
    `FAST_SCORES`, each with the class' own methods, global (no `local`), soft (not
    `probability="hard"`) and no dropout on its weights; else None: the layer runs its own call."""
    for cls, kind in ((BahdanauAttention, "additive"), (LuongAttention, "luong")):
        if not isinstance(layer, cls) or not _own_methods(layer, cls):
            continue
        plain = layer.probability == "soft" and not layer.dropout
        if kind == "luong":
            plain = plain and layer.score in FAST_SCORES and layer.local is None
        return kind if plain else None
    return None


def _own_methods(layer, cls):
    own = all(getattr(type(layer), name) is getattr(cls, name) for name in _METHODS)
    return own and type(layer).call is ScoredAttention.call


def additive_weights(layer):
    """A `BahdanauAttention`'s weights: `query_kernel` W1 `(dq, units)`, `key_kernel` W2 `(dk, units)`,
    `key_bias` (the normalized variant's `b (units,)`, else None) and `v`, the scoring vector
    (`g v / ||v||` when normalized)."""
    return {"query_kernel": layer.query_kernel, "key_kernel": layer.key_kernel,
            "key_bias": layer.b if layer.normalize else None, "v": layer.scoring_vector()}


def luong_weights(layer):
    """A `LuongAttention`'s score and weights: `score`; `w` (general, location), `w_query`, `w_key`,
    `v` (concat), each None where the score has none; `gain` when scaled, else None."""
    get = lambda name: getattr(layer, name, None)  # noqa: E731 (a score without the weight has none)
    return {"score": layer.score, "w": get("w"), "w_query": get("w_query"), "w_key": get("w_key"), "v": get("v"),
            "gain": layer.gain if layer.scale else None}


def uses_positions(layer):
    """Whether an attention layer reads the queries' target steps (local-m)."""
    return layer.uses_positions


def trains_itself(layer):
    """Whether an attention layer's training needs its own call: dropout on its weights, or hard draws."""
    return bool(layer.dropout) or layer.probability == "hard"


# -- recurrent cells -------------------------------------------------------------------------------

def cell_weights(cell, dtype, split_at=None):
    """The weights of a built Keras `GRUCell` or `LSTMCell`, cast to `dtype`, read once.

    Args:
        cell: a built `keras.layers.GRUCell` (with `reset_after=True`) or `LSTMCell`.
        dtype: the compute dtype.
        split_at: optional int. Splits the kernel's rows into `kernel` (`[:split_at]`) and
            `kernel_rest` (`[split_at:]`), for inputs made of two parts.

    Returns:
        A dict: `kernel`, `kernel_rest` (or None), `input_bias`, `recurrent_kernel`,
        `recurrent_bias`. An LSTM cell has one bias: it is the `recurrent_bias`, added with the
        recurrent product inside the step (where `rnn.affine` fuses the two), and `input_bias` is None.
    """
    kernel = ops.cast(cell.kernel, dtype)  # (input, gates * units)
    bias = ops.cast(cell.bias, dtype)
    if cell.bias.shape[0] == 2:  # GRU, reset_after: (2, 3 units), input bias then recurrent bias
        input_bias, recurrent_bias = bias[0], bias[1]
    else:  # LSTM
        input_bias, recurrent_bias = None, bias
    rest = None
    if split_at is not None:
        kernel, rest = kernel[:split_at], kernel[split_at:]
    return {"kernel": kernel, "kernel_rest": rest, "input_bias": input_bias,
            "recurrent_kernel": ops.cast(cell.recurrent_kernel, dtype), "recurrent_bias": recurrent_bias}


# -- encoder and decoder ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EncoderView:
    """What `tfattn.accel.encoder` reads of an `Encoder`: `rnn` (`"gru"`/`"lstm"`), `dtype`, the
    `embedding` and `dropout_layer` (called), `cells`: per recurrent layer, its cells (forward, then
    backward when bidirectional), and `merge_states` (the encoder's own method)."""

    rnn: str
    dtype: str
    embedding: object
    dropout_layer: object
    cells: tuple
    merge_states: object


def encoder_view(encoder):
    """The `EncoderView` of a built `Encoder`."""
    cells = tuple((layer.forward_layer.cell, layer.backward_layer.cell) if encoder.bidirectional else (layer.cell,)
                  for layer in encoder.rnn_layers)
    return EncoderView(encoder.rnn, encoder.compute_dtype, encoder.embedding, encoder.dropout_layer, cells,
                       encoder.merge_states)


@dataclasses.dataclass(frozen=True)
class DecoderView:
    """What `tfattn.accel.decoder` reads of a `Decoder`.

    `style` `"bahdanau"` or `"luong"`; `vocab_size`; `rnn`; `feeds_input` (Luong's input feeding); `tracks_position`
    (the state holds the target step); sizes `embedding_dim`, `units`; `dtype`; `dropout` (the rate);
    the sub-layers it calls: `embedding`, `dropout_layer`, `rnn_layer` (on a GPU, for cuDNN),
    `attention_layer`; the variables it reads: `embeddings (vocab, emb)`, `cell` (the RNN's cell),
    `hidden_kernel`, `hidden_bias` (None for Luong's `W_c`), `logits_kernel` `(units, vocab)`,
    `logits_bias`; `tied`: the decoder's logits kernel is `embeddings` transposed
    (`tie_embeddings`), and `logits_kernel` is None (the transpose is taken where the weights are
    read, so that a step given weights made ahead reads no variable); and `initial_state`, the
    decoder's own method.
    """

    style: str
    vocab_size: int
    rnn: str
    feeds_input: bool
    tracks_position: bool
    embedding_dim: int
    units: int
    dtype: str
    dropout: float
    embedding: object
    dropout_layer: object
    rnn_layer: object
    attention_layer: object
    embeddings: object
    cell: object
    hidden_kernel: object
    hidden_bias: object
    logits_kernel: object
    logits_bias: object
    initial_state: object
    tied: bool = False


def decoder_view(decoder):
    """The `DecoderView` of a built `Decoder`."""
    hidden = decoder.hidden_dense
    if decoder.tie_embeddings:  # logits = out @ E^T + b (`tfattn.layers.tied`)
        logits_kernel, logits_bias = None, decoder.logits_bias
    else:
        logits_kernel, logits_bias = decoder.logits_dense.kernel, decoder.logits_dense.bias
    return DecoderView(
        style=decoder.attention, vocab_size=decoder.vocab_size, rnn=decoder.rnn, feeds_input=decoder.feeds_input,
        tracks_position=decoder.tracks_position, embedding_dim=decoder.embedding_dim, units=decoder.units,
        dtype=decoder.compute_dtype, dropout=decoder.dropout, embedding=decoder.embedding,
        dropout_layer=decoder.dropout_layer, rnn_layer=decoder.rnn_layer, attention_layer=decoder.attention_layer,
        embeddings=decoder.embedding.embeddings, cell=decoder.rnn_layer.cell, hidden_kernel=hidden.kernel,
        hidden_bias=hidden.bias, logits_kernel=logits_kernel, logits_bias=logits_bias,
        initial_state=decoder.initial_state, tied=decoder.tie_embeddings)


def covers(encoder, decoder):
    """Whether the fast tier has code for a model of this encoder and decoder: an RNN `Encoder` and
    an attention `Decoder` (with any attention layer: those it does not write out run their own
    call). Another encoder or decoder (the Transformer's, the no-attention baseline's) does not."""
    return isinstance(encoder, Encoder) and isinstance(decoder, Decoder)


def model_parts(model):
    """`(encoder, decoder)` of a `Seq2Seq` model (or of anything with the two), else `(None, None)`."""
    return getattr(model, "encoder", None), getattr(model, "decoder", None)
