"""The compact training display: a live progress bar and four lines below it, drawn by rich on a terminal.

::

    ━━━━━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━━━━━━  57/100  3,210 steps/s  elapsed 0:01:02  ETA 0:00:47
    return           123.45  ▲ +12.30 over 10 it     episode length  200.0  ▲ +3.0
    learning rate  1.00e-03                          loss  value 0.1234  surrogate -0.0042
    safety         rollbacks 0  skipped steps 0  physics errors 3  worker crashes 0

A safety counter turns bold red the moment it is non-zero. The region is redrawn once per iteration (no refresh
thread competes with the envs for the cores). While it is drawn, anything else written to the terminal, by
``print``, on stderr or by a logging handler that writes to the terminal, is printed above it instead of through it,
and, where a ``record`` stream is given (the run's ``train.log``), also kept there as text.
"""

from __future__ import annotations

import io
import logging
import sys
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from robo_safe_rl.training.display import TREND_WINDOW, Display, IterationStats, Trend, duration, safety_shown

#: Width of the labels' column ("learning rate").
_LABEL = 13


class CompactDisplay(Display):
    """rich's live view of the training iterations (module docstring).

    Args:
        stream: The terminal to draw on (the console itself, not a tee into a file).
        record: Where text written by others while the view is drawn is kept as well (``train.log``), or ``None``.
        console: A rich console to draw with instead of one on ``stream`` (tests pass one with ``force_terminal``).
    """

    def __init__(self, stream: TextIO | None = None, record: TextIO | None = None, console: Console | None = None):
        self.console = console if console is not None else Console(file=stream, highlight=False)
        # A console made without a file writes to whatever sys.stdout is at the time, which is replaced while the view
        # is drawn (text written by others goes above it, through this console): it must keep today's stream.
        self.console.file = self.console.file
        self.record = record
        self.returns = Trend()
        self.lengths = Trend()
        self._live: Live | None = None
        self._restore: list[tuple[str, object]] = []

    def show(self, stats: IterationStats) -> None:
        self.returns.add(stats.mean_return)
        self.lengths.add(stats.mean_episode_length)
        view = self.render(stats)
        if self._live is None:
            self._start(view)
        else:
            self._live.update(view, refresh=True)
        if stats.last:
            self.close()

    def render(self, stats: IterationStats) -> RenderableType:
        """The view of one iteration: the bar and its line, then return, learning rate and losses, safety."""
        done = stats.iteration + 1 - stats.start_iteration
        bar_line = Table.grid(padding=(0, 2))
        bar_line.add_row(
            ProgressBar(total=max(stats.total_iterations - stats.start_iteration, 1), completed=done, width=40),
            Text(f"{stats.iteration + 1}/{stats.total_iterations}", style="bold"),
            f"{stats.steps_per_s:,} steps/s",
            f"elapsed {duration(stats.elapsed_s)}",
            Text(f"ETA {duration(stats.eta_s)}", style="cyan"),
        )
        rows = Table.grid(padding=(0, 2))
        rows.add_column(style="bold", min_width=_LABEL)
        rows.add_column(min_width=32)
        rows.add_column(style="bold")
        rows.add_column()
        losses = Text()
        for key in ("value", "surrogate"):
            if key in stats.losses:
                losses.append(f"{key} ", style="dim").append(f"{stats.losses[key]:.4f}  ")
        rows.add_row(
            "return",
            _with_trend(stats.mean_return, self.returns.change, ".2f"),
            "episode length",
            _with_trend(stats.mean_episode_length, self.lengths.change, ".1f"),
        )
        rows.add_row("learning rate", f"{stats.learning_rate:.2e}", "loss", losses)
        safety = Text()
        for label, count in safety_shown(stats.safety).items():
            safety.append(f"{label} {count}", style="bold red" if count else "green").append("  ")
        safety_line = Table.grid(padding=(0, 2))
        safety_line.add_column(style="bold", min_width=_LABEL)
        safety_line.add_column()
        safety_line.add_row("safety", safety)
        return Group(bar_line, rows, safety_line)

    def close(self) -> None:
        if self._live is None:
            return
        live, self._live = self._live, None
        try:
            live.stop()
        finally:
            self._unredirect()

    # ------------------------------------------------------------------ what others write meanwhile

    def _start(self, view: RenderableType) -> None:
        # rich's own redirect (Live(redirect_stdout=True)) would send prints to the terminal only, and leave logging
        # handlers that hold the terminal stream drawing through the view: both go above it here, and to the record.
        self._live = Live(view, console=self.console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self._live.start(refresh=True)
        stdout, stderr = sys.stdout, sys.stderr
        self._restore = [("stdout", stdout), ("stderr", stderr)]
        sys.stdout = _Above(self.console, self.record, stdout)  # type: ignore[assignment]
        sys.stderr = _Above(self.console, self.record, stderr)  # type: ignore[assignment]
        handlers_above = _Above(self.console, None, stdout)  # their records reach train.log through its own handler
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler and _is_terminal(handler.stream):
                self._restore.append(("handler", (handler, handler.setStream(handlers_above))))

    def _unredirect(self) -> None:
        for what, saved in reversed(self._restore):
            if what == "stdout":
                sys.stdout.flush()
                sys.stdout = saved  # type: ignore[assignment]
            elif what == "stderr":
                sys.stderr.flush()
                sys.stderr = saved  # type: ignore[assignment]
            else:
                handler, stream = saved  # type: ignore[misc]
                handler.setStream(stream)
        self._restore = []


class _Above(io.TextIOBase):
    """A text stream that prints whole lines above the live view (and copies them to ``record``)."""

    def __init__(self, console: Console, record: TextIO | None, original: TextIO) -> None:
        super().__init__()
        self._console = console
        self._record = record
        self._original = original
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            lines, self._pending = self._pending.rsplit("\n", 1)
            self._emit(lines)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            lines, self._pending = self._pending, ""
            self._emit(lines)

    def _emit(self, lines: str) -> None:
        self._console.print(Text.from_ansi(lines), soft_wrap=True)
        if self._record is not None:
            self._record.write(lines + "\n")

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._original.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]  (TextIOBase declares it read-only)
        return getattr(self._original, "encoding", "utf-8")


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def _with_trend(value: float | None, change: float | None, spec: str) -> Text:
    """``123.45  ▲ +12.30 over 10 it`` (green up, red down); ``-`` before the first episode ended."""
    if value is None:
        return Text("-", style="dim")
    text = Text(format(value, spec))
    if change is not None:
        arrow, style = ("▲", "green") if change > 0 else ("▼", "red") if change < 0 else ("=", "dim")
        text.append(f"  {arrow} {change:+{spec}}", style=style).append(f" over {TREND_WINDOW} it", style="dim")
    return text
