"""What a model and its training step both need: building a model's weights, and the loss and
accuracy over the real (non-padding) target tokens. `tfattn.model` gives them too; they live here
so that the training step (`tfattn.training.step`) does not import the model it trains, which
imports that step for Keras' `fit`."""

from keras import ops


def ensure_built(model):
    """Creates a model's variables with a two-token dummy batch (call it outside any tf.function)."""
    if not model.built:
        model((ops.ones((1, 2), "int32"), ops.ones((1, 2), "int32")))  # two steps: no softmax over one position
    return model


def masked_loss(target_out, logits, count=None):
    """Mean cross-entropy over non-padding target positions (id 0 is padding).

    Args:
        target_out: int `(batch, t_out)`. logits: float `(batch, t_out, vocab)`.
        count: optional float32 scalar: the number of real tokens to divide by. Under a
            `tf.distribute` strategy each replica passes the whole global batch's count, so that the
            replicas' losses (and gradients) add up to the global batch's mean
            (`tfattn.training.distributed`). Defaults to `None`: this batch's own count.

    Returns:
        A float32 scalar: the sum of per-token losses over real tokens divided by their count
        (0 when the batch holds no real token).
    """
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    losses = ops.sparse_categorical_crossentropy(target_out, ops.cast(logits, "float32"), from_logits=True)
    return ops.sum(losses * mask) / _tokens(mask, count)  # losses (batch, t_out)


def _tokens(mask, count):
    """What a masked mean divides by: `count` if given, else the mask's count (at least 1)."""
    return ops.maximum(ops.sum(mask), 1.0) if count is None else ops.maximum(count, 1.0)


def masked_accuracy(target_out, logits, count=None):
    """Share of non-padding target positions whose argmax is right; padding counts nowhere. With
    `count`, the right positions are divided by it instead (see `masked_loss`)."""
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    predicted = ops.argmax(logits, axis=-1)  # (batch, t_out)
    correct = ops.cast(ops.equal(ops.cast(predicted, "int32"), ops.cast(target_out, "int32")), "float32") * mask
    return ops.sum(correct) / _tokens(mask, count)
