"""Tied target embedding and output projection (Press & Wolf 2017): the logits are `h @ E^T + b`.

A decoder with `tie_embeddings=True` has no output kernel of its own: the vocabulary projection
reads the target embedding table `E (vocab, emb)`, transposed, and keeps only a bias `(vocab,)`. The
features it projects must then have the embedding's size: the Transformer's (model size `units`)
always do; an RNN decoder's have `units` numbers, so it needs `embedding_dim == units`, and is
refused otherwise (no projection is added between them).

Reference: Press & Wolf 2017, "Using the Output Embedding to Improve Language Models", arXiv
1608.05859, section 3 (weight tying); Vaswani et al. 2017, section 3.4.
"""

from keras import ops


def check_tied(tie_embeddings, embedding_dim, units):
    """Returns `tie_embeddings` as a bool; a `ValueError` if tied and the sizes differ."""
    tie_embeddings = bool(tie_embeddings)
    if tie_embeddings and embedding_dim != units:
        raise ValueError(f"tie_embeddings projects the decoder's output features (units = {units} numbers) with the "
                         f"target embedding table (embedding_dim = {embedding_dim}): the two must be equal. Set "
                         f"embedding_dim = units. Received: embedding_dim={embedding_dim}, units={units}")
    return tie_embeddings


def add_bias(layer, vocab_size):
    """The tied projection's one weight, the bias `(vocab,)`, made on `layer` (call it in `build`)."""
    return layer.add_weight(shape=(vocab_size,), initializer="zeros", name="logits_bias")


def tied_logits(features, embeddings, bias):
    """`features (..., units)` -> logits `(..., vocab)` = `features @ E^T + bias`, in the features' dtype."""
    table = ops.cast(embeddings, features.dtype)  # (vocab, units)
    return ops.matmul(features, ops.transpose(table)) + ops.cast(bias, features.dtype)  # (..., vocab)
