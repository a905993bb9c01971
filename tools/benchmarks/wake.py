"""The hand-over of one env-worker step, alone: a byte to a process waiting on its pipe, and a byte back.

The env workers exchange one byte each way per step (``robo_safe_rl/bridge/worker_loop.py``): the trainer writes to a
worker blocked in ``poll``, and reads its answer. What that costs depends on the machine more than on the code: a
process blocked on an idle core is woken through that core, which a virtual machine's host may have put to sleep.
This measures the round trip on the same primitives (a socket pair as ``multiprocessing.connection.Connection``, one
``select.poll`` made once), with the trainer's side pinned to one core and an echoing process:

- ``other_core``: the echo pinned to another core, blocking in ``poll`` between messages (as a worker waits);
- ``same_core``: the echo pinned to the trainer's core (a wake-up there is a switch between two processes);
- ``other_core_polling``: the echo on another core polling without blocking: the same exchange with no idle core to
  wake, which bounds what any waking scheme could save.

Between two round trips the trainer's side works for ``gap_s`` (as the trainer does between steps: the policy, the
episode bookkeeping), so the echo's core goes idle as a worker's does. Rounds interleave the cases; medians and 90th
percentiles of the round trips are reported.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

QUIT = b"q"
CASES = ("other_core", "same_core", "other_core_polling")


def _echo(conn: Connection, cpu: int, polling: bool) -> None:
    """Answer every byte with one, pinned to ``cpu``; block in ``poll`` between messages unless ``polling``."""
    os.sched_setaffinity(0, {cpu})
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    while True:
        while polling and not poller.poll(0):
            pass
        poller.poll()
        if conn.recv_bytes() == QUIT:
            return
        conn.send_bytes(b"k")


def _exchange(conn: Connection, poller: select.poll) -> None:
    """One step's hand-over, as the trainer makes it: a byte out, a wait on the pipe, a byte back."""
    conn.send_bytes(b"s")
    poller.poll()
    conn.recv_bytes()


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def bench_wake(round_trips: int = 1000, rounds: int = 3, gap_s: float = 1e-3) -> dict[str, Any]:
    """Round-trip times in us of each case of the module docstring.

    Args:
        round_trips: Round trips per case and round.
        rounds: Interleaved rounds of the three cases.
        gap_s: The trainer's side works this long between two round trips, in s.

    Returns:
        ``{"cases": {case: {"median_us", "p90_us"}}, ...}``, or ``{"skipped": reason}`` where the cores cannot be
        pinned (not Linux) or there is only one.
    """
    if not hasattr(os, "sched_setaffinity"):
        return {"skipped": "the system cannot pin processes to cores (os.sched_setaffinity: Linux only)"}
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"skipped": f"one core available ({cpus}): there is no other core to wake"}
    here, other = cpus[0], cpus[1]
    where = {"other_core": (other, False), "same_core": (here, False), "other_core_polling": (other, True)}
    context = multiprocessing.get_context("spawn")
    trips: dict[str, list[float]] = {case: [] for case in CASES}
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {here})
    try:
        for _ in range(rounds):
            for case in CASES:
                ours, theirs = context.Pipe()
                echo = context.Process(target=_echo, args=(theirs, *where[case]), daemon=True)
                echo.start()
                theirs.close()
                poller = select.poll()
                poller.register(ours.fileno(), select.POLLIN)
                _exchange(ours, poller)  # the first one waits for the echo to start
                for _ in range(round_trips):
                    _busy(gap_s)
                    start = time.perf_counter()
                    _exchange(ours, poller)
                    trips[case].append(time.perf_counter() - start)
                ours.send_bytes(QUIT)
                echo.join(10)
                ours.close()
    finally:
        os.sched_setaffinity(0, before)
    return {
        "cores": (here, other),
        "round_trips": round_trips,
        "rounds": rounds,
        "gap_s": gap_s,
        "cases": {
            case: {"median_us": statistics.median(t) * 1e6, "p90_us": statistics.quantiles(t, n=10)[-1] * 1e6}
            for case, t in trips.items()
        },
    }
