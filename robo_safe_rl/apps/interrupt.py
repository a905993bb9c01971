"""Stop a run on SIGTERM as on Ctrl-C: the iteration is abandoned, ``summary.json`` is written, the exit is non-zero.

SIGTERM is what a batch scheduler (Slurm, Kubernetes), ``docker stop`` and ``timeout`` send before they kill; by
default Python dies of it at once, without a summary (exit 143). Inside :func:`stop_on_signals` the first SIGTERM or
SIGINT raises :class:`RunInterrupted` in the main thread instead, so the training saves its last good snapshot as a
checkpoint (:meth:`~robo_safe_rl.training.runner.SafeRunner.save_last_snapshot`), writes the summary (status
``stopped``) and exits ``128 + signal`` (143, 130), what a shell reports for a signal death.

A second signal gets the previous behaviour back: a second Ctrl-C raises ``KeyboardInterrupt`` in the clean-up and a
second SIGTERM kills at once, for a run whose clean-up hangs. A signal the process was started with ignored (``nohup``,
or SIGINT of a background job in a non-interactive shell) stays ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals that stop a run.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal (a ``KeyboardInterrupt``, so that nothing that catches ``Exception`` eats it).

    Args:
        signum: The signal number.
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"stopped by {signal.Signals(self.signum).name}")

    @property
    def exit_code(self) -> int:
        """``128 + signum``: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


@contextmanager
def stop_on_signals(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, the first of ``signals`` raises :class:`RunInterrupted`; the handlers are restored after.

    Outside the main thread (where Python cannot set handlers) the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, object] = {}

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for sig, handler in previous.items():  # the next signal acts as it did before the run
            signal.signal(sig, handler)  # type: ignore[arg-type]  # getsignal's result is a valid handler
        raise RunInterrupted(signum)

    for sig in signals:
        handler = signal.getsignal(sig)
        if handler is signal.SIG_IGN:
            continue
        previous[sig] = signal.SIG_DFL if handler is None else handler  # None: set outside Python, act as default
        signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
