"""What a batch of envs shares with its worker processes: the layout of one shared file, and the counters in it.

One anonymous file holds, per env (row), the action, the step's observation, reward and terminated / truncated
flags, and the env's cumulative SafeStep counters and injected-fault counts; a header holds the training iteration
and the global step count that incident records carry. The trainer and each worker map it (:class:`SharedArrays`);
the pipe only carries one byte per step.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector, sum_injected, wrapper_chain
from robo_safe_rl.bridge.safe_step import COUNTER_NAMES, find_safe_step
from robo_safe_rl.safety.incident_kinds import KIND_OF_FAULT

#: Columns of the ``injected`` and ``armed`` arrays: every kind an env-side injector can count.
FAULT_KINDS: tuple[str, ...] = tuple(KIND_OF_FAULT)
#: Slots of the header: training iteration and global env-step count, for incident records written by workers.
HEADER_ITERATION, HEADER_GLOBAL_STEP = 0, 1


@dataclass(frozen=True)
class Layout:
    """Shapes of the arrays a batch shares with its workers (one block of shared memory, rows = envs)."""

    num_envs: int
    num_obs: int
    num_actions: int
    num_terms: int = 0
    num_metrics: int = 0

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
            ("terms", np.float64, (n, self.num_terms)),  # the step's reward terms (EnvInfo.reward_terms)
            ("metrics", np.float64, (n, self.num_metrics)),  # the step's metrics (EnvInfo.metric_names)
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
    terms: np.ndarray
    metrics: np.ndarray

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
