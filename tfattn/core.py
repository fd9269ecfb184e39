"""What a model and its training step both need: building a model's weights, and the loss and
accuracy over the real (non-padding) target tokens. `tfattn.model` gives them too; they live here
so that the training step (`tfattn.training.step`) does not import the model it trains, which
imports that step for Keras' `fit`."""

from keras import ops

from tfattn.ids import PAD_ID, START_ID

# Ids that are never a label: padding (left out of the loss) and [START] (only ever an input).
# Label smoothing gives them no share (`smoothing_targets`).
NEVER_LABELS = (PAD_ID, START_ID)


def ensure_built(model):
    """Creates a model's variables with a two-token dummy batch (call it outside any tf.function)."""
    if not model.built:
        model((ops.ones((1, 2), "int32"), ops.ones((1, 2), "int32")))  # two steps: no softmax over one position
    return model


def masked_loss(target_out, logits, count=None, label_smoothing=0.0):
    """Mean cross-entropy over non-padding target positions (id 0 is padding), optionally label-smoothed.

    With `label_smoothing` = e (Szegedy et al. 2016, section 7; Vaswani et al. 2017, section 5.4,
    e = 0.1), each position's target distribution is `(1 - e)` on its label plus `e` spread evenly
    over the `vocab - 2` ids that can be a label: every id but padding and `[START]`
    (`NEVER_LABELS`), which never appear as labels, so no probability is taught to go to them.
    The loss is the cross-entropy with that distribution:

        loss = (1 - e) * (-log p[label]) + e * mean over the vocab - 2 ids k of (-log p[k])

    Args:
        target_out: int `(batch, t_out)`. logits: float `(batch, t_out, vocab)`.
        count: optional float32 scalar: the number of real tokens to divide by. Under a
            `tf.distribute` strategy each replica passes the whole global batch's count, so that the
            replicas' losses (and gradients) add up to the global batch's mean
            (`tfattn.training.distributed`). Defaults to `None`: this batch's own count.
        label_smoothing: float in [0, 1). Defaults to `0.0`: the plain negative log-likelihood.

    Returns:
        A float32 scalar: the sum of per-token losses over real tokens divided by their count
        (0 when the batch holds no real token).
    """
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    logits = ops.cast(logits, "float32")
    losses = ops.sparse_categorical_crossentropy(target_out, logits, from_logits=True)  # (batch, t_out)
    if label_smoothing:
        uniform = smoothing_targets(logits.shape[-1])  # (vocab,): 1 / (vocab - 2), 0 at NEVER_LABELS
        spread = -ops.sum(ops.log_softmax(logits, axis=-1) * uniform, axis=-1)  # (batch, t_out)
        losses = (1.0 - label_smoothing) * losses + label_smoothing * spread
    return ops.sum(losses * mask) / _tokens(mask, count)


def smoothing_targets(vocab):
    """The uniform share of label smoothing: `(vocab,)` float32, `1 / (vocab - 2)` at every id that
    can be a label and 0 at `NEVER_LABELS` (padding, `[START]`)."""
    if vocab is None or vocab <= len(NEVER_LABELS):
        raise ValueError(f"label smoothing needs a static vocab larger than {len(NEVER_LABELS)} "
                         f"(padding and [START] get no share). Received: vocab={vocab!r}")
    never = ops.sum(ops.one_hot(list(NEVER_LABELS), vocab), axis=0)  # (vocab,)
    return (1.0 - never) / float(vocab - len(NEVER_LABELS))


def check_label_smoothing(value):
    """Returns `value` if it is a float in [0, 1); a `ValueError` naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1). Received: label_smoothing={value!r}")
    return float(value)


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
