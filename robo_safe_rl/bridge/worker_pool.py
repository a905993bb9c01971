"""The processes behind :class:`~robo_safe_rl.bridge.workers.WorkerEnvBatch`: start, message, watch, stop.

A :class:`WorkerPool` knows processes, pipes and one block of shared memory; what the messages mean and what a
death does to the envs is the batch's business. This module also decides how many workers a rank gets and on which
cores.

A worker is a fresh interpreter (``python -c BOOTSTRAP``) that imports only the bridge and the task, given the
trainer's ``sys.path`` and then its arguments over its pipe. Not ``fork``: its child inherits torch's threads and
locks mid-flight. Not multiprocessing's ``spawn`` or ``forkserver`` either: both make every child import the
trainer's main script again (CPython 3.11's fork server never receives the main path it would preload), and
``tools/train.py`` imports torch, rsl-rl and Hydra: measured here, 6.5 s and about 300 MiB per worker and per
restart, against 0.5 s and 44 MiB for the bridge and the Ant alone.

Each worker runs in its own session, so a Ctrl-C in the terminal reaches the trainer only, which then closes its
workers. A worker's death shows at once: the kernel closes its end of the socket, and the trainer reads EOF.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from robo_safe_rl.bridge.worker_loop import CLOSE, wait_readable
from robo_safe_rl.bridge.worker_shared import Layout, SharedArrays

#: Seconds a worker gets to exit after ``close`` (or to be reaped after its death) before it is killed.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a worker gets at least to start (a fresh interpreter, its imports, its envs built and reset): on a loaded
#: machine that takes far longer than a step, and it is no hang.
START_TIMEOUT_S = 120.0

#: The worker's first lines: the trainer's import path, then :func:`~robo_safe_rl.bridge.worker_loop.bootstrap`, which
#: reads the arguments of the second message (their classes are importable only once the path is set).
BOOTSTRAP = (
    "import sys\n"
    "from multiprocessing.connection import Connection\n"
    "conn = Connection(int(sys.argv[1]))\n"
    "sys.path[:] = conn.recv()\n"
    "from robo_safe_rl.bridge.worker_loop import bootstrap\n"
    "bootstrap(conn)\n"
)

#: The workers step one env at a time: a thread pool of BLAS or OpenMP per worker would only take memory and cores.
_SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker process (set as the re-raised exception's cause)."""


@dataclass(frozen=True)
class Death:
    """How a worker process ended.

    Attributes:
        pid: Its process id.
        exitcode: Its exit status (negative: killed by that signal); ``None`` if it could not be reaped.
        signal: The signal's name (``"SIGKILL"``) when a signal ended it.
        hung_s: The timeout it exceeded when it was killed for not answering, else ``None``.
    """

    pid: int
    exitcode: int | None
    signal: str | None
    hung_s: float | None

    @classmethod
    def of(cls, process: subprocess.Popen, hung_s: float | None = None) -> Death:
        """Describe a process that has ended (``hung_s``: it was killed after that long without an answer)."""
        code = process.returncode
        name = None
        if code is not None and code < 0 and -code in signal.valid_signals():
            name = signal.Signals(-code).name
        return cls(process.pid, code, name, hung_s)

    @property
    def what(self) -> str:
        """A phrase for messages: ``"was killed by signal 9 (SIGKILL)"``."""
        if self.hung_s is not None:
            return f"did not answer within {self.hung_s:g} s and was killed"
        if self.signal is not None:
            return f"was killed by signal {-(self.exitcode or 0)} ({self.signal})"
        if self.exitcode is None:
            return "closed its pipe and could not be reaped"
        return f"exited with code {self.exitcode}"


@dataclass
class WorkerHandle:
    """One worker: its process, its pipe, the batch rows it hosts, its crash history."""

    rows: range
    process: subprocess.Popen
    conn: Connection
    crashes_in_a_row: int = 0
    restarts: int = 0
    #: Waits on the pipe: made once (``Connection.poll`` builds and registers a selector on every call).
    poller: select.poll = field(init=False)

    def __post_init__(self) -> None:
        self.poller = select.poll()
        self.poller.register(self.conn.fileno(), select.POLLIN)

    def release(self) -> None:
        """Close the trainer's end of the pipe."""
        self.conn.close()


@dataclass
class WorkerPool:
    """Worker processes by number, their pipes, and the shared memory of their batch.

    Args:
        timeout_s: Seconds a worker may take to answer before it is treated as dead and killed.
        spin_s: Seconds :meth:`collect` polls for a step's reply before it blocks (``0``: block at once; only for a
            trainer with a core to itself, :func:`~robo_safe_rl.bridge.worker_loop.wait_readable`).
    """

    timeout_s: float
    spin_s: float = 0.0
    handles: dict[int, WorkerHandle] = field(default_factory=dict)
    #: The shared file (:meth:`SharedArrays.create_file`), inherited by every worker.
    shared_fd: int = field(default_factory=SharedArrays.create_file)
    arrays: SharedArrays | None = None

    def map(self, layout: Layout) -> SharedArrays:
        """Size the shared file for ``layout`` and map it here (the workers map it when told ``attach``)."""
        os.ftruncate(self.shared_fd, layout.offsets()[1])
        self.arrays = SharedArrays(layout, self.shared_fd)
        return self.arrays

    def launch(self, k: int, rows: range, args: tuple) -> WorkerHandle:
        """Start worker ``k`` as ``worker_main(conn, shared_fd, *args)`` (``args`` must pickle)."""
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-c", BOOTSTRAP, str(theirs.fileno())],
                pass_fds=(theirs.fileno(), self.shared_fd),
                stdin=subprocess.DEVNULL,
                env={**os.environ, **_SINGLE_THREADED},
                start_new_session=True,
            )
        conn = Connection(ours.detach())
        old = self.handles.get(k)
        handle = WorkerHandle(rows, process, conn, old.crashes_in_a_row if old else 0, old.restarts if old else 0)
        self.handles[k] = handle
        self.send(k, pickle.dumps(list(sys.path)))
        self.send(k, pickle.dumps((self.shared_fd, *args)))
        return handle

    def send(self, k: int, payload: bytes) -> None:
        """Send one message; a dead worker's broken pipe is ignored here (:meth:`collect` reports the death)."""
        with contextlib.suppress(OSError):
            self.handles[k].conn.send_bytes(payload)

    def collect(self, ks: list[int], starting: bool = False) -> tuple[dict[int, bytes], dict[int, Death]]:
        """Wait for one reply from each worker in ``ks``, at most ``timeout_s`` in all (at least
        :data:`START_TIMEOUT_S` when ``starting``: the workers are being started, attached or reset).

        The workers run at the same time, so reading them in turn costs the slowest one's time, with one wait per
        worker (a wait on all of them at once, repeated as replies arrive, would cost the square of their number).

        Returns:
            The replies, and the workers that died (EOF on the pipe) or did not answer in time (then killed), with
            how they ended.
        """
        timeout = max(self.timeout_s, START_TIMEOUT_S) if starting else self.timeout_s
        deadline = time.monotonic() + timeout
        replies: dict[int, bytes] = {}
        dead: dict[int, Death] = {}
        spin_s = 0.0 if starting else self.spin_s
        for k in ks:
            handle = self.handles[k]
            try:
                if wait_readable(handle.poller, deadline - time.monotonic(), spin_s):
                    replies[k] = handle.conn.recv_bytes()
                    continue
                hung = True
            except (EOFError, OSError):
                hung = False
            dead[k] = self.kill(k, hung_s=timeout if hung else None)
        return replies, dead

    def kill(self, k: int, hung_s: float | None) -> Death:
        """Make sure worker ``k`` is gone (reaped, killed if needed) and say how it ended (``hung_s``: the time it
        did not answer in, when it is killed for that)."""
        handle = self.handles[k]
        if hung_s is not None:
            handle.process.kill()
        try:
            handle.process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # its pipe closed but it lives on: gone before a successor starts
            handle.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.process.wait(CLOSE_TIMEOUT_S)
        handle.release()
        return Death.of(handle.process, hung_s)

    def shutdown(self) -> None:
        """Ask every worker to close, kill those that do not within :data:`CLOSE_TIMEOUT_S`, free the shared
        memory. Idempotent; also run by a finaliser when the batch is dropped or the interpreter exits."""
        for k in self.handles:
            self.send(k, CLOSE)
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for handle in self.handles.values():
            try:
                handle.process.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                handle.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    handle.process.wait(CLOSE_TIMEOUT_S)
            handle.release()
        self.handles.clear()
        if self.arrays is not None:
            self.arrays.release()
            self.arrays = None
        if self.shared_fd >= 0:
            os.close(self.shared_fd)
            self.shared_fd = -1


def _find_sched_getcpu() -> Callable[[], int] | None:
    try:
        function = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):  # glibc and musl have it; Windows has no CDLL(None)
        return None
    function.argtypes, function.restype = [], ctypes.c_int
    return function


_SCHED_GETCPU = _find_sched_getcpu()


def current_cpu() -> int | None:
    """The core this thread runs on at this moment (the C library's ``sched_getcpu``: about a microsecond, no system
    call on Linux), or ``None`` where it is not available."""
    if _SCHED_GETCPU is None:
        return None
    cpu = _SCHED_GETCPU()
    return cpu if cpu >= 0 else None


def split_rows(num_envs: int, workers: int) -> list[range]:
    """Contiguous blocks of rows, as even as possible (the first ``num_envs % workers`` get one more)."""
    size, extra = divmod(num_envs, workers)
    blocks, at = [], 0
    for k in range(workers):
        n = size + (1 if k < extra else 0)
        blocks.append(range(at, at + n))
        at += n
    return blocks


def rank_cpus() -> tuple[list[int], bool]:
    """The cores this rank may use, and whether they are a share of the machine's.

    All of ``os.sched_getaffinity`` in a single process; under torchrun (``LOCAL_WORLD_SIZE`` > 1) the
    ``LOCAL_RANK``-th of as many equal shares (the rank's workers stay on it, so that the ranks' workers do not all
    compete for every core), one core at least (shared when there are more ranks than cores).
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world <= 1:
        return cpus, False
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    share = len(cpus) // local_world
    if share == 0:
        return [cpus[local_rank % len(cpus)]], True
    return cpus[local_rank * share : (local_rank + 1) * share], True


def pin_one_per_core(requested: bool, workers: int, cores: int, trainer_block: bool = False) -> bool:
    """Whether a rank's workers are pinned one per core (``task.pin_workers``): when asked, where the system can pin
    (Linux), and only when the processes that step envs (the workers, and the trainer with a block of its own) take
    every core of the rank; with fewer, every run started on the machine would pin its workers to the same first
    cores."""
    return requested and hasattr(os, "sched_setaffinity") and workers + trainer_block >= cores


#: Envs a worker hosts at least when their number is chosen automatically: a step's hand-over to a worker and back costs
#: about half of one Ant step (~100 us against ~200 us, measured on 2 cores), so with 4 envs a worker spends about 90%
#: of its step stepping physics; with 1 env, about 65%.
MIN_ENVS_PER_WORKER = 4


def resolve_num_workers(requested: int | None, num_envs: int, cores: int, trainer_block: bool = False) -> int:
    """Worker processes for ``num_envs`` envs: ``requested`` (at most one per env, one fewer with a trainer block), or
    with ``None`` one block per core of the rank, with :data:`MIN_ENVS_PER_WORKER` envs each at least, and none when
    that makes fewer than 2 blocks (one worker alone only adds a hand-over to the stepping, and on one core the learner
    and the envs take turns anyway). With ``trainer_block`` the trainer steps one of the blocks itself, so it takes one
    block, and one core, from the workers (2 cores: 1 worker)."""
    if requested is not None:
        return min(requested, num_envs - trainer_block)
    blocks = min(cores, num_envs // MIN_ENVS_PER_WORKER)
    return blocks - trainer_block if blocks >= 2 else 0
