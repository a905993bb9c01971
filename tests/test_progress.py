"""Progress bars: drawn on a terminal, nested bars share one display, and nothing reaches a pipe or a file."""

from __future__ import annotations

import os
import pty
import select
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from robo_safe_rl.progress import on_terminal, progress_bar, track


def read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        chunks.append(os.read(fd, 65536))
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """Call it in the test (pytest puts its own stderr back between setup and call): stderr goes to a new
    pseudo-terminal, and the terminal's other end is returned, to read what was drawn."""
    opened: list[int] = []

    def attach() -> int:
        master, slave = pty.openpty()
        opened.extend((master, slave))
        monkeypatch.setattr(sys, "stderr", open(slave, "w", encoding="utf-8", closefd=False))  # noqa: SIM115
        return master

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    yield attach
    for fd in opened:
        os.close(fd)


def test_only_an_interactive_terminal_gets_a_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # CI sets it for colours; rich alone would then draw into a pipe
    monkeypatch.setenv("TERM", "xterm-256color")
    read_end, write_end = os.pipe()
    with open(write_end, "w") as pipe, open(tmp_path / "log", "w") as file:
        assert not on_terminal(pipe) and not on_terminal(file)
    os.close(read_end)
    master, slave = pty.openpty()
    with open(slave, "w") as tty:
        assert on_terminal(tty)
        monkeypatch.setenv("TERM", "dumb")  # a terminal that cannot move its cursor
        assert not on_terminal(tty)
    os.close(master)


def test_nested_bars_are_drawn_in_one_display_and_removed(terminal: Callable[[], int]) -> None:
    screen = terminal()
    with progress_bar("outer work", 2) as outer:
        for _ in track(range(3), "inner work"):
            pass
        outer.describe("outer work, later")
        outer.advance()
    drawn = read_all(screen)
    assert "outer work" in drawn and "inner work" in drawn and "outer work, later" in drawn
    assert "0/3" in drawn and "━" in drawn
    # Both bars were shown by one live display (rich refuses a second one), and a new bar after them starts afresh.
    with progress_bar("again", 1) as bar:
        bar.advance()
    assert "again" in read_all(screen)


def test_a_bar_not_asked_for_or_on_a_pipe_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    pipe = open(write_end, "w")  # noqa: SIM115  (closed below)
    monkeypatch.setattr(sys, "stderr", pipe)
    with progress_bar("work", 3) as bar:
        bar.advance(3)
    assert list(track([1, 2], "more work")) == [1, 2]
    pipe.close()
    with open(read_end, "rb") as got:
        assert got.read() == b""


def test_not_asked_for_draws_nothing_on_a_terminal(terminal: Callable[[], int]) -> None:
    screen = terminal()
    with progress_bar("hidden work", 3, enabled=False) as bar:
        bar.advance()
    assert read_all(screen) == ""
