"""Progress bars for the long commands (play, diagnose, the benchmarks), drawn on a terminal only.

A bar goes to stderr, drawn by rich, when stderr is an interactive terminal, and nowhere otherwise: a pipe or a file
receives no bar and no control code, only the command's own output. rich alone would also draw into a pipe when
``FORCE_COLOR`` or ``TTY_COMPATIBLE`` is set (CI systems set them for coloured logs), so stderr must be a tty as well.

The commands' ``main()`` asks for bars (``progress=True`` down to the loops); the library functions draw none unless
asked. A bar opened while another is shown joins it as one more line of the same display (rich shows one live
display at a time), so a loop inside a loop shows both.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_shown: Any = None  # the rich Progress on screen, shared by nested bars
_users = 0


class Bar:
    """What a loop tells its bar: ``advance()`` after each unit of work, ``describe()`` to change its text. A bar
    that is not drawn (not a terminal, or not asked for) does nothing."""

    def __init__(self, progress: Any = None, task: Any = None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: float = 1) -> None:
        """Count ``amount`` more units done."""
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def describe(self, text: str) -> None:
        """Replace the bar's text (shown at once: a new text says a new stage has begun)."""
        if self._progress is not None:
            self._progress.update(self._task, description=text, refresh=True)


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stderr by default) is an interactive terminal a bar may be drawn on."""
    from rich.console import Console

    stream = sys.stderr if stream is None else stream
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    console = Console(file=stream)
    return console.is_terminal and not console.is_dumb_terminal


@contextmanager
def progress_bar(description: str, total: float | None = None, *, enabled: bool = True) -> Iterator[Bar]:
    """A bar for the ``with`` block: drawn on stderr when ``enabled`` and stderr is a terminal, removed at its end.

    Args:
        description: What the loop does (``play: 16 episodes``).
        total: Units of work; ``None`` when unknown (the bar then shows the time elapsed only).
        enabled: ``False`` draws nothing (the command's ``main()`` decides; library callers get no bar).
    """
    global _shown, _users
    if not (enabled and on_terminal()):
        yield Bar()
        return
    with _lock:
        if _shown is None:
            _shown = _new_display()
            _shown.start()
        _users += 1
        progress = _shown
    task = progress.add_task(description, total=total)
    progress.refresh()  # shown at once, not at the next refresh a tenth of a second later
    try:
        yield Bar(progress, task)
    finally:
        with _lock:
            progress.remove_task(task)
            _users -= 1
            if _users == 0:
                _shown = None
                progress.stop()


def track(items: Iterable[T], description: str, total: float | None = None, *, enabled: bool = True) -> Iterator[T]:
    """Yield ``items``, advancing a bar (as :func:`progress_bar`) after each."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar(description, total, enabled=enabled) as bar:
        for item in items:
            yield item
            bar.advance()


def _new_display() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # What the command prints on stdout while a bar is shown goes above the bar when stdout is the same terminal;
    # into a pipe or a file it goes as it is (rich would otherwise send it through the bar's console, to stderr).
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=True,
    )
