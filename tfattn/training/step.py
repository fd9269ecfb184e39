"""The teacher-forced training step: one `@tf.function`, traced once for every batch shape.

    target = [START] y1 y2 y3 [END] 0 0
    decoder input  = target[:, :-1]   ([START] y1 y2 y3 [END] 0)
    decoder labels = target[:, 1:]    (y1 y2 y3 [END] 0 0)         0 = padding, left out of the loss

With `accel=False` the step is the reference tier: the model's own `call`, `tfattn.model.masked_loss`
and autodiff. With `accel=True` the forward pass and the loss are those of `tfattn.accel` (written-out
loops and gradients); the losses and gradients are the same within float32 rounding (a test trains
20 steps both ways). `accel=None`, the default, follows `tfattn.config`'s switch.
"""

import keras
import tensorflow as tf

from tfattn.accel import losses as fast_losses
from tfattn.accel import seq2seq as fast
from tfattn.accel.optimizer import FusedAdam
from tfattn.config import resolve_accel
from tfattn.model import ensure_built, masked_accuracy, masked_loss

BATCH_SIGNATURE = (
    tf.TensorSpec([None, None], tf.int32, name="source"),  # (batch, t_in)
    tf.TensorSpec([None, None], tf.int32, name="target"),  # (batch, t_out + 1)
)


def make_optimizer(config, accel=None):
    """Adam with `config.learning_rate` (a cosine decay over `config.decay_steps` if set; under
    `decay_to_budget` the trainer sets the rate at each step): Keras's own, or with `accel`,
    `FusedAdam` (the same update in one TensorFlow kernel per variable)."""
    rate = config.learning_rate
    if config.decay_steps and not config.decay_to_budget:
        rate = keras.optimizers.schedules.CosineDecay(rate, config.decay_steps, alpha=0.01)
    return FusedAdam(learning_rate=rate) if resolve_accel(accel) else keras.optimizers.Adam(learning_rate=rate)


def build(model, optimizer=None):
    """Creates the model's (and optimizer's) variables with a dummy batch, outside any tf.function."""
    ensure_built(model)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def forward_and_loss(model, source, target, training, accel=None):
    """Teacher-forced logits `(batch, t_out, vocab)` and the masked loss of one batch."""
    target_in, target_out = target[:, :-1], target[:, 1:]  # (batch, t_out) each
    if resolve_accel(accel, model):
        logits, _ = fast.forward(model, source, target_in, training=training)
        return logits, fast_losses.masked_loss(target_out, logits)
    logits, _ = model((source, target_in), training=training)
    return logits, masked_loss(target_out, logits)


def make_train_step(model, optimizer, clip_norm=5.0, accel=None):
    """Returns `train_step(source, target) -> {"loss", "accuracy", "tokens", "grad_norm"}`.

    Args:
        model: a `Seq2Seq` model.
        optimizer: a Keras optimizer.
        clip_norm: float. Gradients are clipped to this global norm.
        accel: bool or None. Run the fast tier (`tfattn.accel`) rather than the reference.
            Defaults to `None`: `tfattn.config.accel_enabled()` when the step is made. A model the
            fast tier has no code for runs the reference tier (`tfattn.config.resolve_accel`).
    """
    accel = resolve_accel(accel, model)
    build(model, optimizer)
    variables = model.trainable_variables

    @tf.function(input_signature=BATCH_SIGNATURE)
    def train_step(source, target):
        # 1. Forward pass and loss, recorded; 2. gradients, clipped; 3. the update.
        with tf.GradientTape() as tape:
            logits, loss = forward_and_loss(model, source, target, training=True, accel=accel)
        # An embedding's gradient arrives as row slices, one per token occurrence; made dense, a token
        # seen twice in the batch gets one summed row, which is the gradient Adam is defined on.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        grads, grad_norm = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, variables))
        return _metrics(target, logits, loss, accel, grad_norm=grad_norm)

    return train_step


def make_eval_step(model, accel=None):
    """Returns `eval_step(source, target) -> {"loss", "accuracy", "tokens"}` (teacher-forced, no update)."""
    accel = resolve_accel(accel, model)
    build(model)

    @tf.function(input_signature=BATCH_SIGNATURE)
    def eval_step(source, target):
        logits, loss = forward_and_loss(model, source, target, training=False, accel=accel)
        return _metrics(target, logits, loss, accel)

    return eval_step


def _metrics(target, logits, loss, accel, **extra):
    target_out = target[:, 1:]
    accuracy = (fast_losses.masked_accuracy if accel else masked_accuracy)(target_out, logits)
    return {"loss": loss, "accuracy": accuracy,
            "tokens": tf.math.count_nonzero(target_out, dtype=tf.int32), **extra}
