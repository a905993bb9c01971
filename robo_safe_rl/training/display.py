"""What a training iteration shows on the console: one interface, three displays (``display=compact|rsl|plain``).

The runner's logger (:class:`robo_safe_rl.training.logger.SafeLogger`) writes the metrics (TensorBoard, W&B) exactly as
rsl-rl does, then hands the iteration's figures to a :class:`Display` as one :class:`IterationStats`:

- :class:`RslDisplay`: rsl-rl 5.5's block of about 20 lines per iteration, as ``Logger.log`` prints it;
- :class:`PlainDisplay`: one line every N iterations (and the first, the last and every iteration whose safety
  counters changed), for files, pipes and CI logs: text only, never a control code;
- :class:`~robo_safe_rl.training.display_compact.CompactDisplay`: a live progress bar and a few lines below it, drawn
  by rich on a terminal.

:func:`make_display` picks one: ``compact`` becomes ``plain`` where stdout is not a terminal.
"""

from __future__ import annotations

import datetime
import math
import sys
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import TextIO

from robo_safe_rl.config.display import DisplayMode

#: The safety counters every compact display shows, zero or not, with their labels (DESIGN.md's safety model).
NAMED_COUNTERS: dict[str, str] = {
    "rollbacks": "rollbacks",
    "grad_steps_skipped": "skipped steps",
    "physics_errors": "physics errors",
    "worker_crashes": "worker crashes",
}
#: Counters that are not events to look at: ``actions_sanitised`` counts every action clipped to the action space,
#: which PPO's Gaussian policy does all the time; the others follow from an event that is shown already (discarded
#: rollout steps from a rollback, restarts from a crash, resets and rebuilds from a physics incident, the elements and
#: steps of the guard from its skipped or zeroed steps).
ROUTINE_COUNTERS = frozenset(
    {
        "actions_sanitised",
        "rollout_steps_discarded",
        "worker_restarts",
        "recoveries",
        "env_rebuilds",
        "grad_nonfinite_elements",
        "grad_nonfinite_steps",
    }
)
#: Iterations over which the trend of the return and the episode length is taken.
TREND_WINDOW = 10


@dataclass(frozen=True)
class IterationStats:
    """One training iteration's figures, as rsl-rl's logger computes them (``Logger.log``).

    Iterations count from 0 like rsl-rl's: ``iteration`` runs from ``start_iteration`` to ``total_iterations - 1``.
    Times are in seconds; ``elapsed_s`` and ``eta_s`` add up iteration times (rsl-rl's ``tot_time``), not wall time.
    """

    iteration: int
    start_iteration: int
    total_iterations: int
    total_steps: int
    steps_per_s: int
    collect_time: float
    learn_time: float
    elapsed_s: float
    eta_s: float
    losses: dict[str, float]
    learning_rate: float
    action_std: float
    mean_return: float | None = None
    """Mean return of the last 100 episodes that ended (rsl-rl's ``Mean reward``); ``None`` before the first."""
    mean_episode_length: float | None = None
    mean_extrinsic_return: float | None = None
    mean_intrinsic_return: float | None = None
    episode_terms: tuple[tuple[str, float], ...] = ()
    """The envs' episode logs (``extras["episode"]`` or ``["log"]``), averaged, in rsl-rl's order."""
    run_name: str | None = None
    safety: dict[str, int] = field(default_factory=dict)
    """The cumulative safety counters by name (``SafeRunner.safety_counters()``)."""

    @property
    def iteration_time(self) -> float:
        return self.collect_time + self.learn_time

    @property
    def last(self) -> bool:
        """Whether this is the last iteration of the ``learn()`` call."""
        return self.iteration + 1 >= self.total_iterations


def safety_shown(safety: dict[str, int]) -> dict[str, int]:
    """The counters a display shows: the named ones (zero or not), then every other event counter that is non-zero.

    Args:
        safety: Cumulative counters by name (``IterationStats.safety``).

    Returns:
        Label to count, named counters first (``{"rollbacks": 0, ..., "nonfinite_obs": 2}``).
    """
    shown = {label: int(safety.get(name, 0)) for name, label in NAMED_COUNTERS.items()}
    for name, value in safety.items():
        if name in NAMED_COUNTERS or name in ROUTINE_COUNTERS or not value:
            continue
        shown[name] = int(value)
    return shown


def duration(seconds: float) -> str:
    """``0:01:23``, as rsl-rl prints its times (whole seconds)."""
    return str(datetime.timedelta(seconds=int(seconds))) if math.isfinite(seconds) else "?"


class Trend:
    """A value's change over the last :data:`TREND_WINDOW` iterations that had one (``None`` values are skipped)."""

    def __init__(self, window: int = TREND_WINDOW) -> None:
        self._values: deque[float] = deque(maxlen=window + 1)

    def add(self, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            self._values.append(value)

    @property
    def change(self) -> float | None:
        """Latest minus the oldest kept value; ``None`` until two values were added."""
        return self._values[-1] - self._values[0] if len(self._values) > 1 else None


class Display:
    """Shows training iterations; a context manager that :meth:`close` s it (a live display stops drawing)."""

    def show(self, stats: IterationStats) -> None:
        """Show one iteration (called by rank 0 only, after its metrics are written)."""

    def close(self) -> None:
        """Stop showing (idempotent); what was shown stays on the console."""

    def __enter__(self) -> Display:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class Displays(Display):
    """Several displays fed the same iterations (the terminal's live display and ``train.log``'s plain lines)."""

    def __init__(self, *displays: Display) -> None:
        self.displays = displays

    def show(self, stats: IterationStats) -> None:
        for display in self.displays:
            display.show(stats)

    def close(self) -> None:
        for display in self.displays:
            display.close()


class RslDisplay(Display):
    """rsl-rl's iteration block, as its ``Logger.log`` prints it (``print()``, so to ``sys.stdout`` at the time)."""

    def __init__(self, width: int = 80, pad: int = 40) -> None:
        self.width = width
        self.pad = pad

    def show(self, stats: IterationStats) -> None:
        # ---- Copied from rsl-rl 5.5.1 rsl_rl/utils/logger.py Logger.log (BSD-3-Clause, ETH Zurich and NVIDIA),
        # its console part, reading the figures from ``stats``; the text is the same, byte for byte.
        width, pad, it = self.width, self.pad, stats.iteration
        extras_string = ""
        for key, value in stats.episode_terms:
            if "/" in key:
                extras_string += f"""{f"{key}:":>{pad}} {value:.4f}\n"""
            else:
                extras_string += f"""{f"Mean episode {key}:":>{pad}} {value:.4f}\n"""
        log_string = f"""{"#" * width}\n"""
        log_string += f"""\033[1m{f" Learning iteration {it}/{stats.total_iterations} ".center(width)}\033[0m \n\n"""
        log_string += f"""{"Run name:":>{pad}} {stats.run_name}\n""" if stats.run_name else ""
        log_string += (
            f"""{"Total steps:":>{pad}} {stats.total_steps} \n"""
            f"""{"Steps per second:":>{pad}} {stats.steps_per_s:.0f} \n"""
            f"""{"Collection time:":>{pad}} {stats.collect_time:.3f}s \n"""
            f"""{"Learning time:":>{pad}} {stats.learn_time:.3f}s \n"""
        )
        for key, value in stats.losses.items():
            log_string += f"""{f"Mean {key} loss:":>{pad}} {value:.4f}\n"""
        if stats.mean_return is not None:
            if stats.mean_extrinsic_return is not None:
                log_string += f"""{"Mean extrinsic reward:":>{pad}} {stats.mean_extrinsic_return:.2f}\n"""
                log_string += f"""{"Mean intrinsic reward:":>{pad}} {stats.mean_intrinsic_return:.2f}\n"""
            log_string += f"""{"Mean reward:":>{pad}} {stats.mean_return:.2f}\n"""
            log_string += f"""{"Mean episode length:":>{pad}} {stats.mean_episode_length:.2f}\n"""
        log_string += f"""{"Mean action std:":>{pad}} {stats.action_std:.2f}\n"""
        log_string += extras_string
        log_string += (
            f"""{"-" * width}\n"""
            f"""{"Iteration time:":>{pad}} {stats.iteration_time:.2f}s\n"""
            f"""{"Time elapsed:":>{pad}} {datetime.timedelta(seconds=int(stats.elapsed_s))}\n"""
            f"""{"ETA:":>{pad}} {datetime.timedelta(seconds=int(stats.eta_s))}\n"""
        )
        print(log_string)
        # ---- End of the copy.


class PlainDisplay(Display):
    """One line of text every ``interval`` iterations, for a file or a pipe: no control code, no redrawing.

    The first and the last iteration are always shown, and so is every iteration in which a shown safety counter
    changed, so that a line between two regular ones says when an event happened.

    Args:
        stream: Where the lines go; ``None``: ``sys.stdout`` at the time of each line (so a tee or a capture set up
            later still sees them).
        interval: Iterations between two regular lines.
    """

    def __init__(self, stream: TextIO | None = None, interval: int = 10) -> None:
        self.stream = stream
        self.interval = interval
        self.returns = Trend()
        self.lengths = Trend()
        self._last_safety: dict[str, int] | None = None

    def show(self, stats: IterationStats) -> None:
        self.returns.add(stats.mean_return)
        self.lengths.add(stats.mean_episode_length)
        safety = safety_shown(stats.safety)
        due = (stats.iteration - stats.start_iteration) % self.interval == 0 or stats.last
        if due or safety != self._last_safety:
            stream = self.stream if self.stream is not None else sys.stdout
            stream.write(self.line(stats, safety) + "\n")
            stream.flush()
        self._last_safety = safety

    def line(self, stats: IterationStats, safety: dict[str, int]) -> str:
        """The iteration's line (``iteration 3/100 | 1,234 steps/s | ETA 0:01:10 | return ... | safety ok``)."""
        parts = [
            f"iteration {stats.iteration + 1}/{stats.total_iterations}",
            f"{stats.steps_per_s:,} steps/s",
            f"ETA {duration(stats.eta_s)}",
            f"return {_with_trend(stats.mean_return, self.returns.change, '.2f')}",
            f"episode length {_with_trend(stats.mean_episode_length, self.lengths.change, '.1f')}",
            f"lr {stats.learning_rate:.2e}",
        ]
        losses = [f"{key} {stats.losses[key]:.4f}" for key in ("value", "surrogate") if key in stats.losses]
        if losses:
            parts.append("loss " + " ".join(losses))
        events = [f"{label} {count}" for label, count in safety.items() if count]
        parts.append("safety: " + ", ".join(events) if events else "safety ok")
        return " | ".join(parts)


def _with_trend(value: float | None, change: float | None, spec: str) -> str:
    """``123.40 (+5.20 over 10 it)``; ``-`` before the first episode ended."""
    if value is None:
        return "-"
    text = format(value, spec)
    return text if change is None else f"{text} ({change:+{spec}} over {TREND_WINDOW} it)"


def make_display(
    mode: DisplayMode | str,
    *,
    console: TextIO | None = None,
    record: TextIO | None = None,
    interval: int = 10,
) -> Display:
    """The display ``mode`` asks for, fitted to where stdout goes.

    Args:
        mode: ``compact``, ``rsl`` or ``plain``. ``compact`` draws on ``console`` only when it is an interactive
            terminal; elsewhere (a file, a pipe, ``nohup``, CI) it is ``plain``, so no control code reaches a file.
        console: The terminal stream the compact display draws on (default ``sys.stdout``). A training's tee to its
            ``train.log`` passes the console it tees (drawn frames are for the eyes only).
        record: A text stream that gets the plain lines as well while the compact display draws (``train.log``).
        interval: Iterations between two plain lines.
    """
    from robo_safe_rl.progress import on_terminal

    mode = DisplayMode(mode)
    if mode is DisplayMode.rsl:
        return RslDisplay()
    if mode is DisplayMode.compact and on_terminal(console if console is not None else sys.stdout):
        from robo_safe_rl.training.display_compact import CompactDisplay

        compact = CompactDisplay(console if console is not None else sys.stdout, record=record)
        return compact if record is None else Displays(compact, PlainDisplay(record, interval))
    return PlainDisplay(interval=interval)
