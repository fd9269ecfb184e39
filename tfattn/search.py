"""Greedy search, sampling and beam search of a batch, inside or outside `tf.function`: the decoding
entry, where the tier is chosen.

Each is the one loop of `tfattn.decoding.loop` with a strategy of `tfattn.decoding.strategies`.
`greedy`, `sample` and `beam_search` choose the tier once (`tfattn.accel.seq2seq.choose`: the
switch, `accel`, then what the fast tier covers) and hand the answer to `decode`. With the fast tier
the model encodes and steps by `tfattn.accel`, whose loop lets finished sentences leave the batch,
decodes large batches in row slices and gives one sentence a loop of its own; with the reference
tier the model's own layers run in `dynamic_decode`. The outputs are the same on both tiers within
float32 rounding.
"""

import keras

from tfattn.accel import seq2seq as fast
from tfattn.core import ensure_built
from tfattn.decoding.loop import DecodeConfig, dynamic_decode
from tfattn.decoding.strategies import BeamSearch, Greedy, Sampling  # noqa: F401 (for `decode`'s callers)


def greedy(model, source, config=None, accel=None):
    """Greedy decoding of a batch of source ids.

    Args:
        model: a `Seq2Seq` model, or anything `tfattn.decoding.loop.dynamic_decode` takes.
        source: int32 `(batch, t_in)`, right-padded with 0, with `[START]`/`[END]` markers.
        config: `DecodeConfig`; defaults to `DecodeConfig()`.
        accel: bool or None. The fast tier (`tfattn.accel`); the same outputs within float32
            rounding. Defaults to `None`: `tfattn.tier.accel_enabled()`. A model the fast tier has
            no code for runs the reference tier (`tfattn.accel.seq2seq.choose`).

    Returns:
        A dict: `ids` int32 `(batch, t_out)` without `[START]`, `[END]` included, 0 after it;
        `attention` float32 `(batch, t_out, t_in)`, zero rows after `[END]`; `length` int32
        `(batch,)`, the number of output tokens, `[END]` included.
    """
    return decode(model, source, Greedy(), config or DecodeConfig(), fast.choose(accel, model))


def sample(model, source, temperature=1.0, top_k=0, seed=0, config=None, accel=None):
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
    return dynamic_decode(_tier(model, fast.choose(accel, model)), source, strategy, config or DecodeConfig())


def beam_search(model, source, beam_width=4, length_penalty=0.6, coverage_penalty=0.0, n_best=None,
                config=None, accel=None):
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
    strategy = BeamSearch(beam_width, length_penalty, coverage_penalty, n_best)
    return decode(model, source, strategy, config or DecodeConfig(), fast.choose(accel, model))


def decode(model, source, strategy, config, accel):
    """Decodes `source` with `strategy` on the tier chosen already (`accel`, a bool from
    `tfattn.accel.seq2seq.choose`): `dynamic_decode` of the reference tier, or the fast tier's
    `decode`. For callers that chose the tier once for many calls (the `Translator`, validation).

    Args:
        model: a `Seq2Seq` model, or anything `tfattn.decoding.loop.dynamic_decode` takes.
        source: int32 `(batch, t_in)`. strategy: a strategy of `tfattn.decoding.strategies`.
        config: `DecodeConfig`. accel: bool.
    """
    model = _tier(model, accel)
    if not accel:
        return dynamic_decode(model, source, strategy, config)
    return fast.decode(model, source, strategy, config)


def _tier(model, accel):
    """`model`, built, or with `accel` a `Seq2Seq` model's fast tier (`tfattn.accel.seq2seq.Stepping`).
    Anything else that has `encode` and `decoder.step` (not a Keras model, or one without an
    `encoder`) decodes as it is."""
    if not isinstance(model, keras.Model) or getattr(model, "encoder", None) is None:
        return model
    ensure_built(model)  # a model never called has no weights yet
    return fast.Stepping(model) if accel else model
