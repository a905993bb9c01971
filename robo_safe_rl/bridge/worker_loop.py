"""The inside of an env worker process: its envs, its incident records and logs, and the loop that steps them.

:class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch` starts one process per worker; after the trainer's import path,
it receives the arguments of :func:`worker_main`. The worker builds its envs from a picklable factory (nothing but
the factory and small messages crosses the pipe), says what they are, attaches to the batch's shared memory, and
then waits for one message per step (polling for ``spin_s`` before it blocks, when it has a core to itself:
:func:`wait_readable`). A step is one byte each way; actions come from, and observations, rewards,
terminated / truncated flags and counters go to, the shared arrays
(:class:`~robo_safe_rl.bridge.worker_shared.SharedArrays`): nothing is pickled per step.

Messages (trainer to worker): ``b"s"`` step; ``b"c"`` close; pickled ``("attach", layout, first_row)`` (map the
shared file, sized by now) and ``("reset", seeds)``. Replies: ``b"k"`` done; pickled ``("done", None, records)``
when the worker logged something, ``("ready", [EnvInfo], records)``, or ``("error", exception, traceback)``. The
log records go to the trainer's own loggers (its console, ``train.log``), as if the envs were in the trainer.

The worker ends when told to close, when its pipe closes (the trainer died: the kernel closed its end), or within
:data:`PARENT_CHECK_S` of being orphaned: no worker outlives its trainer. It ignores SIGINT: the trainer decides
when its workers stop.

This module imports neither torch nor rsl-rl (a worker needs numpy, gymnasium, the bridge and the task).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.env_batch import EnvInfo, step_and_reset
from robo_safe_rl.bridge.incidents import Incident, IncidentRecorder
from robo_safe_rl.bridge.worker_shared import HEADER_GLOBAL_STEP, HEADER_ITERATION, EnvTally, SharedArrays

STEP, CLOSE, DONE = b"s", b"c", b"k"
#: Seconds between two checks of the parent while the worker waits for a message.
PARENT_CHECK_S = 1.0

#: ``factory(env_index, recorder) -> env``: builds one guarded env; must pickle (a module-level class or function).
EnvFactory = Callable[[int, Any], gym.Env]


@dataclass(frozen=True)
class PartSpec:
    """Where one worker writes its part of the rank's incident records, and its share of the caps."""

    directory: str
    max_records: int
    max_bytes: int


@dataclass(frozen=True)
class Caps:
    """Incident recording of a rank with workers: its folder (``incidents``, ``incidents_rank<r>``) and caps.

    The trainer writes worker crashes into ``directory``; worker ``k`` writes its envs' incidents into
    ``<directory>_worker<k>``. The parts share the caps evenly, so the rank's total stays within them.
    """

    directory: Path
    max_records: int
    max_bytes: int

    def part(self, part: int, parts: int) -> tuple[int, int]:
        """Records and bytes part ``part`` of ``parts`` may use."""
        records = self.max_records // parts + (1 if part < self.max_records % parts else 0)
        return records, self.max_bytes // parts

    def worker_part(self, k: int, workers: int) -> PartSpec:
        """Where worker ``k`` writes, with its share of the caps (part 0 is the trainer's)."""
        records, size = self.part(k + 1, workers + 1)
        return PartSpec(f"{self.directory}_worker{k}", records, size)


class PartRecorder:
    """The incident recorder of one worker: an :class:`IncidentRecorder` made on the first record (a clean run
    leaves no empty folder per worker), writing the iteration and step count the trainer publishes in the header."""

    def __init__(self, spec: PartSpec) -> None:
        self.spec = spec
        self.header: np.ndarray | None = None
        self._recorder: IncidentRecorder | None = None
        if Path(spec.directory).exists():  # a resumed run: fail now if its records cannot be read
            self._open()

    @property
    def directory(self) -> Path:
        """The folder of this worker's part (made on the first record)."""
        return Path(self.spec.directory)

    def _open(self) -> IncidentRecorder:
        if self._recorder is None:
            self._recorder = IncidentRecorder(self.spec.directory, self.spec.max_records, self.spec.max_bytes)
        return self._recorder

    def record(self, incident: Incident) -> bool:
        """Write one incident (see :meth:`IncidentRecorder.record`)."""
        recorder = self._open()
        if self.header is not None:
            recorder.set_context(
                iteration=int(self.header[HEADER_ITERATION]), global_step=int(self.header[HEADER_GLOBAL_STEP])
            )
        return recorder.record(incident)


class LogRelay(logging.Handler):
    """Keeps the worker's log records, prefixed with its name, for the trainer to log (:func:`relay_logs`)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.prefix = name
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # Pickle-safe: the message rendered here, the traceback as text.
        record.msg, record.args = f"[{self.prefix}] {record.getMessage()}", None
        if record.exc_info:
            record.exc_text, record.exc_info = logging.Formatter().formatException(record.exc_info), None
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        """The records since the last call."""
        records, self.records = self.records, []
        return records


def relay_logs(records: list[logging.LogRecord]) -> None:
    """Log a worker's records in the trainer, through the loggers of their names."""
    for record in records:
        logging.getLogger(record.name).handle(record)


class EnvBlock:
    """A contiguous block of a batch's envs and their rows of the shared arrays: what a worker steps, and what the
    trainer steps itself beside its workers (``task.trainer_block``). Both step it with the same code, so the rows
    hold the same numbers wherever the block lives."""

    def __init__(self, envs: list[gym.Env]) -> None:
        self.envs = envs
        self.tallies = [EnvTally(env) for env in envs]
        self.arrays: SharedArrays | None = None
        self.lo = 0

    def add(self, env: gym.Env) -> None:
        """Append one env to the block (before :meth:`attach`)."""
        self.envs.append(env)
        self.tallies.append(EnvTally(env))

    def attach(self, arrays: SharedArrays, lo: int) -> None:
        """Take rows ``lo ..`` of ``arrays``; the counters continue from what those rows hold."""
        self.arrays, self.lo = arrays, lo
        for j, tally in enumerate(self.tallies):
            i = lo + j
            tally.load(arrays.counters[i], arrays.injected[i])
            arrays.armed[i] = tally.armed

    def reset(self, seeds: list[int]) -> None:
        """Reset env ``j`` with ``seeds[j]``; its first observation goes into its row."""
        a = self.arrays
        for j, (env, seed) in enumerate(zip(self.envs, seeds, strict=True)):
            i = self.lo + j
            a.obs[i] = env.reset(seed=seed)[0]
            self.tallies[j].publish(a.counters[i], a.injected[i])

    def step(self) -> None:
        """Step every env with the action in its row; results and counters go into its rows."""
        a, lo = self.arrays, self.lo
        # A fresh copy, as the adapter's per-step array in one process: an env may keep the action it was given.
        actions = np.array(a.actions[lo : lo + len(self.envs)])
        for j, env in enumerate(self.envs):
            i = lo + j
            a.obs[i], a.rewards[i], a.terminated[i], a.truncated[i] = step_and_reset(
                env, actions[j], a.terms[i], a.metrics[i]
            )
            self.tallies[j].publish(a.counters[i], a.injected[i])

    def close(self) -> None:
        """Close the envs (their physics clients)."""
        for env in self.envs:
            env.close()


def wait_readable(poller: select.poll, timeout_s: float, spin_s: float) -> bool:
    """Whether ``poller``'s pipe became readable within ``timeout_s``, polling without blocking for the first
    ``spin_s`` (``0``: block at once). A process alone on its core spins: blocked, its core goes idle, and waking
    an idle core costs several times a byte's hand-over on some machines (BENCHMARKS.md, one worker's hand-over);
    one that shares its core must not, or it holds the core from the process it waits for."""
    if spin_s > 0.0:
        deadline = time.perf_counter() + min(spin_s, timeout_s)
        while time.perf_counter() < deadline:
            if poller.poll(0):
                return True
        timeout_s -= spin_s
    return bool(poller.poll(max(timeout_s, 0.0) * 1e3))


class _Worker:
    """A worker's block of envs and its side of the protocol (module docstring)."""

    def __init__(
        self,
        conn: Connection,
        envs: list[gym.Env],
        recorder: PartRecorder | None,
        shared_fd: int,
        relay: LogRelay,
        spin_s: float = 0.0,
    ) -> None:
        self.conn = conn
        self.shared_fd = shared_fd
        self.relay = relay
        self.block = EnvBlock(envs)
        self.recorder = recorder
        self.spin_s = spin_s
        self.parent = os.getppid()
        self.poller = select.poll()  # made once: Connection.poll builds a selector on every call
        self.poller.register(conn.fileno(), select.POLLIN)

    def serve(self) -> None:
        """Answer messages until told to close or orphaned."""
        while True:
            if not wait_readable(self.poller, PARENT_CHECK_S, self.spin_s):
                if os.getppid() != self.parent:
                    return  # orphaned: the trainer is gone
                continue
            try:
                message = self.conn.recv_bytes()
            except (EOFError, OSError):
                return
            if message == CLOSE:
                return
            try:
                if message == STEP:
                    self.block.step()
                else:
                    self._command(pickle.loads(message))
            except BaseException as err:
                send_error(self.conn, err)
                continue
            records = self.relay.take()
            self.conn.send_bytes(pickle.dumps(("done", None, records)) if records else DONE)

    def _command(self, command: tuple) -> None:
        if command[0] == "attach":
            _, layout, lo = command
            arrays = SharedArrays(layout, self.shared_fd)
            if self.recorder is not None:
                self.recorder.header = arrays.header
            self.block.attach(arrays, lo)
        elif command[0] == "reset":
            self.block.reset(command[1])
        else:
            raise ValueError(f"unknown worker command {command[0]!r}")

    def close(self) -> None:
        self.block.close()
        if self.block.arrays is not None:
            self.block.arrays.release()
        if self.recorder is not None:
            self.recorder.header = None


def send_error(conn: Connection, err: BaseException) -> None:
    """Send an exception and its traceback to the trainer (as text when the exception does not pickle)."""
    text = "".join(traceback.format_exception(err))
    try:
        payload = pickle.dumps(("error", err, text))
    except Exception:  # an exception holding something unpicklable: keep its type and message
        payload = pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}"), text))
    with contextlib.suppress(BrokenPipeError, OSError):
        conn.send_bytes(payload)


def bootstrap(conn: Connection) -> None:
    """Read :func:`worker_main`'s arguments from the pipe and run it; arguments that cannot be unpickled here (a
    factory or an env class defined in the trainer's main script) are an error for the trainer, not a crash."""
    try:
        args = pickle.loads(conn.recv_bytes())
    except BaseException as err:
        send_error(conn, err)
        conn.close()
        return
    worker_main(conn, *args)


def worker_main(
    conn: Connection,
    shared_fd: int,
    factory: EnvFactory,
    indices: list[int],
    part: PartSpec | None,
    cpus: list[int] | None,
    name: str = "env worker",
    log_level: int = logging.WARNING,
    spin_s: float = 0.0,
) -> None:
    """The body of a worker process: build envs ``indices`` with ``factory``, then serve (module docstring).

    Args:
        conn: The worker's end of its pipe.
        shared_fd: The batch's shared file (:class:`SharedArrays`), mapped when the trainer says ``attach``.
        factory: Builds one env from its index and the worker's incident recorder (``None`` without one).
        indices: Env indices (as SafeStep records them) of this worker's envs.
        part: Where this worker writes incident records; ``None`` records nothing.
        cpus: Cores to run on (the rank's share under torchrun); ``None`` leaves the affinity alone.
        name: How the worker's log messages start (``env worker 1``).
        log_level: The trainer's logging level.
        spin_s: Seconds to poll for the next message before blocking (:func:`wait_readable`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    relay = LogRelay(name)
    logging.getLogger().addHandler(relay)
    logging.getLogger().setLevel(log_level)
    if cpus and hasattr(os, "sched_setaffinity"):  # Linux
        os.sched_setaffinity(0, cpus)
    recorder = PartRecorder(part) if part is not None else None
    envs: list[gym.Env] = []
    worker: _Worker | None = None
    try:
        for index in indices:
            envs.append(factory(index, recorder))
        worker = _Worker(conn, envs, recorder, shared_fd, relay, spin_s)
        conn.send_bytes(pickle.dumps(("ready", [EnvInfo.of(env) for env in envs], relay.take())))
    except BaseException as err:
        send_error(conn, err)
    try:
        if worker is not None:  # else the error is sent: it stays readable after this end of the pipe closes
            worker.serve()
    finally:
        if worker is not None:
            worker.close()
        else:
            for env in envs:
                env.close()
        conn.close()
