"""A progress line on standard error for the `tfattn` commands that translate many sentences.

`evaluate` and `translate` (of stdin) count the sentences done, `312/2380 sentences` (or `312
sentences` when the total is not known ahead, as for stdin), rewritten in place with a carriage
return and ended with a line break. It is shown only where someone watches: when standard error is
a terminal, or when asked with `--progress` (a log file, CI); `--quiet` turns it off. Standard
output keeps the results alone, so `tfattn translate < in.txt > out.txt` writes only translations.
"""

import sys


def wanted(quiet=False, progress=False, stream=None, beside=None):
    """Whether to show progress on `stream` (stderr by default): never under `quiet`, always when
    `progress` asks for it, else when the stream is a terminal and the output stream `beside` (if
    given) is not one, whose lines would break into the progress line."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return False
    if progress:
        return True
    return _is_terminal(stream) and not (beside is not None and _is_terminal(beside))


def _is_terminal(stream):
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class SentenceProgress:
    """Counts translated sentences on one line of `stream`.

    Args:
        total: int or None. Sentences in all; `None` when unknown (the line then shows the count).
        enabled: bool. Whether anything is written. Defaults to `True`.
        stream: a text stream. Defaults to `sys.stderr`.

    Example:

    >>> progress = SentenceProgress(total=3, stream=sys.stdout)
    >>> progress.add(2); progress.add(1); progress.close()
    2/3 sentences\r3/3 sentences
    """

    def __init__(self, total=None, enabled=True, stream=None):
        self.total, self.enabled, self.done = total, enabled, 0
        self.stream = sys.stderr if stream is None else stream
        self._shown = False

    def add(self, count):
        """`count` more sentences are done: the line is rewritten with the new count."""
        self.done += count
        if not self.enabled:
            return
        of = "" if self.total is None else f"/{self.total}"
        self.stream.write(("\r" if self._shown else "") + f"{self.done}{of} sentences")
        self.stream.flush()
        self._shown = True

    def close(self):
        """Ends the line (nothing when nothing was shown), so that what follows starts on its own."""
        if self.enabled and self._shown:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = False
