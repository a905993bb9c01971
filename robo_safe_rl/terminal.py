"""What the commands print: text made safe for a terminal, and output that survives its reader going away."""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
from collections.abc import Iterator
from typing import TextIO

from rich.console import Console

PIPE_WIDTH = 400
"""Console width when stdout is not a terminal: wide enough that lines and tables never wrap."""


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on instead of show (ESC, BEL, carriage return, bidi
    overrides, undecodable bytes as ``\\udcff``, any control or format character) written as its Python escape, so a
    name read from a file cannot move the cursor, recolour the terminal, hide what follows it or make the print fail.
    JSON output keeps names exact (JSON escapes them)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout and flush it; if the reader went away (``| head``), stdout is silenced instead."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


class QuietConsole(Console):
    """A console that, when its reader goes away, stops printing but keeps the exit code.

    rich's default exits with status 1, which for the inspector would read as "non-finite values found" and for
    diagnose as "incidents explained".
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence_stdout()


def silence_stdout() -> None:
    """Point stdout at the null device, so that nothing more written to it (nor the final flush) fails."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (``fflush(NULL)``): text that C code printed but still holds."""
    with contextlib.suppress(OSError, AttributeError):  # no C library to load (not a POSIX system): nothing to flush
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def reserved_stdout(reserve: bool = True) -> Iterator[TextIO]:
    """Keep stdout for one machine-readable document (``--json``): yields the stream to write it to.

    Inside, everything else that reaches the process's stdout, file descriptor 1, goes to stderr: C code's ``printf``
    (PyBullet prints ``b3Warning`` lines there, e.g. for a mesh's texture it cannot find; before, such a line ahead of
    ``tools/evaluate.py --json``'s document made it unreadable), the processes started inside (env workers inherit
    the descriptor) and stray Python prints. C's buffered text is flushed before the descriptor is given back, so it
    lands on stderr, where it was written. Where ``sys.stdout`` is not descriptor 1 (a test's capture, a
    ``contextlib.redirect_stdout``), the document goes to ``sys.stdout`` as it is.

    Args:
        reserve: ``False`` yields ``sys.stdout`` and changes nothing (the human-readable output).
    """
    if not reserve:
        yield sys.stdout
        return
    try:
        own = sys.stdout.fileno() == 1
    except (AttributeError, ValueError, io.UnsupportedOperation):
        own = False
    sys.stdout.flush()
    _flush_c_stdio()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed): nothing to reserve
        yield sys.stdout
        return
    os.dup2(2, 1)
    document = os.fdopen(os.dup(saved), "w", encoding=sys.stdout.encoding or "utf-8") if own else sys.stdout
    try:
        yield document
    finally:
        with contextlib.suppress(BrokenPipeError):  # the reader went away (| head): nothing more to give it
            document.flush()
        sys.stdout.flush()
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        if own:
            with contextlib.suppress(BrokenPipeError):
                document.close()
