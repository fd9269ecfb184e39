"""The masked loss with the softmax cross-entropy's gradient written out, and the masked accuracy.

Replaces `tfattn.model.masked_loss`'s `sparse_categorical_crossentropy`, whose fused TensorFlow kernel
builds the whole gradient `softmax - one_hot` in its forward pass. Here the exponentials are kept from
the forward pass and 1 is subtracted at each label by a scatter, with no one-hot tensor:

    m = max(logits);  e = exp(logits - m);  s = sum(e)
    loss = log(s) + m - logits[label]
    d loss / d logits = e / s - one_hot(label)

With label smoothing `e` (`tfattn.core.masked_loss`: `1 - e` on the label, `e` spread by `u`, the
uniform share over the ids that can be a label, `tfattn.core.smoothing_targets`):

    loss = log(s) + m - (1 - e) logits[label] - e sum_k u_k logits[k]
    d loss / d logits = e / s - (1 - e) one_hot(label) - e u

`masked_accuracy` takes `tf.argmax` (see there). Tests check both against the reference.
"""

import tensorflow as tf
from keras import ops

from tfattn.core import smoothing_targets


def cross_entropy(labels, logits, label_smoothing=0.0):
    """Softmax cross-entropy per position: `logits (..., vocab)`, `labels (...)` -> `(...)`, label-smoothed
    by `label_smoothing` (a Python float; 0 for the plain negative log-likelihood)."""
    logits = tf.convert_to_tensor(logits)
    uniform = tf.cast(smoothing_targets(logits.shape[-1]), logits.dtype) if label_smoothing else None  # (vocab,)
    return _written_out(float(label_smoothing), uniform)(logits, tf.cast(labels, tf.int32))


def _written_out(epsilon, uniform):
    """The loss with its gradient written out, for smoothing `epsilon` with the share `uniform (vocab,)`."""

    @tf.custom_gradient
    def cross_entropy_of(logits, labels):
        m = tf.reduce_max(logits, axis=-1, keepdims=True)  # (..., 1)
        e = tf.exp(logits - m)  # (..., vocab)
        s = tf.reduce_sum(e, axis=-1, keepdims=True)  # (..., 1)
        picked = tf.gather(logits, labels, batch_dims=labels.shape.rank)  # (...)
        loss = tf.math.log(s[..., 0]) + m[..., 0] - (1.0 - epsilon) * picked
        if epsilon:
            loss -= epsilon * tf.tensordot(logits, uniform, axes=1)  # sum_k u_k logits[k]: (...)

        def grad(upstream):  # upstream (...)
            softmax = e * (upstream[..., None] / s)  # (..., vocab)
            if epsilon:
                softmax -= (epsilon * upstream)[..., None] * uniform  # (..., vocab)
            vocab = tf.shape(logits)[-1]
            flat = tf.reshape(softmax, [-1, vocab])  # (rows, vocab)
            rows = tf.range(tf.shape(flat)[0])
            at_labels = tf.stack([rows, tf.reshape(labels, [-1])], axis=1)  # (rows, 2)
            flat = tf.tensor_scatter_nd_sub(flat, at_labels, (1.0 - epsilon) * tf.reshape(upstream, [-1]))
            return tf.reshape(flat, tf.shape(logits)), None

        return loss, grad

    return cross_entropy_of


def masked_loss(target_out, logits, count=None, label_smoothing=0.0):
    """`tfattn.model.masked_loss` with `cross_entropy`: mean over non-padding target positions (or
    the sum over them divided by `count`, the global batch's tokens under a strategy), label-smoothed
    by `label_smoothing`."""
    mask = ops.cast(ops.not_equal(target_out, 0), "float32")  # (batch, t_out)
    losses = cross_entropy(target_out, ops.cast(logits, "float32"), label_smoothing)  # (batch, t_out)
    return ops.sum(losses * mask) / _tokens(mask, count)


def _tokens(mask, count):
    """What a masked mean divides by: `count` if given, else the mask's count (at least 1)."""
    return tf.maximum(tf.reduce_sum(mask) if count is None else count, 1.0)


def masked_accuracy(target_out, logits, count=None):
    """`tfattn.model.masked_accuracy` with `tf.argmax`: Keras's `argmax` first maps -0.0 to a tiny
    negative number, which adds passes over the whole `(batch, t_out, vocab)` logits."""
    mask = tf.cast(tf.not_equal(target_out, 0), tf.float32)  # (batch, t_out)
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (batch, t_out)
    correct = tf.cast(tf.equal(predicted, tf.cast(target_out, tf.int32)), tf.float32) * mask
    return tf.reduce_sum(correct) / _tokens(mask, count)
