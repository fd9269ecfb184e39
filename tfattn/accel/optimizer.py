"""Adam with each variable's update done by one fused TensorFlow kernel.

Keras 3's `Adam.update_step` is written in backend ops: about a dozen element-wise passes over each
variable (subtract, multiply, square, sqrt, divide, assign, ...), each reading and writing whole
arrays. This package's models have millions of parameters (the two embeddings and the vocabulary
projection are most of them), so on a CPU those passes are a visible share of a training step
(`docs/performance.md`). TensorFlow's `ResourceApplyAdam` kernel does the same update in one pass
over `variable, m, v, gradient`:

    lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m = m + (g - m) * (1 - beta_1)
    v = v + (g^2 - v) * (1 - beta_2)
    variable = variable - lr_t * m / (sqrt(v) + epsilon)

which is Keras's formula term for term (a test checks that the two agree to float rounding). The
variables, their names and the checkpoints stay Keras's.
"""

import keras
import tensorflow as tf

from tfattn.accel import private


@keras.saving.register_keras_serializable(package="tfattn")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose per-variable update is TensorFlow's fused `ResourceApplyAdam`.

    Takes the same arguments as `keras.optimizers.Adam`. `amsgrad=True`, and a variable without a
    resource handle, fall back to Keras's own update.

    Sparse gradients (`tf.IndexedSlices`, from an embedding) are made dense first, adding up the
    slices of a row that occurs more than once (a token used twice in a batch). That is Adam on the
    gradient's true value, as in TensorFlow 1 and Keras 2, which summed repeated rows before the
    update. Keras 3's own update squares each slice before adding them up, so for such rows its
    second moment gets `g1^2 + g2^2` where Adam's is `(g1 + g2)^2`.

    Example:

    >>> optimizer = FusedAdam(learning_rate=1e-3)
    >>> variable = keras.Variable([1.0, 2.0])
    >>> _ = optimizer.apply_gradients([(tf.constant([0.5, -0.5]), variable)])
    >>> variable.numpy()  # the first Adam step moves each weight by the learning rate
    array([0.999, 2.001], dtype=float32)
    """

    def update_step(self, gradient, variable, learning_rate):
        gradient = tf.convert_to_tensor(gradient)  # (an IndexedSlices' repeated rows added up)
        if self.amsgrad or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        m, v = private.adam_slots(self, variable)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=m.handle, v=v.handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
        )
