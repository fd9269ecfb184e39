"""The teacher-forced training step: one `@tf.function`, traced once for every batch shape.

    target = [START] y1 y2 y3 [END] 0 0
    decoder input  = target[:, :-1]   ([START] y1 y2 y3 [END] 0)
    decoder labels = target[:, 1:]    (y1 y2 y3 [END] 0 0)         0 = padding, left out of the loss

With `accel=False` the step is the reference tier: the model's own `call`, `tfattn.core.masked_loss`
and autodiff. With `accel=True` the forward pass and the loss are those of `tfattn.accel` (written-out
loops and gradients); the losses and gradients are the same within float32 rounding (a test trains
20 steps both ways). The tier is chosen once where a step is made (`make_train_step`,
`make_eval_step`, Keras' `fit` through `keras_tier`, the `Trainer`), by
`tfattn.accel.seq2seq.choose`, and everything below is handed the answer: `train_step_on`,
`eval_step_on`, `train_update`, `forward_and_loss`.

`train_update` is the step itself, shared by `make_train_step` (tfattn's loop) and
`tfattn.Seq2Seq.train_step` (Keras' `model.fit`). An update whose loss (or, without loss scaling,
whose gradient) is not finite is skipped: the weights and the optimizer stay as they were, and the
step's `finite` output is `False` for the loop to count.
"""

import keras
import tensorflow as tf

from tfattn.accel import private
from tfattn import tier
from tfattn.accel import seq2seq as fast
from tfattn.core import ensure_built, masked_accuracy, masked_loss
from tfattn.training import precision as precisions
from tfattn.training.schedules import learning_rate

BATCH_SIGNATURE = (
    tf.TensorSpec([None, None], tf.int32, name="source"),  # (batch, t_in)
    tf.TensorSpec([None, None], tf.int32, name="target"),  # (batch, t_out + 1)
)


def make_optimizer(config, accel=None, summed=False):
    """Adam at the learning rate of `config` (`tfattn.training.schedules.learning_rate`: a warm-up,
    then constant, cosine or inverse square root; under `decay_to_budget` the trainer sets the rate
    at each step): Keras's own, or with `accel`, `FusedAdam` (the same update in one TensorFlow
    kernel per variable); in Keras' `LossScaleOptimizer` when `config.precision` is `"mixed_float16"`.
    With `summed`, for the step of `tfattn.training.distributed`, which sums the replicas' gradients
    itself: in a replica, the optimizer applies them as they are, without Keras' sum over replicas."""
    rate = learning_rate(config)
    kind = fast.FusedAdam if tier.resolve(accel) else keras.optimizers.Adam
    adam = (private.without_gradient_sum(kind) if summed else kind)(learning_rate=rate)
    return precisions.with_loss_scaling(adam, getattr(config, "precision", "float32"))


def build(model, optimizer=None):
    """Creates the model's (and optimizer's) variables with a dummy batch, outside any tf.function."""
    ensure_built(model)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def keras_tier(model):
    """The tier Keras' `fit` and `evaluate` train `model` on (`Seq2Seq.train_step`): the switch, the
    model and its dtype policy, chosen when Keras traces its step (`tfattn.accel.seq2seq.choose`)."""
    return fast.choose(None, model, model.dtype_policy.name)


def forward_and_loss(model, source, target, training, accel, count=None, label_smoothing=0.0):
    """Teacher-forced logits `(batch, t_out, vocab)` and the masked loss of one batch (divided by
    `count` tokens if given: a replica's share of the global batch's loss, see `masked_loss`;
    label-smoothed by `label_smoothing`), on the tier chosen (`accel`, a bool)."""
    target_in, target_out = target[:, :-1], target[:, 1:]  # (batch, t_out) each
    if accel:
        logits, _ = fast.forward(model, source, target_in, training=training)
        return logits, fast.masked_loss(target_out, logits, count, label_smoothing)
    logits, _ = model((source, target_in), training=training)
    return logits, masked_loss(target_out, logits, count, label_smoothing)


def make_train_step(model, optimizer, clip_norm=5.0, accel=None, jit_compile=False, label_smoothing=0.0):
    """Returns `train_step(source, target) -> {"loss", "accuracy", "tokens", "grad_norm", "finite"}`.

    Args:
        model: a `Seq2Seq` model.
        optimizer: a Keras optimizer (in a `LossScaleOptimizer` for a `"mixed_float16"` model).
        clip_norm: float or None. Gradients are clipped to this global norm (None: not clipped).
        accel: bool or None. Run the fast tier (`tfattn.accel`) rather than the reference.
            Defaults to `None`: `tfattn.tier.accel_enabled()` when the step is made. A model or a
            precision the fast tier has no code for runs the reference tier
            (`tfattn.accel.seq2seq.choose`, asked here once).
        jit_compile: bool. Compile the step with XLA. XLA compiles once per batch shape, so the
            step is traced per shape too (every shape static, as the reference tier's layers need
            under XLA); pad batches to a multiple of a few tokens (`DataConfig.pad_to_multiple`)
            to keep the shapes few.
        label_smoothing: float. The training loss's label smoothing (`tfattn.core.masked_loss`; the
            step's `loss` output is that smoothed loss). Defaults to `0.0`.
    """
    accel = fast.choose(accel, model, ensure_built(model).dtype_policy.name)
    return train_step_on(model, optimizer, accel, clip_norm, jit_compile, label_smoothing)


def train_step_on(model, optimizer, accel, clip_norm=5.0, jit_compile=False, label_smoothing=0.0):
    """`make_train_step` on a tier chosen already (`accel`, a bool): what the `Trainer` makes, having
    chosen its tier once."""
    build(model, optimizer)
    signature = None if jit_compile else BATCH_SIGNATURE

    @tf.function(input_signature=signature, jit_compile=jit_compile, autograph=False)
    def train_step(source, target):
        return train_update(model, optimizer, source, target, clip_norm, accel, label_smoothing)

    return train_step


def train_update(model, optimizer, source, target, clip_norm=5.0, accel=False, label_smoothing=0.0):
    """One teacher-forced update of `model` on a batch (call it inside a `tf.function`), on the tier
    chosen (`accel`, a bool).

    1. The forward pass and the float32 loss (label-smoothed by `label_smoothing`), recorded (the loss scaled by a `LossScaleOptimizer`);
    2. the gradients, unscaled in the norm and clipped to `clip_norm`; 3. the update, skipped when
    the loss is not finite, or, without loss scaling, the gradient (a `LossScaleOptimizer` skips
    a non-finite gradient itself, and lowers its scale).

    Returns:
        `{"loss", "accuracy", "tokens", "grad_norm", "finite"}`: float32 scalars, the int32 count of
        target tokens, and a bool scalar that is `False` when the update was skipped.
    """
    with tf.GradientTape() as tape:
        logits, loss = forward_and_loss(model, source, target, True, accel, label_smoothing=label_smoothing)
        scaled_loss = optimizer.scale_loss(loss)
    variables = model.trainable_variables  # after the forward pass, which builds a model that was not
    if not optimizer.built:  # (under Keras' fit), and before the `cond`, where no variable can be made
        optimizer.build(variables)
    grads = dense_gradients(tape.gradient(scaled_loss, variables))
    grads, norm, finite = clip_and_check(optimizer, loss, grads, clip_norm)

    def update():
        optimizer.apply_gradients(list(zip(grads, variables)))
        return tf.constant(True)

    finite = tf.cond(finite, update, lambda: tf.constant(False))
    return metrics(target, logits, loss, accel, grad_norm=norm, finite=finite)


def dense_gradients(grads):
    """The gradients as dense tensors. An embedding's gradient arrives as row slices, one per token
    occurrence; made dense, a token seen twice in the batch gets one summed row, which is the
    gradient Adam is defined on."""
    return [tf.convert_to_tensor(g) for g in grads]


def clip_and_check(optimizer, loss, grads, clip_norm):
    """`(grads, norm, finite)`: the (scaled) gradients clipped to `clip_norm` on their unscaled
    global norm, that norm (unscaled), and whether the update may be made: the loss is finite and,
    without loss scaling, so is the norm (a `LossScaleOptimizer` skips a non-finite gradient
    itself, and lowers its scale)."""
    scale = tf.cast(precisions.loss_scale(optimizer), tf.float32)
    if clip_norm is None:
        norm = tf.linalg.global_norm(grads)
    else:
        grads, norm = tf.clip_by_global_norm(grads, clip_norm * scale)  # clip_norm on the unscaled gradient
    finite = tf.math.is_finite(loss)
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        finite = finite & tf.math.is_finite(norm)
    return grads, norm / scale, finite


def make_eval_step(model, accel=None):
    """Returns `eval_step(source, target) -> {"loss", "accuracy", "tokens"}` (teacher-forced, no update;
    the loss is the plain negative log-likelihood, never label-smoothed: perplexity is its exp),
    on the tier `tfattn.accel.seq2seq.choose` gives for `accel` and the model (as `make_train_step`)."""
    return eval_step_on(model, fast.choose(accel, model, ensure_built(model).dtype_policy.name))


def eval_step_on(model, accel):
    """`make_eval_step` on a tier chosen already (`accel`, a bool)."""
    build(model)

    @tf.function(input_signature=BATCH_SIGNATURE, autograph=False)
    def eval_step(source, target):
        logits, loss = forward_and_loss(model, source, target, training=False, accel=accel)
        return metrics(target, logits, loss, accel)

    return eval_step


def metrics(target, logits, loss, accel, count=None, **extra):
    """`{"loss", "accuracy", "tokens", **extra}` of a batch (accuracy divided by `count` if given)."""
    target_out = target[:, 1:]
    accuracy = (fast.masked_accuracy if accel else masked_accuracy)(target_out, logits, count)
    return {"loss": loss, "accuracy": accuracy,
            "tokens": tf.math.count_nonzero(target_out, dtype=tf.int32), **extra}
