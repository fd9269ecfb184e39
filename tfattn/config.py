"""The package-wide tier switch: the reference tier (the code to read) or the fast tier (`tfattn.accel`).

Every function and class with an `accel=` argument (the train step, `TrainConfig`, `greedy`,
`beam_search`, `sample`, `Translator`, `export`) takes `accel=None` by default, which means "follow
this switch". Both tiers compute the same numbers within float32 rounding (tests check it), so the
default is the fast tier, as Keras runs its fused attention where it can; switch it off to step
through `tfattn/layers/` in a debugger, or to read what runs:

    tfattn.config.set_accel(False)         # from now on, the reference tier
    with tfattn.config.accel_scope(False): # only inside the block
        tfattn.fit(model, data, config)

The environment variable `TFATTN_ACCEL=0` (or `false`, `no`, `off`) starts a process with it off.
The choice is read when a step, a decoding function or an export is made (traced), not at every call.
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


def resolve_accel(accel, model=None):
    """`accel` as a bool: `None` follows the switch; `True` or `False` wins over it.

    With a `model`, the fast tier is chosen only if it has code for every part of that model
    (`tfattn.accel.seq2seq.supports`): the Transformer, the no-attention baseline and the local and
    hard attentions run the reference tier whatever the switch says. This is the one place that
    decides which tier runs.
    """
    if accel is None:
        accel = accel_enabled()
    if not isinstance(accel, bool):
        raise ValueError(f"accel must be True, False or None (follow tfattn.config). Received: accel={accel!r}")
    if accel and model is not None:
        from tfattn.accel.seq2seq import supports  # imported here: the switch itself needs no TensorFlow

        return supports(model)
    return accel
