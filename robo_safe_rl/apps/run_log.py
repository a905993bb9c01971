"""``train.log``: what a training run shows, also kept in its run directory.

rsl-rl prints its iteration blocks, its model summary and its code-state notes with ``print()``, which never reaches
a logging handler; the run's log records (``logging``) never reach ``print()``'s stream. :class:`RunLog` sends both
into one file, in the order they happened:

- log records through a :class:`logging.FileHandler` on the root logger (at INFO for the run's duration);
- what is written to ``sys.stdout`` / ``sys.stderr`` through a tee that passes it on unchanged to the console and
  appends it to the same file, terminal control codes (rsl-rl's bold title) left out.

The console shows everything once, as it would without the log: the console handlers (Hydra's, a user's) hold the
stream they were made with, so a record printed there never passes through the tee.

Hydra's own job log file is switched off in ``configs/train.yaml``, so ``tools/train.py`` and
``robo_safe_rl.apps.train.main`` make the same file, and only once the run's checks have passed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import TextIO

#: The records' format in the file (Hydra's console format, which ``configs/train.yaml`` keeps).
RECORD_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
#: ANSI escape sequences (CSI, such as rsl-rl's ``\\033[1m`` bold, and two-byte ones): a file gets the text only.
_CONTROL = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


class _FileHandler(logging.FileHandler):
    """A file handler that, when the file cannot be written (a full disk), says so once and stops, instead of
    printing logging's error report with a traceback for every record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8")
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self.failed = True
        sys.stderr.write(f"train: {self.baseFilename} is no longer written: {sys.exc_info()[1]}\n")


class _File:
    """The log file, written through the file handler's stream and lock: records and printed text reach it in the
    order they were made. A write that fails (a full disk) stops the file, not the run, which reports what it could not
    save itself."""

    def __init__(self, handler: _FileHandler, console: TextIO) -> None:
        self.handler = handler
        self._console = console

    def write(self, text: str) -> None:
        plain = _CONTROL.sub("", text)
        if not plain or self.handler.failed:
            return
        self.handler.acquire()
        try:
            self.handler.stream.write(plain)
            self.handler.stream.flush()
        except OSError as err:
            self.handler.failed = True
            self._console.write(f"train: {self.handler.baseFilename} is no longer written: {err}\n")
        finally:
            self.handler.release()

    def flush(self) -> None:
        """Every write is flushed already."""


class _Tee(io.TextIOBase):
    """A text stream that writes to ``console`` unchanged and to the log's file without control codes."""

    def __init__(self, console: TextIO, file: _File) -> None:
        super().__init__()
        self._console = console
        self._file = file

    def write(self, text: str) -> int:
        written = self._console.write(text)
        self._file.write(text)
        return written if written is not None else len(text)

    def flush(self) -> None:
        self._console.flush()

    def isatty(self) -> bool:
        return self._console.isatty()

    def fileno(self) -> int:
        return self._console.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  (TextIOBase declares it read-only)
        return getattr(self._console, "encoding", "utf-8")

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> object:
        # What a text stream has beyond writing (``buffer``, ``errors``, ``mode``) is the console's.
        return getattr(self._console, name)


class RunLog:
    """Keep what a run shows in ``path`` while the context is open (module docstring).

    Args:
        path: The log file (appended to: a resumed run continues its run's log); ``None`` keeps nothing (the ranks of
            a multi-process run other than 0, which write no run files).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: _File | None = None
        self._console_handler: logging.Handler | None = None
        self._streams: tuple[TextIO, TextIO] = (sys.stdout, sys.stderr)
        self._level = logging.NOTSET

    @property
    def console(self) -> TextIO:
        """The console's stdout, without the copy into the file (a live display draws its frames there only)."""
        return self._streams[0] if self._file is not None else sys.stdout

    @property
    def record(self) -> TextIO | None:
        """Writes text to the file only (control codes left out), while the context is open; ``None`` without a
        file."""
        return self._file  # type: ignore[return-value]  (a write-only text sink)

    def __enter__(self) -> RunLog:
        if self.path is None:
            return self
        try:
            handler = _FileHandler(self.path)
        except OSError as err:  # the run directory was just proven writable; should it not be, the run still runs
            print(f"train: {self.path} not written: {err}", file=sys.stderr)
            return self
        handler.setFormatter(logging.Formatter(RECORD_FORMAT))
        handler.setLevel(logging.INFO)
        root = logging.getLogger()
        if not root.handlers:
            # Without any handler, Python prints warnings on stderr (its last resort); with the file's handler alone it
            # would print nothing, so the console keeps that behaviour explicitly.
            self._console_handler = logging.StreamHandler(sys.stderr)
            self._console_handler.setLevel(logging.WARNING)
            root.addHandler(self._console_handler)
        root.addHandler(handler)
        self._level = root.level
        if root.getEffectiveLevel() > logging.INFO:
            root.setLevel(logging.INFO)
        self._streams = (sys.stdout, sys.stderr)
        self._file = _File(handler, sys.stderr)
        sys.stdout = _Tee(sys.stdout, self._file)  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, self._file)  # type: ignore[assignment]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._file is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = self._streams
        if error is not None and not isinstance(error, (SystemExit, KeyboardInterrupt)):
            # Python prints the traceback on the console once the exception leaves; the file gets it here.
            self._file.write("".join(traceback.format_exception(kind, error, trace)))
        root = logging.getLogger()
        root.removeHandler(self._file.handler)
        with contextlib.suppress(OSError):  # what a full disk left in the buffer is lost, and was said to be
            self._file.handler.close()
        if self._console_handler is not None:
            root.removeHandler(self._console_handler)
        root.setLevel(self._level)
