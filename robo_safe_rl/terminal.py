"""What the commands print: text made safe for a terminal, and output that survives its reader going away."""

from __future__ import annotations

import os
import sys

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
