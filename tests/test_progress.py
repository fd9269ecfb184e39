"""The progress line of `tfattn evaluate` and `tfattn translate` (tfattn/progress.py), on fake streams."""

import io

import pytest

from tfattn.progress import SentenceProgress, wanted


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal, as a real one's `isatty()` does."""

    def isatty(self):
        return True


def test_the_line_is_rewritten_in_place_and_ended_once():
    stream = FakeTerminal()
    progress = SentenceProgress(total=5, stream=stream)
    for count in (2, 2, 1):
        progress.add(count)
    progress.close()
    assert stream.getvalue() == "2/5 sentences\r4/5 sentences\r5/5 sentences\n"


def test_without_a_total_the_line_counts():
    stream = FakeTerminal()
    progress = SentenceProgress(stream=stream)
    progress.add(64)
    progress.add(3)
    progress.close()
    assert stream.getvalue() == "64 sentences\r67 sentences\n"


def test_disabled_or_unused_it_writes_nothing():
    quiet, unused = FakeTerminal(), FakeTerminal()
    progress = SentenceProgress(total=3, enabled=False, stream=quiet)
    progress.add(3)
    progress.close()
    SentenceProgress(total=3, stream=unused).close()
    assert quiet.getvalue() == "" and unused.getvalue() == ""


@pytest.mark.parametrize("quiet, asked, terminal, beside_terminal, shown", [
    (False, False, True, None, True),     # a terminal: shown
    (False, False, False, None, False),   # a file or a pipe: not shown...
    (False, True, False, None, True),     # ...unless asked for
    (True, True, True, None, False),      # --quiet wins
    (False, False, True, True, False),    # translations on the same terminal would break the line
    (False, False, True, False, True),    # translations into a file: shown
    (False, True, True, True, True),      # asked for: shown anyway
])
def test_when_it_is_shown(quiet, asked, terminal, beside_terminal, shown):
    stream = FakeTerminal() if terminal else io.StringIO()
    beside = None if beside_terminal is None else (FakeTerminal() if beside_terminal else io.StringIO())
    assert wanted(quiet, asked, stream, beside) is shown


def test_a_closed_stream_gives_no_progress_and_no_error():
    closed = io.StringIO()
    closed.close()  # its isatty() raises ValueError
    assert wanted(stream=closed) is False
