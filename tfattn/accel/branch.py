"""`tf.cond` whose branch not taken costs nothing at run time, for branches that hold whole loops.

Inside a `tf.function`, TensorFlow lowers a `tf.cond` into switch and merge nodes and inlines both
branches into the caller's graph; its executor then visits every node of the branch not taken, to
mark it dead. When that branch holds the loops for a batch (hundreds of nodes) and the call is for
one sentence, that costs about as much as the one-sentence loop saves. `cond` puts each branch's
body in a function call that TensorFlow does not inline (`experimental_attributes={"_noinline":
True}`), so the branch not taken is one dead node; the body is still optimized (grappler) when the
call is instantiated. Session-based loaders (TF Serving, `saved_model_cli run`) run it as well.

Leaving the `If` node unlowered would also skip the branch, but session-based loaders then fail
with "Retval[0] does not have value", and an unlowered branch's body is not optimized by grappler.
The gain over `tf.cond` is in `docs/performance.md`.

Meant for the few conds that choose between whole loops once per call, not for those inside a
loop's step, whose branches are small and would pay for a function call at every step.
"""

import tensorflow as tf

from tfattn.accel import private


def cond(pred, true_fn, false_fn):
    """`tf.cond(pred, true_fn, false_fn)` with each branch a function call that is not inlined.

    The outputs are those of `tf.cond`; only what the branch not taken costs differs. Eagerly it is
    `tf.cond` itself.
    """
    if tf.executing_eagerly():
        return tf.cond(pred, true_fn, false_fn)
    call = lambda fn: private.noinline(fn)()  # noqa: E731
    return tf.cond(pred, lambda: call(true_fn), lambda: call(false_fn))
