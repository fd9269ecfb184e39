"""Greedy search, sampling and beam search of a batch, inside or outside `tf.function`.

Each is the one loop of `tfattn.decoding.loop` with a strategy of `tfattn.decoding.strategies`.
With `accel=True` (the default) the model encodes and steps by the fast tier (`tfattn.accel`), and
the loop lets finished sentences leave the batch and decodes large batches in row slices
(`tfattn.accel.decoding`); a batch of one sentence, the shape a server answers most, runs the plain
loop, the batch machinery skipped at no cost (`tfattn.accel.branch`). The outputs are the same on
both tiers within float32 rounding.
"""

import tensorflow as tf

from tfattn.accel import branch
from tfattn.accel import decoding as fast_decoding
from tfattn.accel import seq2seq as fast
from tfattn.decoding.loop import DecodeConfig, dynamic_decode, length_limits, stepper_of  # noqa: F401
from tfattn.decoding.strategies import BeamSearch, Greedy, Sampling
from tfattn.model import Seq2Seq, ensure_built

_GREEDY_TIME_AXES = {"ids": 1, "attention": 1, "length": None}  # output: its output-time axis
_BEAM_TIME_AXES = {"ids": 2, "scores": None, "attention": 2, "length": None}


def greedy(model, source, config=None, accel=True):
    """Greedy decoding of a batch of source ids.

    Args:
        model: a `Seq2Seq` model, or anything `tfattn.decoding.loop.dynamic_decode` takes.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.
        accel: bool. The fast tier (`tfattn.accel`); the same outputs within float32 rounding.
            Defaults to `True`.

    Returns:
        A dict: `ids` int32 `(batch, t_out)` without `[START]`, `[END]` included, 0 after it;
        `attention` float32 `(batch, t_out, t_in)`, zero rows after `[END]`; `length` int32
        `(batch,)`, the number of output tokens, `[END]` included.
    """
    strategy = Greedy(argmax=fast_decoding.output_argmax if accel else None)
    return _decode(model, source, strategy, config or DecodeConfig(), accel, _GREEDY_TIME_AXES)


def sample(model, source, temperature=1.0, top_k=0, seed=0, config=None, accel=True):
    """Random decoding, for teaching: every token is drawn from the model's distribution.

    The logits are divided by `temperature` and, when `top_k > 0`, cut to the `top_k` most likely
    tokens before the draw; padding and `[START]` are never drawn. Draws are stateless: step `t`
    uses the seed pair `(seed, t)`, so the same model, source and seed give the same output, eagerly
    or in a `tf.function`. (A row's draw also depends on the other rows of the batch, so the fast
    tier keeps every row to the end here.) Sampling is never a default: `greedy` and
    `beam_search` are the ways to translate.

    Args:
        model, source, config, accel: as `greedy` takes them.
        temperature: float or float32 scalar tensor, > 0. Below 1 sharpens the distribution (it
            approaches greedy as it goes to 0), above 1 flattens it. Defaults to `1.0`.
        top_k: int or int32 scalar tensor, >= 0. Draw among the `top_k` most likely tokens only;
            `0` keeps them all, `1` is greedy. Defaults to `0`.
        seed: int or integer scalar tensor. Defaults to `0`.

    Returns:
        The dict of `greedy`.

    Raises:
        ValueError: if `temperature` is not > 0 or `top_k` is negative, when their values are known
            while tracing (a tensor fed at run time is checked by the graph instead).
    """
    strategy = Sampling(temperature, top_k, seed)
    return dynamic_decode(_tier(model, accel), source, strategy, config or DecodeConfig())


def beam_search(model, source, beam_width=4, length_penalty=0.6, coverage_penalty=0.0, n_best=None,
                config=None, accel=True):
    """Beam search of a batch of source ids, with the length and coverage penalties of GNMT.

    See `tfattn.decoding.strategies.BeamSearch` for the search and its scores. Tokens and attention
    are back-tracked through the parent beams, so every returned alignment is the one its own tokens
    were produced with.

    Args:
        model, source, config, accel: as `greedy` takes them.
        beam_width: int or int32 scalar tensor. Clamped to `[1, min(vocab, 64)]`: 0 or negative
            gives 1, which is greedy search. Defaults to `4`.
        length_penalty: float or float32 scalar tensor, `alpha`. Clamped to `[0, 5]`; NaN counts
            as 0 (no length normalization). Defaults to `0.6`.
        coverage_penalty: float or float32 scalar tensor, `beta`. Clamped to `[0, 5]`; NaN counts
            as 0. Defaults to `0.0` (off).
        n_best: int or int32 scalar tensor, the hypotheses returned per sentence, clamped to
            `[1, beam]`. Defaults to `None`: the clamped beam width.

    Returns:
        A dict, hypotheses best first: `ids` int32 `(batch, n_best, t_out)` without `[START]`,
        `[END]` included, 0 after it; `scores` float32 `(batch, n_best)`; `attention` float32
        `(batch, n_best, t_out, t_in)`, zero rows after `[END]`; `length` int32 `(batch, n_best)`.
        Where fewer than `n_best` hypotheses can exist (with a length limit of one token, only
        `[END]`), the missing ones have score -inf, length 0, and zero ids and attention.

    Reference: Wu et al. 2016, "Google's Neural Machine Translation System", arXiv 1609.08144,
    section 7, eq. 14.
    """
    strategy = BeamSearch(beam_width, length_penalty, coverage_penalty, n_best,
                          top_k=fast_decoding.top_k if accel else tf.math.top_k)
    return _decode(model, source, strategy, config or DecodeConfig(), accel, _BEAM_TIME_AXES)


def _decode(model, source, strategy, config, accel, time_axes):
    """`dynamic_decode` of the reference tier, or of the fast tier: one sentence by a loop of its own
    (greedy) or the plain loop (beam search), a batch with `Compaction` in row slices."""
    model, source = _tier(model, accel), tf.convert_to_tensor(source, tf.int32)
    if not accel:
        return dynamic_decode(model, source, strategy, config)
    batch = lambda rows: dynamic_decode(model, rows, strategy, config, fast_decoding.Compaction)  # noqa: E731
    return branch.cond(tf.shape(source)[0] == 1, lambda: _one_sentence(model, source, strategy, config),
                       lambda: fast_decoding.in_slices(batch, source, config.slices, time_axes))


def _one_sentence(model, source, strategy, config):
    """The fast tier's decoding of one sentence: a loop of its own for greedy search, the plain loop
    for beam search."""
    if not isinstance(strategy, Greedy):
        return dynamic_decode(model, source, strategy, config)
    return fast_decoding.decode_one(model, source, strategy.choose, length_limits(source, config),
                                    config.max_length, stepper_of(model))


def _tier(model, accel):
    """`model`, built, or with `accel` a `Seq2Seq` model's fast tier (`tfattn.accel.seq2seq.Stepping`)."""
    if not isinstance(model, Seq2Seq):
        return model
    ensure_built(model)  # a model never called has no weights yet
    return fast.Stepping(model) if accel else model

