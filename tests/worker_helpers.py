"""Helpers of the env-worker tests (tests/bridge, tests/training): envs that take down or stall the process they run
in (imported by the workers through the gymnasium entry points ``worker_helpers:<Class>``, found on the test's
import path), and a look at processes through ``/proc``.

A point mass in the plane (the conftest's fault env in miniature), whose step at ``fault_at`` (1-based, counted over
the env's life) does what a broken physics engine does to its process:

- :class:`AbortingEnv`: ``os.abort()``, as PyBullet aborts on some bad requests (SIGABRT, no Python exception);
- :class:`HangingEnv`: sleeps ``hang_s`` seconds, as a deadlocked engine would;
- :class:`BuggyEnv`: raises ``KeyError``, a bug in the task, which must reach the trainer as it would in one process.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


class PointMass(gym.Env[np.ndarray, np.ndarray]):
    """State (pos (2,), vel (2,)); action (2,) in [-1, 1] accelerates it; observation = state; reward = -|pos|^2."""

    def __init__(self, fault_at: int = 0) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.fault_at = fault_at
        self.steps = 0
        self.state = np.zeros(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = np.concatenate([self.np_random.uniform(-0.1, 0.1, 2), np.zeros(2)])
        return self.state.astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps == self.fault_at:
            self.fault()
        self.state[2:] += 0.1 * np.clip(action, -1.0, 1.0)
        self.state[:2] += 0.1 * self.state[2:]
        return self.state.astype(np.float32), -float(self.state[:2] @ self.state[:2]), False, False, {}

    def fault(self) -> None:
        """What goes wrong at step ``fault_at`` (nothing here)."""


class AbortingEnv(PointMass):
    def fault(self) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the abort, without a core file in the working directory
        os.abort()


class HangingEnv(PointMass):
    def __init__(self, fault_at: int = 0, hang_s: float = 3600.0) -> None:
        super().__init__(fault_at)
        self.hang_s = hang_s

    def fault(self) -> None:
        time.sleep(self.hang_s)


class BuggyEnv(PointMass):
    def fault(self) -> None:
        raise KeyError("a bug in the task")


class ClockedEnv(PointMass):
    """A point mass with a step clock (``common_step_counter``, the attribute a curriculum task keeps: the A1's),
    shown as the first entry of its observation."""

    def __init__(self, fault_at: int = 0) -> None:
        super().__init__(fault_at)
        self.common_step_counter = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        obs[0] = self.common_step_counter
        return obs, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.common_step_counter += 1
        obs, reward, terminated, truncated, info = super().step(action)
        obs[0] = self.common_step_counter
        return obs, reward, terminated, truncated, info


class MeteredEnv(PointMass):
    """A point mass that reports two metrics per step in ``info["metrics"]`` (the A1's tracking errors in
    miniature): the step's number in its episode and its speed, listed in ``metric_names`` in the other order than the
    info's mapping holds them."""

    metric_names = ("episode_step", "speed")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self.episode_steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self.episode_steps += 1
        info["metrics"] = {"speed": float(np.hypot(*self.state[2:])), "episode_step": float(self.episode_steps)}
        return obs, reward, terminated, truncated, info


def spec(name: str, **kwargs: Any) -> gym.envs.registration.EnvSpec:
    """An unregistered spec of one of these envs (``name``: the class), with a time limit of 50 steps."""
    return gym.envs.registration.EnvSpec(
        id=f"WorkerTest/{name}-v0", entry_point=f"worker_helpers:{name}", max_episode_steps=50, kwargs=kwargs
    )


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def env_workers(parent: int | None = None) -> list[int]:
    """The live env-worker processes (of ``parent`` only, when given), found by their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        mine = parent is None or int(fields[1]) == parent
        if b"robo_safe_rl.bridge.worker_loop" in cmdline and fields[0] != "Z" and mine:
            found.append(int(entry.name))
    return sorted(found)


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    """Poll ``condition()`` every 50 ms until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
