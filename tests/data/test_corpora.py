"""Tests for tfattn.data.anki, tfattn.data.corpora and the tfattn_anki TFDS builder, on tiny files
written in tmp_path."""

import ast
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from tfattn.data import anki, corpora, tfds_check

from conftest import SHARED_DATA as DATA  # noqa: E402
from conftest import run_main, usable_tfds  # noqa: E402
SPA = DATA / "spa-eng" / "spa.txt"
MULTI30K = DATA / "multi30k-en-de"

# Line i of the tiny Anki file is "en i<TAB>es i"; i % 50 puts lines 0, 50, 100 in test and
# 1, 51, 101 in validation.
TINY_TEST = [("es 0", "en 0"), ("es 50", "en 50"), ("es 100", "en 100")]
TINY_VALIDATION = [("es 1", "en 1"), ("es 51", "en 51"), ("es 101", "en 101")]

# (line text, reason) of each kind of bad line, as the 2nd line of a file.
BAD_LINES = [
    (b"", "blank line"),
    (b"no tab here", "no tab"),
    (b"Hi.\t  ", "empty source"),
    (b"  \tHola.", "empty target"),
    (b"\xff bad\tbytes", "invalid UTF-8 at byte 0"),
]


def write_anki(path, count=120, bad=()):
    """Writes `count` lines "en i<TAB>es i", with the 0-based indices in `bad` made blank."""
    lines = ["" if i in bad else f"en {i}\tes {i}" for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_zip(path, members):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


# --- Corpus ---------------------------------------------------------------------------------------


def test_corpus_properties_and_summary():
    corpus = corpora.Corpus([("Ve.", "Go."), ("Hola.", "Hi.")], lines_read=3, lines_skipped=1,
                            skipped=[(2, "no tab")], name="tiny.txt")
    assert corpus.sources == ["Ve.", "Hola."]
    assert corpus.targets == ["Go.", "Hi."]
    assert corpus.line_index == [0, 1]
    assert len(corpus) == 2
    assert corpus.summary() == "tiny.txt: 3 lines read, 1 skipped (no tab: line 2)"


def test_corpus_rejects_line_index_of_wrong_length():
    with pytest.raises(ValueError, match=r"Received: len\(line_index\)=1"):
        corpora.Corpus([("a", "b"), ("c", "d")], line_index=[0])


# --- the shared Anki module -----------------------------------------------------------------------


def test_read_anki_gives_every_line_with_its_pair_or_problem(tmp_path):
    path = tmp_path / "spa.txt"  # a BOM, CRLF, no tab, bad UTF-8, then a no-break space (UTF-8 C2 A0)
    path.write_bytes(b"\xef\xbb\xbfGo.\tVe.\r\nno tab\n\xff\tbad\nHi.\tHola.\xc2\xa0\tCC-BY\n")
    assert list(anki.read_anki(path)) == [
        anki.Line(1, "Go.\tVe.", ("Ve.", "Go."), None),  # BOM and CRLF gone
        anki.Line(2, "no tab", None, "no tab"),
        anki.Line(3, "\\xff\tbad", None, "invalid UTF-8 at byte 0"),
        anki.Line(4, "Hi.\tHola.\u00a0\tCC-BY", ("Hola.", "Hi."), None),  # cleaned; 3rd column ignored
    ]
    assert [line.index for line in anki.read_anki(path, "from_english")] == [0, 1, 2, 3]
    assert next(iter(anki.read_anki(path, "from_english"))).pair == ("Go.", "Ve.")


def test_read_anki_refuses_an_unknown_direction_at_once(tmp_path):
    with pytest.raises(ValueError, match=r"Received: direction='sideways'"):
        anki.read_anki(tmp_path / "missing.txt", "sideways")  # before the file is looked at


def _imports(path):
    """The tfattn.data modules a file imports anywhere in it (at the top or inside a function)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "tfattn.data":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfattn.data."):
            names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[2] for a in node.names if a.name.startswith("tfattn.data.")}
    return names


def test_anki_module_is_shared_and_the_loaders_import_no_cycle():
    # anki and tfds_check import no other tfattn.data module; corpora (load_tfds registers the
    # builder) and the TFDS builder both import anki and tfds_check, and the builder does not import corpora.
    data = Path(anki.__file__).parent
    names = ("anki", "corpora", "tfds_anki", "tfds_check")
    graph = {name: _imports(data / f"{name}.py") for name in names}
    assert graph == {"anki": set(), "corpora": {"anki", "tfds_anki", "tfds_check"},
                     "tfds_anki": {"anki", "tfds_check"}, "tfds_check": set()}


# --- load_anki and the fixed split ----------------------------------------------------------------


def test_load_anki_120_lines_and_fixed_split(tmp_path):
    corpus = corpora.load_anki(write_anki(tmp_path / "spa.txt"))
    assert (corpus.lines_read, corpus.lines_skipped, len(corpus)) == (120, 0, 120)
    assert corpus.pairs[0] == ("es 0", "en 0")
    assert corpus.summary() == "spa.txt: 120 lines read, 0 skipped"
    parts = corpora.split_pairs(corpus)
    assert parts["test"] == TINY_TEST
    assert parts["validation"] == TINY_VALIDATION
    assert len(parts["train"]) == 114
    assert parts["train"][:2] == [("es 2", "en 2"), ("es 3", "en 3")]


def test_split_uses_line_index_in_file_when_lines_are_skipped(tmp_path):
    # Line indices 5 and 50 are blank: index 50 leaves test, but 100 stays in test.
    corpus = corpora.load_anki(write_anki(tmp_path / "spa.txt", bad={5, 50}))
    assert corpus.lines_skipped == 2
    parts = corpora.split_pairs(corpus)
    assert parts["test"] == [("es 0", "en 0"), ("es 100", "en 100")]
    assert parts["validation"] == TINY_VALIDATION
    assert len(parts["train"]) == 113


def test_split_pairs_of_plain_list_uses_position():
    parts = corpora.split_pairs([(str(i), str(i)) for i in range(52)])
    assert parts["test"] == [("0", "0"), ("50", "50")]
    assert parts["validation"] == [("1", "1"), ("51", "51")]
    assert len(parts["train"]) == 48


@pytest.mark.parametrize(
    "direction, first", [("to_english", ("Ve.", "Go.")), ("from_english", ("Go.", "Ve."))]
)
def test_load_anki_direction_and_attribution_ignored(tmp_path, direction, first):
    path = tmp_path / "spa.txt"
    path.write_text("Go.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n",
                    encoding="utf-8")
    assert corpora.load_anki(path, direction=direction).pairs == [first]


def test_load_anki_unknown_direction(tmp_path):
    with pytest.raises(ValueError, match=r"Received: direction='sideways'"):
        corpora.load_anki(write_anki(tmp_path / "spa.txt"), direction="sideways")


# --- bad lines, strict mode -----------------------------------------------------------------------


def test_bad_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "bad.txt"
    lines = [b"Go.\tVe.", *(line for line, _ in BAD_LINES), b"Run!\tCorre!"]
    path.write_bytes(b"\n".join(lines) + b"\n")
    corpus = corpora.load_anki(path)
    assert corpus.pairs == [("Ve.", "Go."), ("Corre!", "Run!")]
    assert corpus.line_index == [0, 6]
    assert (corpus.lines_read, corpus.lines_skipped) == (7, 5)
    assert corpus.skipped == [(n, reason) for n, (_, reason) in enumerate(BAD_LINES, start=2)]
    assert corpus.summary() == (
        "bad.txt: 7 lines read, 5 skipped (blank line: line 2; no tab: line 3; "
        "empty source: line 4; empty target: line 5; invalid UTF-8: line 6)"
    )


@pytest.mark.parametrize("line, reason", BAD_LINES)
def test_strict_names_file_line_and_problem(tmp_path, line, reason):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"Go.\tVe.\n" + line + b"\nRun!\tCorre!\n")
    with pytest.raises(ValueError) as info:
        corpora.load_anki(path, strict=True)
    message = str(info.value)
    assert f"{path}, line 2: {reason}." in message
    assert "Pass strict=False (drop --strict) to skip and count bad lines." in message
    assert "Received: line=" in message


def test_only_first_20_skipped_lines_are_kept(tmp_path):
    corpus = corpora.load_anki(write_anki(tmp_path / "spa.txt", count=26, bad=set(range(1, 26))))
    assert (len(corpus), corpus.lines_skipped, len(corpus.skipped)) == (1, 25, 20)
    assert corpus.skipped[-1] == (21, "blank line")
    assert corpus.summary() == "spa.txt: 26 lines read, 25 skipped (blank line: 25 lines (2, 3, 4, ...))"


def test_summary_counts_each_kind_of_reason_once(tmp_path):
    # 1,000 lines: every line i % 3 == 1 invalid UTF-8 at a byte that varies, i % 3 == 2 without a tab.
    lines = [b"\xff" * (i % 7) + b"\xfe\tx" if i % 3 == 1 else b"no tab" if i % 3 == 2 else b"a\tb"
             for i in range(1000)]
    (tmp_path / "mixed.txt").write_bytes(b"\n".join(lines) + b"\n")
    summary = corpora.load_anki(tmp_path / "mixed.txt").summary()
    assert summary == ("mixed.txt: 1000 lines read, 666 skipped (invalid UTF-8: 333 lines (2, 5, 8, ...); "
                       "no tab: 333 lines (3, 6, 9, ...))")


# --- encodings, text cleaning, BOM, CRLF ----------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_file_with_a_utf16_or_utf32_byte_order_mark_is_decoded(tmp_path, encoding):
    text = "Go.\tVe.\n¿Qué?\t¿Qué tal?\r\nno tab\n"
    bom = {"utf-16": b"", "utf-16-be": b"\xfe\xff", "utf-32": b""}[encoding]  # Python's utf-16/32 write one
    (tmp_path / "wide.txt").write_bytes(bom + text.encode(encoding))
    (tmp_path / "narrow.txt").write_text(text, encoding="utf-8", newline="")
    wide, narrow = corpora.load_anki(tmp_path / "wide.txt"), corpora.load_anki(tmp_path / "narrow.txt")
    assert wide.pairs == narrow.pairs == [("Ve.", "Go."), ("¿Qué tal?", "¿Qué?")]
    assert wide.skipped == [(3, "no tab")]


@pytest.mark.parametrize("encoding, message", [
    ("utf-16-le", r"looks like UTF-16LE text without a byte order mark \(\d+ NUL bytes in its first \d+\); "
                  r"save it as UTF-8 \(e\.g\. iconv -f UTF-16LE -t UTF-8 wide\.txt > utf8-wide\.txt\)"),
    ("utf-16-be", r"looks like UTF-16BE text without a byte order mark"),
    ("utf-32-le", r"is not UTF-8 text \(\d+ NUL bytes in its first \d+: UTF-32 without a byte order mark, or binary\)"),
])
def test_nul_rich_text_without_a_byte_order_mark_is_refused(tmp_path, encoding, message):
    (tmp_path / "wide.txt").write_bytes("Go.\tVe.\nRun!\tCorre!\n".encode(encoding))
    with pytest.raises(ValueError, match=message):
        corpora.load_anki(tmp_path / "wide.txt")


def test_a_few_nul_bytes_leave_a_file_utf8_judged_line_by_line(tmp_path):
    (tmp_path / "short.txt").write_bytes(b"Go.\tVe.\na\x00\tb\n")  # one NUL in 15 bytes: not UTF-16
    corpus = corpora.load_anki(tmp_path / "short.txt")
    assert corpus.pairs[0] == ("Ve.", "Go.") and len(corpus.pairs) + len(corpus.skipped) == 2


def test_a_utf16_line_that_does_not_decode_is_skipped_not_the_file(tmp_path):
    good = "Go.\tVe.\n".encode("utf-16-le")
    lone_surrogate = b"\x00\xd8" + "x\ty\n".encode("utf-16-le")  # a high surrogate with no low one
    (tmp_path / "wide.txt").write_bytes(b"\xff\xfe" + good + lone_surrogate + good)
    corpus = corpora.load_anki(tmp_path / "wide.txt")
    assert corpus.pairs == [("Ve.", "Go."), ("Ve.", "Go.")]
    assert corpus.skipped == [(2, "invalid UTF-16")]


def test_a_directory_given_as_a_corpus_file_says_so(tmp_path):
    write_anki(tmp_path / "spa.txt")
    (tmp_path / "_about.txt").write_text("about")
    with pytest.raises(IsADirectoryError, match=r"is a directory; pass the sentence-pair file in it \(it holds "
                                                r"spa\.txt\), or, for aligned SPLIT\.LANG files, --format parallel"):
        corpora.load_anki(tmp_path)


# --- text cleaning, BOM, CRLF ---------------------------------------------------------------------


def test_no_break_spaces_become_spaces_and_ends_are_stripped(tmp_path):
    path = tmp_path / "nbsp.txt"
    text = "Hello\u00a0!\t ¿Qué\u202ftal\u2007?\u00a0\n\u00a0\tHola.\n"
    path.write_text(text, encoding="utf-8")
    corpus = corpora.load_anki(path)
    assert corpus.pairs == [("¿Qué tal ?", "Hello !")]
    assert corpus.skipped == [(2, "empty target")]


def test_bom_and_crlf(tmp_path):
    path = tmp_path / "windows.txt"
    path.write_bytes(b"\xef\xbb\xbfGo.\tVe.\r\nHi.\tHola.\r\n")
    corpus = corpora.load_anki(path)
    assert corpus.pairs == [("Ve.", "Go."), ("Hola.", "Hi.")]
    assert (corpus.lines_read, corpus.lines_skipped) == (2, 0)


def test_last_line_without_newline(tmp_path):
    path = tmp_path / "open.txt"
    path.write_bytes(b"Go.\tVe.\nHi.\tHola.")
    assert corpora.load_anki(path).pairs == [("Ve.", "Go."), ("Hola.", "Hi.")]


# --- load_tsv -------------------------------------------------------------------------------------


def test_load_tsv_chosen_columns(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("1\tGo.\tVe.\n2\tHi.\n3\tRun!\tCorre!\n", encoding="utf-8")
    corpus = corpora.load_tsv(path, source_column=2, target_column=1)
    assert corpus.pairs == [("Ve.", "Go."), ("Corre!", "Run!")]
    assert corpus.line_index == [0, 2]
    assert corpus.skipped == [(2, "too few columns (found 2, need 3)")]


@pytest.mark.parametrize("columns", [(0, 0), (-1, 1), (0, "1")])
def test_load_tsv_rejects_bad_columns(tmp_path, columns):
    with pytest.raises(ValueError, match="Received:"):
        corpora.load_tsv(write_anki(tmp_path / "x.tsv"), *columns)


# --- load_parallel --------------------------------------------------------------------------------


def test_load_parallel(tmp_path):
    (tmp_path / "train.de").write_text("Ein Hund.\nZwei Katzen.\n\u00a0\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("A dog.\nTwo cats.\nThree birds.\n", encoding="utf-8")
    corpus = corpora.load_parallel(tmp_path / "train.de", tmp_path / "train.en")
    assert corpus.pairs == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    assert corpus.skipped == [(3, "empty source")]
    assert corpus.summary() == "train.de + train.en: 3 lines read, 1 skipped (empty source: line 3)"
    with pytest.raises(ValueError, match=r"train\.de \+ .*train\.en, line 3: empty source"):
        corpora.load_parallel(tmp_path / "train.de", tmp_path / "train.en", strict=True)


def test_load_parallel_invalid_utf8_in_target(tmp_path):
    (tmp_path / "a.de").write_bytes(b"Hund\nKatze\n")
    (tmp_path / "a.en").write_bytes(b"dog\nc\xe4t\n")
    corpus = corpora.load_parallel(tmp_path / "a.de", tmp_path / "a.en")
    assert corpus.pairs == [("Hund", "dog")]
    assert corpus.skipped == [(2, "target has invalid UTF-8 at byte 1")]


def test_load_parallel_line_count_mismatch(tmp_path):
    source, target = tmp_path / "val.de", tmp_path / "val.en"
    source.write_text("a\nb\nc\n", encoding="utf-8")
    target.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        corpora.load_parallel(source, target)
    message = str(info.value)
    assert f"3 lines in {source} but 2 lines in {target}" in message


# --- load_corpus dispatch -------------------------------------------------------------------------


def test_load_corpus_anki_and_tsv_by_format(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Go.\tVe.\n", encoding="utf-8")
    assert corpora.load_corpus(path).pairs == [("Ve.", "Go.")]
    assert corpora.load_corpus(str(path), direction="from_english").pairs == [("Go.", "Ve.")]
    assert corpora.load_corpus(path, format="tsv").pairs == [("Go.", "Ve.")]
    assert corpora.load_corpus(path, format="tsv", source_column=1, target_column=0).pairs == [
        ("Ve.", "Go.")
    ]


def test_load_corpus_strict_is_passed_on(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("Go.\tVe.\nno tab\n", encoding="utf-8")
    assert corpora.load_corpus(path).lines_skipped == 1
    with pytest.raises(ValueError, match="line 2: no tab"):
        corpora.load_corpus(path, strict=True)


def test_load_corpus_parallel_prefix(tmp_path):
    (tmp_path / "train.de").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("A dog.\n", encoding="utf-8")
    corpus = corpora.load_corpus(tmp_path / "train", format="parallel",
                                 source_lang="de", target_lang="en")
    assert corpus.pairs == [("Ein Hund.", "A dog.")]
    with pytest.raises(ValueError) as info:
        corpora.load_corpus(tmp_path / "train", format="parallel", target_lang="en")
    assert str(info.value) == (
        "format='parallel' (--format parallel) needs source_lang= and target_lang= (--source-lang, "
        "--target-lang), e.g. 'de' and 'en' for PREFIX.de and PREFIX.en. "
        "Received: source_lang=None, target_lang='en'"
    )


def test_load_corpus_unknown_format_names_it_and_the_choices(tmp_path):
    with pytest.raises(ValueError) as info:
        corpora.load_corpus(write_anki(tmp_path / "spa.txt"), format="csv")
    assert "('anki', 'tsv', 'parallel')" in str(info.value)
    assert "Received: format='csv'" in str(info.value)


def test_load_corpus_cannot_guess_format(tmp_path):
    with pytest.raises(ValueError, match=r"pass format= \(--format\) one of .*Received: spec="):
        corpora.load_corpus(tmp_path / "train.en")


def test_load_corpus_local_zip_says_to_unpack_it(tmp_path):
    archive = write_zip(tmp_path / "spa-eng.zip", {"spa-eng/spa.txt": "Go.\tVe.\n"})
    for format in (None, "anki", "tsv"):
        with pytest.raises(ValueError) as info:
            corpora.load_corpus(archive, format=format)
        assert str(info.value) == (
            f"{archive} is a zip archive: unpack it and pass the .txt file inside (e.g. "
            f"spa-eng/spa.txt), or pass its file:// URL ({archive.as_uri()}) to have it extracted "
            f"into the Keras cache. Received: spec={str(archive)!r}"
        )
    with pytest.raises(FileNotFoundError, match=r"No such corpus file: .*missing\.zip"):
        corpora.load_corpus(tmp_path / "missing.zip")
    # The URL the message gives works:
    corpus = corpora.load_corpus(archive.as_uri(), cache_dir=str(tmp_path / "cache"))
    assert corpus.pairs == [("Ve.", "Go.")]


@pytest.mark.parametrize("format, name", [(None, "missing.txt"), ("tsv", "missing.tsv"),
                                          ("parallel", "missing")])
def test_load_corpus_missing_file_names_the_path(tmp_path, format, name):
    kw = {"source_lang": "de", "target_lang": "en"} if format == "parallel" else {}
    with pytest.raises(FileNotFoundError, match=str(tmp_path / name)):
        corpora.load_corpus(tmp_path / name, format=format, **kw)


# --- download_anki, offline through a file:// URL -------------------------------------------------


def test_download_anki_from_file_url_extracts_and_caches(tmp_path, capsys):
    archive = write_zip(tmp_path / "spa-eng.zip", {
        "spa-eng/spa.txt": "Go.\tVe.\nHi.\tHola.\n",
        "spa-eng/_about.txt": "About this file.\n",
    })
    cache = tmp_path / "cache"
    path = corpora.download_anki(archive.as_uri(), cache_dir=str(cache))
    assert Path(path) == cache / "datasets" / "spa-eng.zip" / "spa-eng" / "spa.txt"
    assert corpora.load_anki(path).pairs == [("Ve.", "Go."), ("Hola.", "Hi.")]
    captured = capsys.readouterr()
    assert "Downloading data from file://" in captured.err and captured.out == ""  # stdout is for results
    archive.unlink()  # The second call must be served from the cache.
    assert corpora.download_anki(archive.as_uri(), cache_dir=str(cache)) == path
    assert "Downloading" not in capsys.readouterr().err


def test_load_corpus_url(tmp_path):
    archive = write_zip(tmp_path / "fra-eng.zip", {"fra.txt": "Go.\tVa !\n"})
    corpus = corpora.load_corpus(archive.as_uri(), cache_dir=str(tmp_path / "cache"))
    assert corpus.pairs == [("Va !", "Go.")]


def test_download_anki_missing_file_url_names_it(tmp_path):
    url = (tmp_path / "missing.zip").as_uri()
    with pytest.raises(OSError) as info:
        corpora.load_corpus(url, cache_dir=str(tmp_path / "cache"))
    assert str(info.value) == (
        f"Cannot download the corpus from {url}: [Errno 2] No such file or directory: "
        f"{str(tmp_path / 'missing.zip')!r}. Received: url={url!r}"
    )


def test_download_anki_http_error_names_the_url_and_status(tmp_path):
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # on this machine only
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/spa-eng.zip"
    try:
        with pytest.raises(OSError) as info:
            corpora.download_anki(url, cache_dir=str(tmp_path / "cache"))
    finally:
        server.shutdown()
        server.server_close()
    assert str(info.value) == (
        f"Cannot download the corpus from {url}: HTTP Error 404: File not found. "
        f"Received: url={url!r}"
    )


def test_download_anki_of_a_file_that_is_not_a_zip(tmp_path, recwarn):
    path = write_anki(tmp_path / "spa.txt")
    with pytest.raises(ValueError, match=r"spa\.txt is not a zip archive; a URL corpus must be"):
        corpora.download_anki(path.as_uri(), cache_dir=str(tmp_path / "cache"))
    assert not [w for w in recwarn if "Could not extract" in str(w.message)]  # the error says it


@pytest.mark.parametrize("members", [None, {"a.txt": "Go.\tVe.\n", "b.txt": "Hi.\tHola.\n"}])
def test_a_refused_download_leaves_nothing_in_the_cache(tmp_path, members):
    """Not a zip (a text file), or a zip without one sentence-pair file: no `*_archive` file, no folder."""
    source = write_zip(tmp_path / "two.zip", members) if members else write_anki(tmp_path / "spa.txt")
    cache = tmp_path / "cache"
    with pytest.raises(ValueError):
        corpora.download_anki(source.as_uri(), cache_dir=str(cache))
    assert list((cache / "datasets").iterdir()) == []


def test_a_file_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(ValueError, match=r"pipe\.txt is a pipe \(such as <\(command\)\); a corpus is read more"):
        corpora.load_corpus(str(tmp_path / "pipe.txt"))
    os.symlink(tmp_path / "b.txt", tmp_path / "a.txt")
    os.symlink(tmp_path / "a.txt", tmp_path / "b.txt")
    with pytest.raises(FileNotFoundError, match=r"a\.txt is a symbolic link loop"):
        corpora.load_corpus(str(tmp_path / "a.txt"))
    os.symlink(tmp_path / "gone.txt", tmp_path / "dangling.txt")
    with pytest.raises(FileNotFoundError, match=r"dangling\.txt is a symbolic link to .*gone\.txt, which does not"):
        corpora.load_corpus(str(tmp_path / "dangling.txt"))


@pytest.mark.parametrize("name,format", [("spa.txt.gz", None), ("spa.txt", None), ("spa.gz", "anki"),
                                         ("spa.tsv", "tsv")])
def test_a_gzip_corpus_is_named_as_gzip(tmp_path, name, format):
    import gzip

    path = tmp_path / name
    path.write_bytes(gzip.compress(write_anki(tmp_path / "plain.txt").read_bytes()))
    with pytest.raises(ValueError, match=rf"{name} is gzip-compressed; .* \(gunzip -k "):
        corpora.load_corpus(str(path), format=format)


def test_download_anki_needs_exactly_one_txt(tmp_path):
    archive = write_zip(tmp_path / "two.zip", {"a.txt": "Go.\tVe.\n", "b.txt": "Hi.\tHola.\n"})
    with pytest.raises(ValueError, match=r"found 2: \['a.txt', 'b.txt'\]"):
        corpora.download_anki(archive.as_uri(), cache_dir=str(tmp_path / "cache"))


# --- TFDS builder and load_tfds -------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def tfds_temp_dirs_kept_in_tmp_path(tmp_path_factory):
    """TFDS makes an empty `tmp*tfds` folder in the system's temp dir for each builder of a dataset
    not yet prepared (`DatasetInfo.initialize_from_bucket`) and leaves it there. Here they go to
    pytest's tmp_path instead of piling up in /tmp."""
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp_path_factory.mktemp("tfds_temp"))
    yield
    tempfile.tempdir = saved


@pytest.fixture(scope="module")
def tfds_spa(tmp_path_factory):
    """Prepares tfattn_anki/spa from a 120-line manual_dir file: (tfds, builder, data_dir)."""
    tfds = usable_tfds()
    from tfattn.data import tfds_anki  # noqa: F401  (registers tfattn_anki)

    root = tmp_path_factory.mktemp("tfds")
    (root / "manual").mkdir()
    write_anki(root / "manual" / "spa.txt", bad={7})
    data_dir = str(root / "data")
    builder = tfds.builder("tfattn_anki/spa", data_dir=data_dir)
    builder.download_and_prepare(
        download_dir=str(root / "downloads"),
        download_config=tfds.download.DownloadConfig(manual_dir=str(root / "manual")),
    )
    return tfds, builder, data_dir


def _decoded(tfds, dataset):
    return sorted((source.decode(), target.decode()) for source, target in tfds.as_numpy(dataset))


def test_tfds_builder_splits_from_manual_dir(tfds_spa):
    tfds, builder, _ = tfds_spa
    sizes = {name: split.num_examples for name, split in builder.info.splits.items()}
    assert sizes == {"train": 113, "validation": 3, "test": 3}  # line index 7 is blank
    assert builder.info.supervised_keys == ("source", "target")
    test = builder.as_dataset(split="test", as_supervised=True)
    assert _decoded(tfds, test) == sorted(TINY_TEST)


def test_tfds_load_after_import(tfds_spa):
    tfds, _, data_dir = tfds_spa
    dataset = tfds.load("tfattn_anki/spa", split="validation", data_dir=data_dir, download=False)
    example = next(iter(tfds.as_numpy(dataset)))
    assert set(example) == {"source", "target"}
    assert sorted(_decoded(tfds, dataset.map(lambda x: (x["source"], x["target"])))) == sorted(
        TINY_VALIDATION
    )


def test_load_tfds_and_load_corpus_tfds_spec(tfds_spa):
    _, _, data_dir = tfds_spa
    corpus = corpora.load_tfds("tfattn_anki/spa", split="test", data_dir=data_dir)
    assert sorted(corpus.pairs) == sorted(TINY_TEST)
    assert corpus.summary() == "tfds:tfattn_anki/spa[test]: 3 lines read, 0 skipped"
    corpus = corpora.load_corpus("tfds:tfattn_anki/spa", split="validation", data_dir=data_dir,
                                 source_key="target", target_key="source")
    assert sorted(corpus.pairs) == sorted((target, source) for source, target in TINY_VALIDATION)


@pytest.mark.long  # a TensorFlow process of its own (5-25 s): make test-long
def test_load_tfds_registers_tfattn_anki_itself(tmp_path):
    # A fresh process where nothing imported tfattn.data.tfds_anki (`tfattn train --corpus
    # tfds:tfattn_anki/spa`) prepares the dataset from TFDS's default manual_dir, DATA_DIR/downloads/manual.
    usable_tfds()
    (tmp_path / "downloads" / "manual").mkdir(parents=True)
    write_anki(tmp_path / "downloads" / "manual" / "spa.txt")
    code = ("from tfattn.data import corpora; "
            f"print(corpora.load_tfds('tfattn_anki/spa', split='test', data_dir={str(tmp_path)!r}).summary())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "tfds:tfattn_anki/spa[test]: 3 lines read, 0 skipped"


def test_load_tfds_key_errors(tfds_spa):
    _, _, data_dir = tfds_spa
    with pytest.raises(ValueError, match=r"Received: source_key='source', target_key=None"):
        corpora.load_tfds("tfattn_anki/spa", split="test", data_dir=data_dir, source_key="source")
    with pytest.raises(ValueError, match=r"\['source', 'target'\]\. Received: source_key='en'"):
        corpora.load_tfds("tfattn_anki/spa", split="test", data_dir=data_dir,
                          source_key="en", target_key="target")


@pytest.mark.parametrize("name, hint", [
    ("nonexistent", "See https://www.tensorflow.org/datasets/catalog/overview."),
    ("ted_hrlr_translat/pt_to_en", "Did you mean: ted_hrlr_translat -> ted_hrlr_translate ?"),
])
def test_load_tfds_unknown_dataset_is_one_short_line(tmp_path, name, hint):
    # TFDS's own message lists every dataset it knows (hundreds of lines).
    usable_tfds()
    with pytest.raises(ValueError) as info:
        corpora.load_corpus(f"tfds:{name}", split="test", data_dir=str(tmp_path))
    dataset = name.split("/")[0]
    assert str(info.value) == f"TFDS has no dataset {dataset!r}. {hint} Received: name={name!r}"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_tfds_whose_core_does_not_import_is_refused_with_the_reason(monkeypatch, tmp_path):
    # Colab's image of August 2026: `import tensorflow_datasets` logs that its core failed and goes
    # on, and `tfds.core` raised AttributeError later, far from the cause. Here the core's import
    # fails the same way: TFDS itself imports, its `core` does not.
    pytest.importorskip("tensorflow_datasets")
    monkeypatch.setitem(sys.modules, "tensorflow_datasets.core", None)
    expected = ("tensorflow-datasets is installed but does not import: "
                "import of tensorflow_datasets.core halted; None in sys.modules.")
    with pytest.raises(ImportError) as info:
        corpora.load_corpus("tfds:ted_hrlr_translate/pt_to_en", data_dir=str(tmp_path))
    assert str(info.value) == expected
    assert list(tmp_path.iterdir()) == []  # refused before TFDS made anything


def test_the_protobuf_mismatch_of_colab_is_named_with_its_mend():
    # The error protobuf 5.29.6 raised in Colab's image for tensorflow-metadata 1.21.0, word for word.
    from google.protobuf.runtime_version import VersionError

    error = VersionError(
        "Detected incompatible Protobuf Gencode/Runtime versions when loading "
        "tensorflow_metadata/proto/v0/anomalies.proto: gencode 6.31.1 runtime 5.29.6. Runtime version "
        "cannot be older than the linked gencode version. See Protobuf version guarantees at "
        "https://protobuf.dev/support/cross-version-runtime-guarantee.")
    assert tfds_check.unusable_message(error) == (
        "tensorflow-datasets is installed but does not import: Detected incompatible Protobuf "
        "Gencode/Runtime versions when loading tensorflow_metadata/proto/v0/anomalies.proto: gencode "
        "6.31.1 runtime 5.29.6. Runtime version cannot be older than the linked gencode version. See "
        "Protobuf version guarantees at https://protobuf.dev/support/cross-version-runtime-guarantee. "
        "Installing tfattn changes none of a runtime's packages; here tensorflow-metadata is newer than "
        "protobuf allows (Colab's image of August 2026 has this pair): "
        "`pip install 'tensorflow-metadata<1.18'` and a restart of the runtime mend it.")
    # Another failure gets its cause and no protobuf advice.
    assert tfds_check.unusable_message(OSError("libarrow.so: cannot open")) == (
        "tensorflow-datasets is installed but does not import: libarrow.so: cannot open.")


def test_the_command_line_refuses_a_tfds_that_does_not_import_in_one_line(monkeypatch, capsys, tmp_path):
    pytest.importorskip("tensorflow_datasets")
    monkeypatch.setitem(sys.modules, "tensorflow_datasets.core", None)
    status, _, err = run_main(capsys, "train", "--corpus", "tfds:ted_hrlr_translate/pt_to_en",
                              "--out", str(tmp_path / "run"))
    assert status == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "tfattn: error: tensorflow-datasets is installed but does not import: "
        "import of tensorflow_datasets.core halted; None in sys.modules.")
    assert not (tmp_path / "run").exists()


def test_load_tfds_without_a_name():
    with pytest.raises(ValueError, match=r"needs a dataset name.*Received: name=''"):
        corpora.load_corpus("tfds:")


def test_tfds_builder_config_with_local_path(tfds_spa, tmp_path):
    tfds, _, _ = tfds_spa
    from tfattn.data.tfds_anki import AnkiConfig

    path = tmp_path / "deu.txt"
    path.write_text("Go.\tGeh.\nHi.\tHallo!\nRun!\tLauf!\n", encoding="utf-8")
    config = AnkiConfig(name="deu", language="deu", path=str(path), direction="from_english")
    builder = tfds.builder("tfattn_anki", config=config, data_dir=str(tmp_path / "data"))
    builder.download_and_prepare(download_dir=str(tmp_path / "downloads"))
    assert _decoded(tfds, builder.as_dataset(split="test", as_supervised=True)) == [("Go.", "Geh.")]
    assert _decoded(tfds, builder.as_dataset(split="validation", as_supervised=True)) == [
        ("Hi.", "Hallo!")
    ]
    assert _decoded(tfds, builder.as_dataset(split="train", as_supervised=True)) == [
        ("Run!", "Lauf!")
    ]


def test_tfds_builder_downloads_and_extracts_url(tfds_spa, tmp_path):
    tfds, _, _ = tfds_spa
    from tfattn.data.tfds_anki import AnkiConfig

    archive = write_zip(tmp_path / "ita-eng.zip", {
        "ita.txt": "Go.\tVai.\nHi.\tCiao.\n", "_about.txt": "About.\n",
    })
    config = AnkiConfig(name="ita", language="ita", url=archive.as_uri())
    builder = tfds.builder("tfattn_anki", config=config, data_dir=str(tmp_path / "data"))
    builder.download_and_prepare(download_dir=str(tmp_path / "downloads"))
    assert set(builder.info.splits) == {"test", "validation"}  # Two lines leave train empty.
    assert _decoded(tfds, builder.as_dataset(split="test", as_supervised=True)) == [("Vai.", "Go.")]


def test_tfds_builder_without_any_source(tfds_spa, tmp_path):
    tfds, _, _ = tfds_spa
    from tfattn.data.tfds_anki import AnkiConfig

    builder = tfds.builder("tfattn_anki", config=AnkiConfig(name="nld", language="nld"),
                           data_dir=str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"put nld\.txt in DownloadConfig\(manual_dir=\.\.\.\)"):
        builder.download_and_prepare(download_dir=str(tmp_path / "downloads"))


def test_tfds_builder_rejects_a_file_without_pairs(tfds_spa, tmp_path):
    tfds, _, _ = tfds_spa
    from tfattn.data.tfds_anki import AnkiConfig

    path = tmp_path / "empty.txt"
    path.write_text("\nno tab\n", encoding="utf-8")
    config = AnkiConfig(name="empty", language="xx", path=str(path))
    builder = tfds.builder("tfattn_anki", config=config, data_dir=str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"No sentence pairs in .*empty\.txt: 2 lines read, 2 skipped; "
                                         r"line 1: blank line; line 2: no tab\. Received: path="):
        builder.download_and_prepare(download_dir=str(tmp_path / "downloads"))


# --- the real corpora in ../shared/data -----------------------------------------------------------


@pytest.mark.data
@pytest.mark.skipif(not SPA.is_file(), reason=f"real corpus not found: {SPA}")
def test_real_spa_eng():
    corpus = corpora.load_corpus(SPA)
    assert (corpus.lines_read, corpus.lines_skipped) == (118_964, 0)
    assert corpus.pairs[0] == ("Ve.", "Go.")
    assert corpus.summary() == "spa.txt: 118964 lines read, 0 skipped"
    # Line 117,600 is the file's one line with a U+00A0 (after "las").
    assert corpus.pairs[117_599][0] == (
        "En vez de comer verduras, él las  pone en la licuadora y se las bebe."
    )
    assert not any("\u00a0" in source for source in corpus.sources)
    # Indices 0..118,963 with 118,963 = 50 * 2,379 + 13: remainders 0 and 1 both occur 2,380 times.
    parts = corpora.split_pairs(corpus)
    sizes = tuple(len(parts[name]) for name in ("test", "validation", "train"))
    assert sizes == (2_380, 2_380, 114_204)


@pytest.mark.data
@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"real corpus not found: {MULTI30K}")
def test_real_multi30k_train():
    corpus = corpora.load_corpus(MULTI30K / "train", format="parallel",
                                 source_lang="de", target_lang="en")
    assert (len(corpus), corpus.lines_read, corpus.lines_skipped) == (29_000, 29_000, 0)
    assert corpus.pairs[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )


@pytest.mark.long  # all of spa-eng through TFDS's builder (10-15 s): make test-long
@pytest.mark.data
@pytest.mark.skipif(not SPA.is_file(), reason=f"real corpus not found: {SPA}")
def test_real_spa_eng_tfds_builder_matches_split_pairs(tmp_path):
    tfds = usable_tfds()
    from tfattn.data import tfds_anki  # noqa: F401  (registers tfattn_anki)

    builder = tfds.builder("tfattn_anki/spa", data_dir=str(tmp_path / "data"))
    builder.download_and_prepare(
        download_dir=str(tmp_path / "downloads"),
        download_config=tfds.download.DownloadConfig(manual_dir=str(SPA.parent)),
    )
    sizes = {name: split.num_examples for name, split in builder.info.splits.items()}
    assert sizes == {"train": 114_204, "validation": 2_380, "test": 2_380}
    test = builder.as_dataset(split="test", as_supervised=True)
    assert _decoded(tfds, test) == sorted(corpora.split_pairs(corpora.load_anki(SPA))["test"])
