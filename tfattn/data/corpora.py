"""Parallel corpora as Python string pairs: Anki TSV, generic TSV, aligned files, TFDS.

Every loader returns a `Corpus`: the `(source, target)` pairs, how many lines were read, and which
lines were skipped and why. Files are read line by line as `tfattn.data.anki` reads them (each line
decoded and cleaned on its own), so one bad line (blank, no tab, an empty side, bytes that are not
UTF-8) is skipped and counted instead of failing the whole file; `strict=True` turns the first bad
line into a `ValueError` naming the file, the 1-based line number and the problem.

`split_pairs` splits by the fixed rule of `tfattn.data.anki.split_of`: with `i` the 0-based line
index in the file, TEST is `i % 50 == 0`, VALIDATION is `i % 50 == 1`, TRAIN is the rest. The index
is the line's position in the file, not among the kept pairs, so skipping a bad line never moves
other pairs between splits.

Example:

```python
corpus = load_corpus("../shared/data/spa-eng/spa.txt")
print(corpus.summary())   # spa.txt: 118964 lines read, 0 skipped
splits = split_pairs(corpus)
len(splits["test"])       # 2380
```
"""

import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import sys
import urllib.error
import urllib.parse
import warnings

from tfattn.data.anki import (
    ANKI_SPA_URL,
    SPLITS,
    clean_text,
    decode,
    find_anki_file,
    read_anki,
    read_columns,
    read_lines,
    require_file,
    sides_problem,
    split_of,
)
from tfattn.data.tfds_check import tensorflow_datasets

FORMATS = ("anki", "tsv", "parallel")
MAX_SKIPPED_KEPT = 20
SHOWN_LINES_PER_REASON = 3
URL_SCHEMES = ("http", "https", "file")

_SHOWN_CHARS = 200


@dataclasses.dataclass
class Corpus:
    """Sentence pairs read from one source, with an account of the lines that were skipped.

    Args:
        pairs: list of `(source, target)` string tuples.
        lines_read: int. Lines (or examples) read, bad ones included. Defaults to `0`.
        lines_skipped: int. Lines skipped as bad. Defaults to `0`.
        skipped: list of `(line_number, reason)`, 1-based, at most the first 20. Defaults to `[]`.
        reasons: dict. Every kind of reason (`"no tab"`, `"invalid UTF-8"`, ...) -> `[lines
            skipped for it, [its first 3 line numbers]]`, in order of first appearance. Defaults
            to the kinds of `skipped`.
        name: str. Where the pairs came from, e.g. `"spa.txt"`. Defaults to `""`.
        line_index: list of int. The 0-based line index in the file of each pair; used by
            `split_pairs`. Defaults to `range(len(pairs))`.

    Example:

    >>> corpus = Corpus([("Ve.", "Go.")], lines_read=2, lines_skipped=1,
    ...                 skipped=[(2, "no tab")], name="tiny.txt")
    >>> corpus.summary()
    'tiny.txt: 2 lines read, 1 skipped (no tab: line 2)'
    """

    pairs: list
    lines_read: int = 0
    lines_skipped: int = 0
    skipped: list = dataclasses.field(default_factory=list)
    name: str = ""
    line_index: list = dataclasses.field(default_factory=list)
    reasons: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.reasons:
            for number, reason in self.skipped:
                _count_reason(self.reasons, number, reason)
        if not self.line_index:
            self.line_index = list(range(len(self.pairs)))
        if len(self.line_index) != len(self.pairs):
            raise ValueError(
                f"line_index must have one entry per pair ({len(self.pairs)} pairs). "
                f"Received: len(line_index)={len(self.line_index)!r}"
            )

    def __len__(self):
        return len(self.pairs)

    @property
    def sources(self):
        """list of str: the source side of every pair."""
        return [source for source, _ in self.pairs]

    @property
    def targets(self):
        """list of str: the target side of every pair."""
        return [target for _, target in self.pairs]

    def summary(self):
        """Returns one short line: the name, lines read, lines skipped, and each reason with how
        many lines it skipped and the first of them, e.g. `"no tab: 990 lines (2, 5, 9, ...)"`."""
        line = f"{self.name}: {self.lines_read} lines read, {self.lines_skipped} skipped"
        if not self.reasons:
            return line
        reasons = []
        for kind, (count, numbers) in self.reasons.items():
            shown = ", ".join(map(str, numbers))
            reasons.append(f"{kind}: line {shown}" if count == 1 else f"{kind}: lines {shown}"
                           if count == len(numbers) else f"{kind}: {count} lines ({shown}, ...)")
        counted = sum(count for count, _ in self.reasons.values())
        if self.lines_skipped > counted:
            reasons.append(f"and {self.lines_skipped - counted} more")
        return f"{line} ({'; '.join(reasons)})"


def _count_reason(reasons, number, reason):
    """Counts line `number` under its kind of reason: `"invalid UTF-8 at byte 3"` -> `"invalid UTF-8"`,
    `"too few columns (found 2, need 3)"` -> `"too few columns"`."""
    kind = re.sub(r" at byte \d+$| \(.*\)$", "", reason)
    count, numbers = reasons.setdefault(kind, [0, []])
    reasons[kind][0] = count + 1
    if len(numbers) < SHOWN_LINES_PER_REASON:
        numbers.append(number)


class _Collector:
    """Accumulates kept pairs and skipped lines for one file; raises on a bad line if strict."""

    def __init__(self, where, strict):
        self.where, self.strict = where, strict
        self.pairs, self.line_index, self.skipped, self.lines_skipped, self.reasons = [], [], [], 0, {}

    def keep(self, number, source, target):
        self.pairs.append((source, target))
        self.line_index.append(number - 1)

    def skip(self, number, reason, received):
        if self.strict:
            raise ValueError(
                f"{self.where}, line {number}: {reason}. Pass strict=False (drop --strict) to skip "
                f"and count bad lines. Received: line={_shorten(received)!r}"
            )
        self.lines_skipped += 1
        _count_reason(self.reasons, number, reason)
        if len(self.skipped) < MAX_SKIPPED_KEPT:
            self.skipped.append((number, reason))

    def corpus(self, lines_read, name):
        return Corpus(
            pairs=self.pairs,
            lines_read=lines_read,
            lines_skipped=self.lines_skipped,
            skipped=self.skipped,
            name=name,
            line_index=self.line_index,
            reasons=self.reasons,
        )


def _shorten(value):
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return value[:_SHOWN_CHARS] + "..."
    return value


def _collect(lines, where, name, strict):
    """A `Corpus` of the `anki.Line`s of one file: good lines kept, bad ones skipped (or raised)."""
    collector = _Collector(where, strict)
    lines_read = 0
    for line in lines:
        lines_read = line.number
        if line.problem:
            collector.skip(line.number, line.problem, line.text)
        else:
            collector.keep(line.number, *line.pair)
    return collector.corpus(lines_read, name)


def load_tsv(path, source_column=0, target_column=1, strict=False):
    """Loads pairs from two columns of a tab-separated file.

    Args:
        path: str or path-like. A UTF-8 file, one pair per line.
        source_column: int. 0-based column of the source sentence. Defaults to `0`.
        target_column: int. 0-based column of the target sentence. Defaults to `1`.
        strict: bool. Raise `ValueError` on the first bad line instead of skipping it.
            Defaults to `False`.

    Returns:
        A `Corpus`.

    Example:

    >>> corpus = load_tsv("pairs.tsv", source_column=2, target_column=0)  # doctest: +SKIP
    """
    for column_name, column in (("source_column", source_column), ("target_column", target_column)):
        if not isinstance(column, int) or column < 0:
            raise ValueError(
                f"{column_name} must be a non-negative int. Received: {column_name}={column!r}"
            )
    if source_column == target_column:
        raise ValueError(
            "source_column and target_column must differ. "
            f"Received: source_column={source_column!r}"
        )
    path = os.fspath(path)
    lines = read_columns(path, source_column, target_column)
    return _collect(lines, path, os.path.basename(path), strict)


def load_anki(path, direction="to_english", strict=False):
    """Loads an Anki/Tatoeba file: `English<TAB>Other[<TAB>attribution]` per line.

    A third column (the attribution of the manythings.org files) is ignored.

    Args:
        path: str or path-like, e.g. `"spa-eng/spa.txt"`.
        direction: str. `"to_english"` (source = the other language, target = English) or
            `"from_english"`. Defaults to `"to_english"`.
        strict: bool. Raise `ValueError` on the first bad line instead of skipping it.
            Defaults to `False`.

    Returns:
        A `Corpus`.

    Example:

    >>> corpus = load_anki("spa-eng/spa.txt")  # doctest: +SKIP
    >>> corpus.pairs[0]  # doctest: +SKIP
    ('Ve.', 'Go.')
    """
    path = os.fspath(path)
    return _collect(read_anki(path, direction), path, os.path.basename(path), strict)


def _parallel_line(source_line, target_line):
    """Returns `((source, target), None)` from two aligned `read_lines` items, or `(text, reason)`."""
    (_, source, source_problem), (_, target, target_problem) = source_line, target_line
    shown = f"{source}\t{target}"
    if source_problem:
        return shown, f"source has {source_problem}"
    if target_problem:
        return shown, f"target has {target_problem}"
    source, target = clean_text(source), clean_text(target)
    problem = sides_problem(source, target)
    return (shown, problem) if problem else ((source, target), None)


def _count_lines(path):
    return sum(1 for _ in read_lines(path))


def load_parallel(source_path, target_path, strict=False):
    """Loads two line-aligned files, such as Multi30k `train.de` and `train.en`.

    Args:
        source_path: str or path-like. One source sentence per line.
        target_path: str or path-like. The target sentence on the same line number.
        strict: bool. Raise `ValueError` on the first bad line instead of skipping it.
            Defaults to `False`.

    Returns:
        A `Corpus` named `"<source name> + <target name>"`.

    Raises:
        ValueError: if the files have different numbers of lines.

    Example:

    >>> corpus = load_parallel("multi30k/train.de", "multi30k/train.en")  # doctest: +SKIP
    >>> len(corpus)  # doctest: +SKIP
    29000
    """
    source_path, target_path = os.fspath(source_path), os.fspath(target_path)
    require_file(source_path)
    require_file(target_path)
    counts = _count_lines(source_path), _count_lines(target_path)
    if counts[0] != counts[1]:
        raise ValueError(
            f"Parallel files must have the same number of lines: {counts[0]} lines in "
            f"{source_path} but {counts[1]} lines in {target_path}. "
            f"Received: source_path={source_path!r}, target_path={target_path!r}"
        )
    collector = _Collector(f"{source_path} + {target_path}", strict)
    lines = zip(read_lines(source_path), read_lines(target_path))
    for number, (source_line, target_line) in enumerate(lines, start=1):
        result, problem = _parallel_line(source_line, target_line)
        if problem:
            collector.skip(number, problem, result)
        else:
            collector.keep(number, *result)
    name = f"{os.path.basename(source_path)} + {os.path.basename(target_path)}"
    return collector.corpus(counts[0], name)


def _decode_example_side(value):
    """Returns `(text, problem)` for one TFDS value (bytes or str)."""
    if isinstance(value, bytes):
        value, problem = decode(value)
        if problem:
            return value, problem
    return clean_text(str(value)), None


def _tfds_pairs(dataset, source_key, target_key):
    """Yields raw `(source, target)` values from a supervised or a dict dataset."""
    tfds = tensorflow_datasets()

    if source_key is None:
        yield from tfds.as_numpy(dataset)
        return
    keys = sorted(dataset.element_spec)
    for key_name, key in (("source_key", source_key), ("target_key", target_key)):
        if key not in dataset.element_spec:
            raise ValueError(
                f"{key_name} must be one of the features {keys}. Received: {key_name}={key!r}"
            )
    for example in tfds.as_numpy(dataset):
        yield example[source_key], example[target_key]


def load_tfds(name, split="train", data_dir=None, source_key=None, target_key=None,
              download=True, strict=False):
    """Loads a TensorFlow Datasets translation dataset as string pairs.

    Without keys the dataset's supervised keys give `(source, target)`; for example
    `ted_hrlr_translate/pt_to_en` gives Portuguese -> English. With `source_key` and `target_key`,
    those features are used instead (e.g. `"de"` and `"en"` of `wmt14_translate/de-en`).

    The first call downloads and prepares the dataset into `data_dir`, which needs network access;
    later calls, or calls on a `data_dir` that already holds the prepared dataset, read it offline.
    `tensorflow_datasets` is an optional dependency (`pip install tfattn[data]`); without it, or where
    it is installed but fails to import, an `ImportError` says why (`tfattn.data.tfds_check`).

    Args:
        name: str. TFDS name with optional config and version, e.g. `"ted_hrlr_translate/pt_to_en"`.
        split: str. A TFDS split, e.g. `"train"`, `"validation"`, `"test[:10%]"`.
            Defaults to `"train"`.
        data_dir: str or `None`. Where prepared datasets live. Defaults to `None` (TFDS default,
            `~/tensorflow_datasets`).
        source_key: str or `None`. Feature used as source. Defaults to `None` (supervised keys).
        target_key: str or `None`. Feature used as target. Defaults to `None` (supervised keys).
        download: bool. Download and prepare the dataset if it is not in `data_dir` yet.
            Defaults to `True`.
        strict: bool. Raise `ValueError` on an example with an empty side or invalid UTF-8
            instead of skipping it. Defaults to `False`.

    Returns:
        A `Corpus`; its "line numbers" are 1-based example numbers in the split's read order.

    Example:

    >>> corpus = load_tfds("ted_hrlr_translate/pt_to_en", split="validation")  # doctest: +SKIP
    """
    if not name:
        raise ValueError(
            "A TFDS spec needs a dataset name, e.g. 'tfds:ted_hrlr_translate/pt_to_en'. "
            f"Received: name={name!r}"
        )
    if (source_key is None) != (target_key is None):
        raise ValueError(
            "Pass both source_key and target_key, or neither to use the supervised keys. "
            f"Received: source_key={source_key!r}, target_key={target_key!r}"
        )
    tfds = tensorflow_datasets()
    if _tfds_dataset(name) == "tfattn_anki":  # this package's builder: register it first
        from tfattn.data import tfds_anki  # noqa: F401
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, as_supervised=source_key is None,
                            download=download)
    except tfds.core.DatasetNotFoundError as error:  # its message lists every TFDS dataset
        raise ValueError(_dataset_not_found(name, str(error))) from None
    where = f"tfds:{name}[{split}]"
    collector = _Collector(where, strict)
    number = 0
    pairs = _tfds_pairs(dataset, source_key, target_key)
    for number, (raw_source, raw_target) in enumerate(pairs, start=1):
        source, source_problem = _decode_example_side(raw_source)
        target, target_problem = _decode_example_side(raw_target)
        problem = source_problem or target_problem or sides_problem(source, target)
        if problem:
            collector.skip(number, problem, f"{source}\t{target}")
        else:
            collector.keep(number, source, target)
    return collector.corpus(number, where)


def _dataset_not_found(name, message):
    """A short message for TFDS's `DatasetNotFoundError`, whose own lists every dataset it knows."""
    lines = message.splitlines()
    guess = next((line.strip() for line in lines if line.startswith("Did you mean")), None)
    hint = guess or "See https://www.tensorflow.org/datasets/catalog/overview."
    return f"TFDS has no dataset {_tfds_dataset(name)!r}. {hint} Received: name={name!r}"


def _tfds_dataset(name):
    """The dataset of a TFDS name: `"ted_hrlr_translate"` of `"ted_hrlr_translate/pt_to_en:1.0.0"`."""
    return name.split("/")[0].split(":")[0]


def download_anki(url=ANKI_SPA_URL, cache_dir=None):
    """Downloads and extracts an Anki-format zip once, and returns the path of its `.txt` file.

    The zip is cached by `keras.utils.get_file` under `<cache_dir>/datasets/`; a second call finds
    it there and does not download again. `http://`, `https://` and `file://` URLs work (a local zip
    is read through its `file://` URL: `pathlib.Path("spa-eng.zip").resolve().as_uri()`).

    Args:
        url: str. URL of a zip holding one `<lang>.txt` (an `_about.txt` may sit beside it).
            Defaults to `ANKI_SPA_URL`, the English-Spanish file of the TensorFlow tutorial.
        cache_dir: str or `None`. Defaults to `None` (`$KERAS_HOME` or `~/.keras`).

    Returns:
        str. Path of the extracted sentence-pair file.

    Raises:
        OSError: if the URL cannot be fetched, naming it.
        ValueError: if the file fetched is not a zip, or holds no single sentence-pair `.txt`.

    Example:

    >>> path = download_anki()  # doctest: +SKIP
    >>> load_anki(path).summary()  # doctest: +SKIP
    'spa.txt: 118964 lines read, 0 skipped'
    """
    if cache_dir is not None:  # get_file silently falls back to /tmp/.keras for a missing dir.
        os.makedirs(cache_dir, exist_ok=True)
    extracted = _fetch(url, cache_dir)
    try:
        if not os.path.exists(extracted):  # get_file only warns when the file is not an archive
            raise ValueError(
                f"{url} is not a zip archive; a URL corpus must be an Anki zip holding one "
                f"<lang>.txt. Received: url={url!r}"
            )
        if os.path.isfile(extracted):  # Keras before 3.6 returned the archive, extracted beside it.
            extracted = os.path.dirname(extracted)
        return str(find_anki_file(extracted))
    except ValueError:  # a refused download leaves nothing in the cache
        for leftover in (extracted, f"{extracted}_archive"):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
            elif os.path.lexists(leftover):
                os.remove(leftover)
        raise


def _fetch(url, cache_dir):
    """`keras.utils.get_file(url, extract=True)`; its progress goes to stderr (stdout is for results;
    none at all while Keras' interactive logging is off, as under `tfattn train --quiet`)."""
    import keras

    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.filterwarnings("ignore", "Could not extract archive")  # the caller's error says so
            return keras.utils.get_file(origin=url, extract=True, cache_dir=cache_dir)
    except Exception as error:  # get_file raises a bare Exception("URL fetch failure ...")
        cause = error.__context__  # the urllib error, if that was it
        http = isinstance(cause, urllib.error.HTTPError)  # "HTTP Error 404: Not Found"
        reason = cause if http else getattr(cause, "reason", error)
        raise OSError(
            f"Cannot download the corpus from {url}: {reason}. Received: url={url!r}"
        ) from error


def split_pairs(pairs):
    """Splits pairs into train, validation and test by the fixed `split_of` rule.

    A `Corpus` is split by each pair's line index in its file (`Corpus.line_index`), so a skipped
    bad line does not move the other pairs between splits; a plain list is split by position.

    Args:
        pairs: a `Corpus`, or a list of `(source, target)` tuples.

    Returns:
        dict with keys `"train"`, `"validation"`, `"test"`, each a list of `(source, target)`.

    Example:

    >>> parts = split_pairs([(str(i), str(i)) for i in range(120)])
    >>> [len(parts[name]) for name in ("train", "validation", "test")]
    [114, 3, 3]
    """
    indices = pairs.line_index if isinstance(pairs, Corpus) else range(len(pairs))
    items = pairs.pairs if isinstance(pairs, Corpus) else pairs
    parts = {name: [] for name in SPLITS}
    for index, pair in zip(indices, items):
        parts[split_of(index)].append(tuple(pair))
    return parts


def _is_url(spec):
    return urllib.parse.urlsplit(spec).scheme.lower() in URL_SCHEMES


def _resolve_format(spec, format):
    """Returns the format of a file or URL spec: the given one, or `"anki"` for .txt/.tsv/URLs."""
    if format is not None:
        if format not in FORMATS:
            raise ValueError(
                f"format must be one of {FORMATS} or None. Received: format={format!r}"
            )
        return format
    if _is_url(spec) or pathlib.Path(spec).suffix.lower() in (".txt", ".tsv"):
        return "anki"
    raise ValueError(
        "Cannot tell the corpus format from the name; pass format= (--format) one of "
        f"{FORMATS}, or a 'tfds:NAME' spec. Received: spec={spec!r}"
    )


def _load_parallel_prefix(prefix, strict, source_lang=None, target_lang=None):
    if not source_lang or not target_lang:
        raise ValueError(
            "format='parallel' (--format parallel) needs source_lang= and target_lang= "
            "(--source-lang, --target-lang), e.g. 'de' and 'en' for PREFIX.de and PREFIX.en. "
            f"Received: source_lang={source_lang!r}, target_lang={target_lang!r}"
        )
    return load_parallel(f"{prefix}.{source_lang}", f"{prefix}.{target_lang}", strict=strict)


def load_corpus(spec, format=None, strict=False, **kw):
    """Loads a corpus from a spec string: a TFDS name, a URL, a file, or a parallel-file prefix.

    - `"tfds:NAME"` -> `load_tfds(NAME, **kw)` (kw: split, data_dir, source_key, target_key, ...).
    - an `http(s)://` or `file://` URL -> `download_anki(url, cache_dir)`, then loaded as a file.
    - a `.txt` or `.tsv` path -> `load_anki(path, **kw)`, or `load_tsv(path, **kw)` with
      `format="tsv"`. Other names need an explicit `format`. A local `.zip` is refused: unpack it,
      or pass its `file://` URL.
    - `format="parallel"` with `spec="PREFIX"`, `source_lang="de"`, `target_lang="en"` ->
      `load_parallel("PREFIX.de", "PREFIX.en")`.

    Args:
        spec: str or path-like.
        format: str or `None`. One of `"anki"`, `"tsv"`, `"parallel"`. Defaults to `None`
            (inferred as above).
        strict: bool. Raise on the first bad line instead of skipping it. Defaults to `False`.
        **kw: passed to the loader chosen.

    Returns:
        A `Corpus`.

    Raises:
        ValueError: for an unknown or unguessable format, a local `.zip`, or an unknown TFDS name.
        FileNotFoundError: for a missing file, naming its path.
        OSError: for a URL that cannot be fetched, naming it.

    Example:

    >>> load_corpus("multi30k-en-de/train", format="parallel",
    ...             source_lang="de", target_lang="en")  # doctest: +SKIP
    """
    spec = os.fspath(spec)
    if spec.startswith("tfds:"):
        return load_tfds(spec[len("tfds:"):], strict=strict, **kw)
    if format != "parallel" and not _is_url(spec) and pathlib.Path(spec).suffix.lower() == ".zip":
        require_file(spec)
        raise ValueError(
            f"{spec} is a zip archive: unpack it and pass the .txt file inside (e.g. "
            f"spa-eng/spa.txt), or pass its file:// URL ({pathlib.Path(spec).resolve().as_uri()}) "
            f"to have it extracted into the Keras cache. Received: spec={spec!r}"
        )
    if format != "parallel" and not _is_url(spec) and (os.path.lexists(spec) or os.path.isdir(spec)):
        require_file(spec)  # says it is a directory, a pipe, a link loop or gzip, before guessing a format
    format = _resolve_format(spec, format)
    if format == "parallel":
        return _load_parallel_prefix(spec, strict, **kw)
    if _is_url(spec):
        spec = download_anki(spec, cache_dir=kw.pop("cache_dir", None))
    loader = load_anki if format == "anki" else load_tsv
    return loader(spec, strict=strict, **kw)
