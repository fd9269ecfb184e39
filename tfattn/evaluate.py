"""Corpus BLEU and chrF with sacrebleu, and BLEU by source sentence length.

Everything here works on plain Python strings (bytes, e.g. from a SavedModel, are decoded as UTF-8),
so it can score the output of any model or of a file on disk. `sacrebleu` is imported where used.

Scores follow sacrebleu's defaults: BLEU with the `13a` tokenizer and chrF with character 6-grams and
beta 2, each against one raw (untokenized) reference per hypothesis. Corpus BLEU counts n-grams up to
4 without smoothing of the order, so a corpus whose every sentence has fewer than 4 words scores 0.

Reference: Papineni et al. 2002 (BLEU); Popovic 2015 (chrF); Post 2018, "A Call for Clarity in
Reporting BLEU Scores" (sacrebleu); Bahdanau et al. 2014 (arXiv 1409.0473), figure 2 (BLEU by length).
"""

# Source length buckets in whitespace-separated words, inclusive; `None` means no upper bound.
LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 20), (21, None))


def bucket_label(bucket):
    """The label of a length bucket: `"1-5"` for `(1, 5)`, `"21+"` for `(21, None)`.

    Args:
        bucket: tuple `(low, high)` of ints; `high` may be `None` for an open bucket.

    Returns:
        str.

    Example:
        >>> bucket_label((21, None))
        '21+'
    """
    low, high = bucket
    return f"{low}+" if high is None else f"{low}-{high}"


def length_bucket(n_words, buckets=LENGTH_BUCKETS):
    """The label of the bucket that holds a sentence of `n_words` words.

    A sentence shorter than the first bucket (an empty source, 0 words) is counted in the first
    bucket, so that every sentence lands in exactly one bucket.

    Args:
        n_words: int. Number of whitespace-separated words, `>= 0`.
        buckets: tuple of `(low, high)` pairs, sorted, contiguous. Defaults to `LENGTH_BUCKETS`.

    Returns:
        str, the bucket label.

    Example:
        >>> length_bucket(6)
        '6-10'
    """
    if n_words < 0:
        raise ValueError(f"n_words must be >= 0. Received: n_words={n_words!r}")
    for low, high in buckets:
        if high is None or n_words <= high:
            return bucket_label((low, high))
    raise ValueError(f"No bucket holds this length; the last bucket must be open. "
                     f"Received: n_words={n_words!r}")


def _as_texts(texts):
    """A list of str from any iterable of str or bytes (a NumPy array of bytes included)."""
    return [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in texts]


def _check_same_length(**named):
    """Raise ValueError unless every named list has the same length."""
    lengths = {name: len(values) for name, values in named.items()}
    if len(set(lengths.values())) > 1:
        received = ", ".join(f"len({name})={n!r}" for name, n in lengths.items())
        names = list(lengths)
        names = f"{', '.join(names[:-1])} and {names[-1]}"
        raise ValueError(f"{names} must have the same length. Received: {received}")


def score(hypotheses, references, lowercase=True):
    """Corpus BLEU and chrF of hypotheses against one reference each.

    Args:
        hypotheses: list of str (or bytes). Detokenized model outputs.
        references: list of str (or bytes). Raw references, same length as `hypotheses`.
        lowercase: bool. Compare case-insensitively. Defaults to `True`.

    Returns:
        dict with `bleu` (float, 0-100), `chrf` (float, 0-100) and `n` (int, number of pairs).
        Empty input gives `{"bleu": 0.0, "chrf": 0.0, "n": 0}`.

    Example:
        >>> result = score(["the cat sat on the mat"], ["The cat sat on the mat"])
        >>> round(result["bleu"], 2), round(result["chrf"], 2), result["n"]
        (100.0, 100.0, 1)
    """
    hypotheses, references = _as_texts(hypotheses), _as_texts(references)
    _check_same_length(hypotheses=hypotheses, references=references)
    if not hypotheses:
        return {"bleu": 0.0, "chrf": 0.0, "n": 0}
    bleu, chrf = _metrics(lowercase)
    return {"bleu": float(bleu.corpus_score(hypotheses, [references]).score),
            "chrf": float(chrf.corpus_score(hypotheses, [references]).score), "n": len(hypotheses)}


def _metrics(lowercase):
    from sacrebleu.metrics import BLEU, CHRF

    return BLEU(lowercase=lowercase), CHRF(lowercase=lowercase)


def signatures(lowercase=True):
    """sacrebleu's signature strings of the BLEU and chrF that `score` computes, which say how a
    score was made (references, case, tokenizer, smoothing, sacrebleu's version), so that scores
    from elsewhere can be compared with it (Post 2018).

    Returns:
        dict with `bleu` and `chrf` (str).

    Example:
        >>> signatures()["bleu"]  # doctest: +ELLIPSIS
        'nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:...'
    """
    bleu, chrf = _metrics(lowercase)
    for metric in (bleu, chrf):  # the signature counts the references, known once a corpus is scored
        metric.corpus_score(["x"], [["x"]])
    return {"bleu": bleu.get_signature().format(), "chrf": chrf.get_signature().format()}


def bleu_by_length(sources, hypotheses, references, lowercase=True):
    """Corpus BLEU within each source length bucket of `LENGTH_BUCKETS`.

    Args:
        sources: list of str (or bytes). Source sentences; their length is counted in
            whitespace-separated words.
        hypotheses: list of str (or bytes). Same length as `sources`.
        references: list of str (or bytes). Same length as `sources`.
        lowercase: bool. Compare case-insensitively. Defaults to `True`.

    Returns:
        dict from bucket label (`"1-5"`, ..., `"21+"`, in order) to `{"bleu": float, "n": int}`.
        An empty bucket gives `{"bleu": None, "n": 0}`.

    Example:
        >>> by_length = bleu_by_length(["a b c", "d"], ["x y z w", "q"], ["x y z w", "q"])
        >>> by_length["1-5"]["n"], by_length["6-10"]
        (2, {'bleu': None, 'n': 0})
    """
    sources, hypotheses = _as_texts(sources), _as_texts(hypotheses)
    references = _as_texts(references)
    _check_same_length(sources=sources, hypotheses=hypotheses, references=references)
    groups = {bucket_label(bucket): ([], []) for bucket in LENGTH_BUCKETS}
    for source, hypothesis, reference in zip(sources, hypotheses, references):
        hyps, refs = groups[length_bucket(len(source.split()))]
        hyps.append(hypothesis)
        refs.append(reference)
    result = {}
    for label, (hyps, refs) in groups.items():
        bleu = score(hyps, refs, lowercase=lowercase)["bleu"] if hyps else None
        result[label] = {"bleu": bleu, "n": len(hyps)}
    return result


def _round(value):
    return None if value is None else round(float(value), 2)


def evaluate_texts(sources, hypotheses, references, lowercase=True):
    """All scores of a test set in one JSON-serializable dict, floats rounded to 2 decimals.

    Args:
        sources: list of str (or bytes). Source sentences.
        hypotheses: list of str (or bytes). Model outputs, same length as `sources`.
        references: list of str (or bytes). Raw references, same length as `sources`.
        lowercase: bool. Compare case-insensitively. Defaults to `True`.

    Returns:
        dict with `bleu`, `chrf`, `n` (see `score`), `bleu_by_length` (see `bleu_by_length`) and
        `signature`, sacrebleu's signature of each score (see `signatures`).

    Example:
        >>> result = evaluate_texts(["hola"], ["hello there my friend"], ["hello there my friend"])
        >>> result["bleu"], result["bleu_by_length"]["1-5"]
        (100.0, {'bleu': 100.0, 'n': 1})
    """
    sources, hypotheses = _as_texts(sources), _as_texts(hypotheses)
    references = _as_texts(references)
    _check_same_length(sources=sources, hypotheses=hypotheses, references=references)
    totals = score(hypotheses, references, lowercase=lowercase)
    by_length = bleu_by_length(sources, hypotheses, references, lowercase=lowercase)
    return {
        "bleu": _round(totals["bleu"]),
        "chrf": _round(totals["chrf"]),
        "n": totals["n"],
        "bleu_by_length": {label: {"bleu": _round(v["bleu"]), "n": v["n"]}
                           for label, v in by_length.items()},
        "signature": signatures(lowercase),
    }
