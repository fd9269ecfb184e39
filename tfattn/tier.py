"""The package-wide tier switch: the reference tier (the code to read) or the fast tier (`tfattn.accel`).

Every function and class with an `accel=` argument (the train step, `TrainConfig`, `greedy`,
`beam_search`, `sample`, `Translator`, `export`) takes `accel=None` by default, which means "follow
this switch". Both tiers compute the same numbers within float32 rounding (tests check it), so the
default is the fast tier, as Keras runs its fused attention where it can; switch it off to step
through `tfattn/layers/` in a debugger, or to read what runs:

    tfattn.tier.set_accel(False)         # from now on, the reference tier
    with tfattn.tier.accel_scope(False): # only inside the block
        tfattn.fit(model, data, config)

The environment variable `TFATTN_ACCEL=0` (or `false`, `no`, `off`) starts a process with it off.
The choice is read when a step, a decoding function or an export is made (traced), not at every call.

This module is a leaf: it says what the switch is, not what the fast tier covers. Which tier runs a
given model is decided once, at each entry point (the `Trainer`, Keras' `fit`, the `Translator`,
the decoding functions of `tfattn.search`), by `tfattn.accel.seq2seq.choose`, which asks this switch
and then what the fast tier has code for; everything below an entry point is handed the answer.

On a GPU the fast tier's written-out recurrent loops give way to cuDNN: `recurrent_path` says what
runs the recurrent layers on this machine, and is what the fast tier asks (`docs/tiers.md`).
"""

import contextlib
import os

_FALSE = ("0", "false", "no", "off")
_accel = os.environ.get("TFATTN_ACCEL", "1").strip().lower() not in _FALSE


def set_accel(enabled):
    """Turns the fast tier on (`True`) or off (`False`) for the whole process."""
    global _accel
    if not isinstance(enabled, bool):
        raise ValueError(f"set_accel takes True or False. Received: enabled={enabled!r}")
    _accel = enabled


def accel_enabled():
    """Whether the fast tier is on: what `accel=None` means."""
    return _accel


@contextlib.contextmanager
def accel_scope(enabled):
    """The switch set to `enabled` inside a `with` block, and back to what it was after."""
    before = accel_enabled()
    set_accel(enabled)
    try:
        yield
    finally:
        set_accel(before)


def resolve(accel):
    """`accel` as a bool: `None` follows the switch; `True` or `False` wins over it."""
    if accel is None:
        return accel_enabled()
    if not isinstance(accel, bool):
        raise ValueError(f"accel must be True, False or None (follow tfattn.tier). Received: accel={accel!r}")
    return accel


RECURRENT_PATHS = ("cudnn", "loops", "keras")


def gpu_visible():
    """Whether TensorFlow sees a GPU: `tf.config.list_logical_devices("GPU")` is not empty, the question
    Keras asks before it runs a `GRU` or `LSTM` layer as one cuDNN kernel."""
    import tensorflow as tf  # imported here: the switch itself needs no TensorFlow

    return bool(tf.config.list_logical_devices("GPU"))


def recurrent_path(accel=None):
    """What runs the recurrent layers that read a whole sequence at once (the encoder's, and a Luong
    decoder's without input feeding), on this machine and tier; the fast tier asks this.

    Args:
        accel: bool or None, the tier (`None` follows the switch).

    Returns:
        `"cudnn"` when TensorFlow sees a GPU (`gpu_visible`), on either tier: the Keras `GRU`/`LSTM`
        layers, which Keras runs as cuDNN kernels there (the fast tier's loops are CPU techniques);
        `"loops"` for the fast tier without a GPU: `tfattn.accel.rnn`'s written-out loops;
        `"keras"` for the reference tier without a GPU: the Keras layers' own step loop.
        The decoders that attend at every step (Bahdanau's, Luong's with input feeding) step one
        token at a time whatever this says: by the fast tier's written-out step or the Keras cell.
    """
    if gpu_visible():
        return "cudnn"
    return "loops" if resolve(accel) else "keras"
