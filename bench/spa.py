"""The spa-eng corpus for benchmarks: the fixed split and word-level tokenizers, cached per process."""

import functools
import os
import sys
from pathlib import Path

from tfattn.data.corpora import load_anki, split_pairs
from tfattn.data.text import Tokenizer

SPA = Path(__file__).resolve().parents[2] / "shared" / "data" / "spa-eng" / "spa.txt"


@functools.lru_cache(maxsize=None)
def splits():
    """`{"train", "validation", "test"}` pairs (Spanish -> English) of the fixed split."""
    if not SPA.exists():
        sys.exit(f"needs {SPA} (the shared corpora are absent on this machine)")
    return split_pairs(load_anki(str(SPA)))


@functools.lru_cache(maxsize=None)
def tokenizers(vocab_size=5000, max_length=40, level="word"):
    """Source and target tokenizers learned from the training split."""
    train = splits()["train"]
    make = lambda texts: Tokenizer.adapt(texts, max_tokens=vocab_size, level=level,  # noqa: E731
                                         max_length=max_length)
    return make([s for s, _ in train]), make([t for _, t in train])


def spread(items, n):
    """`n` items taken at even intervals over the whole list (all of them if it is shorter).

    spa.txt is sorted by length, so its first TEST sentences are its shortest: a sample for timing
    single sentences must cover the whole split.
    """
    if n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
