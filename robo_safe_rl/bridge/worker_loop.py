"""The inside of an env worker process: its envs, the shared-memory arrays, and the loop that steps them.

:class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch` starts one process per worker; after the trainer's import path,
it receives the arguments of :func:`worker_main`. The worker builds its envs from a picklable factory (nothing but
the factory and small messages crosses the pipe), says what they are, attaches to the batch's shared memory, and
then waits for one message per step. A step is one byte each way; actions come from, and observations, rewards,
terminated / truncated flags and counters go to, the shared arrays (:class:`SharedArrays`): nothing is pickled per
step.

Messages (trainer to worker): ``b"s"`` step; ``b"c"`` close; pickled ``("attach", layout, first_row)`` (map the
shared file, sized by now) and ``("reset", seeds)``. Replies: ``b"k"`` done; pickled ``("ready", [EnvInfo])`` or
``("error", exception, traceback)``.

The worker ends when told to close, when its pipe closes (the trainer died: the kernel closed its end), or within
:data:`PARENT_CHECK_S` of being orphaned: no worker outlives its trainer. It ignores SIGINT: the trainer decides
when its workers stop.

This module imports neither torch nor rsl-rl (a worker needs numpy, gymnasium, the bridge and the task).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import signal
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.env_batch import EnvInfo, find_safe_step, step_and_reset
from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector, sum_injected, wrapper_chain
from robo_safe_rl.bridge.incidents import Incident, IncidentRecorder
from robo_safe_rl.bridge.safe_step import COUNTER_NAMES
from robo_safe_rl.safety.incident_kinds import KIND_OF_FAULT

STEP, CLOSE, DONE = b"s", b"c", b"k"
#: Seconds between two checks of the parent while the worker waits for a message.
PARENT_CHECK_S = 1.0
#: Columns of the ``injected`` and ``armed`` arrays: every kind an env-side injector can count.
FAULT_KINDS: tuple[str, ...] = tuple(KIND_OF_FAULT)
#: Slots of the header: training iteration and global env-step count, for incident records written by workers.
HEADER_ITERATION, HEADER_GLOBAL_STEP = 0, 1

#: ``factory(env_index, recorder) -> env``: builds one guarded env; must pickle (a module-level class or function).
EnvFactory = Callable[[int, Any], gym.Env]


@dataclass(frozen=True)
class Layout:
    """Shapes of the arrays a batch shares with its workers (one block of shared memory, rows = envs)."""

    num_envs: int
    num_obs: int
    num_actions: int

    def fields(self) -> list[tuple[str, type, tuple[int, ...]]]:
        """``(name, dtype, shape)`` of each array, in memory order."""
        n = self.num_envs
        return [
            ("header", np.int64, (2,)),
            ("counters", np.int64, (n, len(COUNTER_NAMES))),  # SafeStep's counters, cumulative per env
            ("injected", np.int64, (n, len(FAULT_KINDS))),  # injected faults, cumulative per env
            ("armed", np.int64, (n, len(FAULT_KINDS))),  # 1 where the env's injector is armed for that kind
            ("rewards", np.float64, (n,)),
            ("actions", np.float32, (n, self.num_actions)),
            ("obs", np.float32, (n, self.num_obs)),
            ("terminated", np.bool_, (n,)),
            ("truncated", np.bool_, (n,)),
        ]

    def offsets(self) -> tuple[dict[str, int], int]:
        """Byte offset of each array (each on its own 64-byte cache line) and the total size."""
        offsets, at = {}, 0
        for name, dtype, shape in self.fields():
            offsets[name] = at
            at += -(-int(np.dtype(dtype).itemsize * np.prod(shape)) // 64) * 64
        return offsets, max(at, 64)


class SharedArrays:
    """Numpy views of a :class:`Layout` over a file shared by the trainer and its workers (the attributes are named
    as the layout's fields).

    The file is anonymous (``memfd_create`` on Linux, else an unlinked temporary file), passed to each worker as an
    inherited descriptor: no name to clean up, nothing left behind when a process is killed, and no resource tracker
    (``multiprocessing.shared_memory`` registers every segment a process attaches to, and a process that is not a
    multiprocessing child unlinks it at exit from under the others).

    Args:
        layout: The arrays.
        fd: The shared file, at least ``layout.offsets()[1]`` bytes long.
    """

    header: np.ndarray
    counters: np.ndarray
    injected: np.ndarray
    armed: np.ndarray
    rewards: np.ndarray
    actions: np.ndarray
    obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    def __init__(self, layout: Layout, fd: int) -> None:
        offsets, size = layout.offsets()
        self._map = mmap.mmap(fd, size)
        for name, dtype, shape in layout.fields():
            setattr(self, name, np.ndarray(shape, dtype=dtype, buffer=self._map, offset=offsets[name]))

    @staticmethod
    def create_file() -> int:
        """A new, empty anonymous file for a batch's arrays (the trainer sizes it with ``os.ftruncate``)."""
        if hasattr(os, "memfd_create"):
            return os.memfd_create("robo_safe_rl-env-workers")
        with tempfile.TemporaryFile() as f:
            return os.dup(f.fileno())

    def release(self) -> None:
        """Drop the views and unmap (an mmap cannot be closed while numpy arrays point into it)."""
        mapping = self._map
        self.__dict__.clear()
        mapping.close()


@dataclass(frozen=True)
class PartSpec:
    """Where one worker writes its part of the rank's incident records, and its share of the caps."""

    directory: str
    max_records: int
    max_bytes: int


class PartRecorder:
    """The incident recorder of one worker: an :class:`IncidentRecorder` made on the first record (a clean run
    leaves no empty folder per worker), writing the iteration and step count the trainer publishes in the header."""

    def __init__(self, spec: PartSpec) -> None:
        self.spec = spec
        self.header: np.ndarray | None = None
        self._recorder: IncidentRecorder | None = None
        if Path(spec.directory).exists():  # a resumed run: fail now if its records cannot be read
            self._open()

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


class EnvTally:
    """Publishes one env's SafeStep counters and injected-fault counts into its rows of the shared arrays.

    Counters only grow, so a change shows in their sum: a step without an event costs two sums of a few ints. A
    restarted worker starts its counters from the rows its predecessor left, so the totals survive a crash.
    """

    def __init__(self, env: gym.Env) -> None:
        safe = find_safe_step(env)
        self.counters: dict[str, int] | None = safe.counters if safe is not None else None
        self.injectors = [
            layer.injected for layer in wrapper_chain(env) if isinstance(layer, (ActionFaultInjector, EnvFaultInjector))
        ]
        self.armed = np.array([kind in sum_injected([env]) for kind in FAULT_KINDS], dtype=np.int64)
        self._last = (-1, -1)

    def load(self, counters: np.ndarray, injected: np.ndarray) -> None:
        """Continue from the counts in these rows (zeros for a first start)."""
        if self.counters is not None:
            self.counters.update(zip(COUNTER_NAMES, counters.tolist(), strict=True))
        for counts in self.injectors:
            for kind in counts:
                counts[kind] = int(injected[FAULT_KINDS.index(kind)])

    def publish(self, counters: np.ndarray, injected: np.ndarray) -> None:
        """Write the counts into these rows if they changed since the last call."""
        now = (
            sum(self.counters.values()) if self.counters is not None else 0,
            sum(sum(counts.values()) for counts in self.injectors),
        )
        if now == self._last:
            return
        self._last = now
        if self.counters is not None:
            counters[:] = [self.counters[name] for name in COUNTER_NAMES]
        for counts in self.injectors:
            for kind, value in counts.items():
                injected[FAULT_KINDS.index(kind)] = value


class _Worker:
    """A worker's envs and its side of the protocol (module docstring)."""

    def __init__(self, conn: Connection, envs: list[gym.Env], recorder: PartRecorder | None, shared_fd: int) -> None:
        self.conn = conn
        self.shared_fd = shared_fd
        self.envs = envs
        self.recorder = recorder
        self.tallies = [EnvTally(env) for env in envs]
        self.arrays: SharedArrays | None = None
        self.lo = 0
        self.parent = os.getppid()

    def serve(self) -> None:
        """Answer messages until told to close or orphaned."""
        while True:
            if not self.conn.poll(PARENT_CHECK_S):
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
                    self._step()
                else:
                    self._command(pickle.loads(message))
            except BaseException as err:
                send_error(self.conn, err)
                continue
            self.conn.send_bytes(DONE)

    def _step(self) -> None:
        a, lo = self.arrays, self.lo
        hi = lo + len(self.envs)
        # A fresh copy, as the adapter's per-step array in one process: an env may keep the action it was given.
        actions = np.array(a.actions[lo:hi])
        for j, env in enumerate(self.envs):
            i = lo + j
            a.obs[i], a.rewards[i], a.terminated[i], a.truncated[i] = step_and_reset(env, actions[j])
            self.tallies[j].publish(a.counters[i], a.injected[i])

    def _command(self, command: tuple) -> None:
        if command[0] == "attach":
            _, layout, self.lo = command
            self.arrays = SharedArrays(layout, self.shared_fd)
            if self.recorder is not None:
                self.recorder.header = self.arrays.header
            for j, tally in enumerate(self.tallies):
                i = self.lo + j
                tally.load(self.arrays.counters[i], self.arrays.injected[i])
                self.arrays.armed[i] = tally.armed
        elif command[0] == "reset":
            for j, (env, seed) in enumerate(zip(self.envs, command[1], strict=True)):
                i = self.lo + j
                self.arrays.obs[i] = env.reset(seed=seed)[0]
                self.tallies[j].publish(self.arrays.counters[i], self.arrays.injected[i])
        else:
            raise ValueError(f"unknown worker command {command[0]!r}")

    def close(self) -> None:
        for env in self.envs:
            env.close()
        if self.arrays is not None:
            self.arrays.release()
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


def worker_main(
    conn: Connection,
    shared_fd: int,
    factory: EnvFactory,
    indices: list[int],
    part: PartSpec | None,
    cpus: list[int] | None,
) -> None:
    """The body of a worker process: build envs ``indices`` with ``factory``, then serve (module docstring).

    Args:
        conn: The worker's end of its pipe.
        shared_fd: The batch's shared file (:class:`SharedArrays`), mapped when the trainer says ``attach``.
        factory: Builds one env from its index and the worker's incident recorder (``None`` without one).
        indices: Env indices (as SafeStep records them) of this worker's envs.
        part: Where this worker writes incident records; ``None`` records nothing.
        cpus: Cores to run on (the rank's share under torchrun); ``None`` leaves the affinity alone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cpus:
        os.sched_setaffinity(0, cpus)
    recorder = PartRecorder(part) if part is not None else None
    envs: list[gym.Env] = []
    worker: _Worker | None = None
    try:
        for index in indices:
            envs.append(factory(index, recorder))
        worker = _Worker(conn, envs, recorder, shared_fd)
        conn.send_bytes(pickle.dumps(("ready", [EnvInfo.of(env) for env in envs])))
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
