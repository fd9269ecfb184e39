"""The Anki/Tatoeba sentence-pair file: where it is, how its lines are read, and the fixed split.

An Anki file (the manythings.org files, e.g. the `spa-eng.zip` of the TensorFlow tutorial) holds one
pair per line, `English<TAB>Other[<TAB>attribution]`. Two modules build on this one, which imports
neither: `tfattn.data.corpora` (loaders that return a `Corpus`) and `tfattn.data.tfds_anki` (the TFDS
builder), so both read a file the same way and split it the same way.

Lines are read in binary and each is decoded on its own, so one bad line (blank, no tab, an empty
side, bytes that are not UTF-8) comes back with its reason instead of failing the whole file. A UTF-8
byte order mark at the start of a file is ignored and CRLF line ends are accepted. A file that starts
with a UTF-16 or UTF-32 byte order mark is decoded as such; one full of NUL bytes without a mark is
refused with one line (`text_encoding`), instead of being read as pairs of split characters. Every text is
cleaned the same way: the no-break spaces U+00A0, U+2007 and U+202F become a plain space and
surrounding whitespace is stripped.

The fixed split used by every benchmark is `split_of(i)`: with `i` the 0-based line index in the
file, TEST is `i % 50 == 0`, VALIDATION is `i % 50 == 1`, TRAIN is the rest. The index is the line's
position in the file, not among the good lines, so a bad line never moves other pairs between splits.

Example:

```python
lines = list(read_anki("../shared/data/spa-eng/spa.txt"))
lines[0]                  # Line(number=1, text='Go.\\tVe.\\t...', pair=('Ve.', 'Go.'), problem=None)
split_of(lines[0].index)  # 'test'
```
"""

import errno
import os
import pathlib
import shlex
import stat
import typing

from tfattn import files

ANKI_SPA_URL = "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
DIRECTIONS = ("to_english", "from_english")
SPLITS = ("train", "validation", "test")
SPLIT_PERIOD = 50

_BOM = b"\xef\xbb\xbf"
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),  # before UTF-16's
              (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
_SNIFF_BYTES = 4096
_SPACES = str.maketrans({"\u00a0": " ", "\u2007": " ", "\u202f": " "})


class Line(typing.NamedTuple):
    """One line of a sentence-pair file, read and cleaned.

    Attributes:
        number: int. 1-based line number in the file.
        text: str. The decoded line (bytes that are not UTF-8 shown as `\\x..` escapes).
        pair: `(source, target)` of cleaned str, or `None` for a bad line.
        problem: str or `None`. Why the line is bad, e.g. `"no tab"`; `None` for a good line.
    """

    number: int
    text: str
    pair: tuple | None
    problem: str | None

    @property
    def index(self):
        """int: the 0-based line index, the one `split_of` takes."""
        return self.number - 1


def clean_text(text):
    """Maps the no-break spaces U+00A0, U+2007, U+202F to a plain space and strips the ends.

    Args:
        text: str.

    Returns:
        str.

    Example:

    >>> clean_text(" ¿Qué?\\u00a0 ")
    '¿Qué?'
    """
    return text.translate(_SPACES).strip()


def decode(raw):
    """Decodes UTF-8 bytes: returns `(text, problem)`, problem `None` or where the UTF-8 is invalid.

    Args:
        raw: bytes.

    Returns:
        `(str, str or None)`; invalid bytes appear in the text as `\\x..` escapes.

    Example:

    >>> decode(b"\\xff bad")
    ('\\\\xff bad', 'invalid UTF-8 at byte 0')
    """
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as error:
        text = raw.decode("utf-8", errors="backslashreplace")
        return text, f"invalid UTF-8 at byte {error.start}"


def require_file(path):
    """Raises `FileNotFoundError` (or `IsADirectoryError`) naming the absolute path unless `path`
    is a file."""
    if os.path.isdir(path):
        inside = [p.name for p in pathlib.Path(path).glob("*.t[xs][tv]") if not p.name.startswith("_")]
        hint = f" (it holds {files.listing(inside, most=3)})" if inside else ""
        raise IsADirectoryError(
            f"{os.path.abspath(path)} is a directory; pass the sentence-pair file in it{hint}, or, for "
            f"aligned SPLIT.LANG files, --format parallel. Received: path={str(path)!r}"
        )
    if not os.path.isfile(path):
        raise _not_a_file(path)
    with open(path, "rb") as file:
        compressed = file.read(2) == _GZIP_MAGIC
    if compressed:
        raise ValueError(
            f"{os.path.abspath(path)} is gzip-compressed; a corpus is read as plain text: unpack it first "
            f"(gunzip -k {shlex.quote(str(path))}) and pass the file it writes. Received: path={str(path)!r}"
        )


_GZIP_MAGIC = b"\x1f\x8b"


def _not_a_file(path):
    """The error for a `path` that is not a regular file (and not a directory): a pipe or device, a
    symbolic link that loops or leads nowhere, or nothing at all."""
    where, received = os.path.abspath(path), f"Received: path={str(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return FileNotFoundError(f"{where} is a symbolic link loop (links that lead back to each other); "
                                     f"point it at the corpus file. {received}")
        if os.path.islink(path):
            return FileNotFoundError(f"{where} is a symbolic link to {os.readlink(path)}, which does not "
                                     f"exist. {received}")
        return FileNotFoundError(f"No such corpus file: {where}. {received}")
    kind = "a pipe (such as <(command))" if stat.S_ISFIFO(mode) else "not a regular file (a device or socket)"
    return ValueError(f"{where} is {kind}; a corpus is read more than once, so it must be a regular file: "
                      f"save it first (e.g. command > corpus.txt) and pass that. {received}")


def text_encoding(path):
    """The encoding of a corpus file: `"utf-16"` or `"utf-32"` if it starts with their byte order
    mark, else `"utf-8"`.

    Raises:
        ValueError: if the file starts with many NUL bytes and no byte order mark: UTF-16 or UTF-32
            without one, or not text at all (one clear line, instead of pairs of split characters).
    """
    with open(path, "rb") as file:
        head = file.read(_SNIFF_BYTES)
    for bom, encoding in _WIDE_BOMS:
        if head.startswith(bom):
            return encoding
    nuls = head.count(0)
    if nuls < max(16, len(head) // 8):  # a few NULs: UTF-8 text, its lines judged one by one
        return "utf-8"
    even, odd = head[0::2].count(0), head[1::2].count(0)
    guess = "UTF-16LE" if odd > 4 * even else "UTF-16BE" if even > 4 * odd else None
    name = os.path.basename(path)
    if guess:
        raise ValueError(
            f"{path} looks like {guess} text without a byte order mark ({nuls} NUL bytes in its first "
            f"{len(head)}); save it as UTF-8 (e.g. iconv -f {guess} -t UTF-8 {name} > utf8-{name}). "
            f"Received: path={str(path)!r}"
        )
    raise ValueError(
        f"{path} is not UTF-8 text ({nuls} NUL bytes in its first {len(head)}: UTF-32 without a byte "
        f"order mark, or binary); a text corpus, one pair per line, is expected. Received: path={str(path)!r}"
    )


def read_lines(path):
    """Yields `(line_number, text, problem)` for every line of a file, decoded on its own.

    The BOM and the LF or CRLF end are removed; `problem` is `None` or says where the UTF-8 is
    invalid (see `decode`).

    Args:
        path: str or path-like.

    Raises:
        FileNotFoundError: if `path` is not a file, naming it.
    """
    require_file(path)
    encoding = text_encoding(path)
    if encoding != "utf-8":
        yield from _read_wide_lines(path, encoding)
        return
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            yield (number, *decode(raw))


def _read_wide_lines(path, encoding):
    """`read_lines` of a UTF-16 or UTF-32 file (its byte order mark says which byte order); a line
    with bytes that do not decode is marked, as invalid UTF-8 is."""
    with open(path, encoding=encoding, errors="replace", newline="\n") as file:
        for number, line in enumerate(file, start=1):
            problem = f"invalid {encoding.upper()}" if "\ufffd" in line else None
            yield number, line.removesuffix("\n").removesuffix("\r"), problem


def sides_problem(source, target):
    """Returns why a pair of cleaned sides is unusable (`"blank line"`, `"empty source"`,
    `"empty target"`), or `None`."""
    if not source and not target:
        return "blank line"
    if not source:
        return "empty source"
    if not target:
        return "empty target"
    return None


def _columns_of(text, source_column, target_column):
    """Returns `((source, target), None)` from one TSV line, or `(None, reason)`."""
    if not clean_text(text):
        return None, "blank line"
    fields = text.split("\t")
    needed = max(source_column, target_column) + 1
    if len(fields) == 1:
        return None, "no tab"
    if len(fields) < needed:
        return None, f"too few columns (found {len(fields)}, need {needed})"
    source, target = clean_text(fields[source_column]), clean_text(fields[target_column])
    problem = sides_problem(source, target)
    return (None, problem) if problem else ((source, target), None)


def read_columns(path, source_column, target_column):
    """Yields a `Line` for every line of a tab-separated file, its pair taken from two columns.

    Args:
        path: str or path-like. One pair per line.
        source_column: int. 0-based column of the source sentence.
        target_column: int. 0-based column of the target sentence.

    Raises:
        FileNotFoundError: if `path` is not a file, naming it.
    """
    for number, text, problem in read_lines(path):
        pair = None
        if problem is None:
            pair, problem = _columns_of(text, source_column, target_column)
        yield Line(number, text, pair, problem)


def anki_columns(direction):
    """Returns `(source_column, target_column)` of an Anki file read in `direction`.

    Args:
        direction: str. `"to_english"` (source = the other language, column 1; target = English,
            column 0) or `"from_english"`.

    Example:

    >>> anki_columns("to_english")
    (1, 0)
    """
    if direction not in DIRECTIONS:
        raise ValueError(
            f"direction must be one of {DIRECTIONS}. Received: direction={direction!r}"
        )
    return (1, 0) if direction == "to_english" else (0, 1)


def read_anki(path, direction="to_english"):
    """Returns an iterator of a `Line` per line of an Anki file; a third column is ignored.

    Args:
        path: str or path-like, e.g. `"spa-eng/spa.txt"`.
        direction: str. `"to_english"` or `"from_english"` (see `anki_columns`).
            Defaults to `"to_english"`.

    Raises:
        ValueError: for an unknown direction (at once).
        FileNotFoundError: if `path` is not a file (when the iterator starts).

    Example:

    >>> [line.pair for line in read_anki("spa-eng/spa.txt")][:1]  # doctest: +SKIP
    [('Ve.', 'Go.')]
    """
    return read_columns(os.fspath(path), *anki_columns(direction))


def find_anki_file(directory):
    """Returns the one sentence-pair `.txt` file under `directory`, e.g. `spa-eng/spa.txt`.

    Files whose name starts with `_` (the Anki zips' `_about.txt`) are ignored.

    Args:
        directory: str or path-like. An extracted Anki zip.

    Returns:
        `pathlib.Path`.

    Example:

    >>> find_anki_file("~/.keras/datasets/spa-eng.zip")  # doctest: +SKIP
    PosixPath('.../spa-eng.zip/spa-eng/spa.txt')
    """
    root = pathlib.Path(directory)
    found = sorted(path for path in root.rglob("*.txt") if not path.name.startswith("_"))
    if len(found) != 1:
        names = [str(path.relative_to(root)) for path in found]
        raise ValueError(
            f"Expected exactly one sentence-pair .txt file (not starting with '_') under {root}, "
            f"found {len(found)}: {names}. Received: directory={str(directory)!r}"
        )
    return found[0]


def split_of(index):
    """Returns the fixed split of a 0-based line index: `"test"`, `"validation"` or `"train"`.

    Args:
        index: int. 0-based line index in the file.

    Returns:
        str. `"test"` if `index % 50 == 0`, `"validation"` if `index % 50 == 1`, else `"train"`.

    Example:

    >>> [split_of(i) for i in (0, 1, 2, 50, 51)]
    ['test', 'validation', 'train', 'test', 'validation']
    """
    remainder = index % SPLIT_PERIOD
    return "test" if remainder == 0 else "validation" if remainder == 1 else "train"
