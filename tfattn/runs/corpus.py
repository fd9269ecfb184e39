"""A run's sentence pairs: the corpus loaded and split, checked to be the file the run started on
(its fingerprint), and the vocabularies learned from its training pairs."""

import dataclasses
import datetime
import hashlib
import os

from tfattn.data import corpora
from tfattn.data.text import Tokenizer


def load_splits(config):
    """`CorpusConfig` -> `({"train": pairs, "validation": pairs, "test": pairs}, summary line)`."""
    c = config
    if not c.corpus:
        raise ValueError("No corpus given: pass --corpus PATH|URL|tfds:NAME. Received: corpus=''")
    check_fingerprint(c)
    if c.corpus.startswith("tfds:") or c.format == "parallel":
        loaded = {name: _load_split(c, split) for name, split in zip(corpora.SPLITS, c.splits)}
        parts = {name: corpus.pairs for name, corpus in loaded.items()}
        summary = "; ".join(corpus.summary() for corpus in loaded.values())
    else:
        kw = {"direction": c.direction} if c.format in (None, "anki") else {}
        corpus = corpora.load_corpus(c.corpus, format=c.format, strict=c.strict, **kw)
        parts, summary = corpora.split_pairs(corpus), corpus.summary()
    if c.max_pairs and len(parts["train"]) > c.max_pairs:
        every = len(parts["train"]) / c.max_pairs
        parts["train"] = [parts["train"][int(i * every)] for i in range(c.max_pairs)]
    return parts, summary


MEGABYTE = 1 << 20


def with_fingerprint(corpus):
    """`corpus` (a `CorpusConfig`) with its path made absolute and, for a local file, its fingerprint."""
    spec = corpus.corpus
    if not spec or spec.startswith("tfds:") or corpora._is_url(spec):
        return corpus
    path = os.path.abspath(spec)
    return dataclasses.replace(corpus, corpus=path, fingerprint=fingerprint(path) if os.path.isfile(path) else None)


def fingerprint(path):
    """`{"size", "mtime", "sha256"}` of a file: its size in bytes, its modification time, and the SHA-256
    of its first and last megabytes (of all of it, up to 2 MB)."""
    size, digest = os.path.getsize(path), hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(MEGABYTE))
        f.seek(max(size - MEGABYTE, MEGABYTE))
        digest.update(f.read(MEGABYTE))
    return {"size": size, "mtime": os.path.getmtime(path), "sha256": digest.hexdigest()}


def check_fingerprint(corpus):
    """Refuses a corpus file that is gone or is not the one fingerprinted in `corpus` (another size
    or other content); a new modification time alone (a copy) is accepted."""
    was, path = corpus.fingerprint, corpus.corpus
    if not was:
        return
    if not os.path.isfile(path):
        raise FileNotFoundError(f"The run's corpus {path} is gone (moved or deleted?); pass --corpus with where it is "
                                f"now, which is checked to be the same file ({was.get('size', 0):,} bytes, modified "
                                f"{_when(was.get('mtime'))}). Received: corpus={path!r}")
    now = fingerprint(path)
    if now["size"] != was.get("size"):
        change = f"it has {now['size']:,} bytes, the run's corpus had {was.get('size', 0):,}"
    elif now["sha256"] != was.get("sha256"):
        change = "it has the run's corpus's size but other content"
    else:
        return
    if now["mtime"] != was.get("mtime"):
        change += f"; modified {_when(now['mtime'])}, the run's at {_when(was.get('mtime'))}"
    raise ValueError(f"{path} is not the corpus this run trained on: {change}. Pass --corpus with the run's file "
                     f"where it is now. Received: corpus={path!r}")


def _when(mtime):
    return datetime.datetime.fromtimestamp(mtime or 0).isoformat(sep=" ", timespec="seconds")


def _load_split(c, split):
    if c.corpus.startswith("tfds:"):
        return corpora.load_corpus(c.corpus, split=split, data_dir=c.data_dir, strict=c.strict)
    return corpora.load_corpus(os.path.join(c.corpus, split), format="parallel", strict=c.strict,
                               source_lang=c.source_lang, target_lang=c.target_lang)


def make_tokenizers(config, train_pairs):
    """Learns source and target vocabularies from the training pairs."""
    make = lambda t, texts: Tokenizer.adapt(texts, max_tokens=t.max_tokens, level=t.level,  # noqa: E731
                                            max_length=t.max_length, lowercase=t.lowercase)
    return (make(config.source_tokenizer, [s for s, _ in train_pairs]),
            make(config.target_tokenizer, [t for _, t in train_pairs]))
