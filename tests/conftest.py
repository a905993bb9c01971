"""Shared fixtures: a tiny fault-injecting env, a run directory, an incident recorder, the Ant task id, and commands
run on a pseudo-terminal (``on_terminal``).

The fault env (:class:`FaultEnv`, built through the ``make_fault_env`` fixture) is a point mass in the plane whose
step can be told to go wrong at given steps, in the ways a physics engine goes wrong:

- ``"nan_obs"``, ``"inf_obs"``: one observation element is NaN / +Inf (the state stays fine);
- ``"nan_reward"``, ``"inf_reward"``: the reward is NaN / +Inf; ``"huge_reward"``: it is 1e30 (finite);
- ``"physics_error"``: the step raises the engine's error (``FaultEngineError`` for the simulated variant, as
  ``pybullet.error`` would; :class:`~robo_safe_rl.errors.PhysicsError` for the plain one);
- ``"nan_state"``: the state is NaN after the step, as after a NaN torque;
- ``"bug"``: the step raises ``KeyError`` (a programming error, which no guard may swallow).

Like PyBullet, the env does not reject a non-finite action: the state turns NaN and the world is *poisoned*: a
reset puts a finite state back, but every later step turns NaN again until ``rebuild_simulation()``. With
``simulated=True`` it implements the simulator protocol (:mod:`robo_safe_rl.bridge.protocol`) with a speed limit of
10 (``check_state``), ``break_simulation`` (every call raises until a rebuild) and ``perturb_state``.
"""

from __future__ import annotations

import math
import os
import pty
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from robo_safe_rl.bridge.incidents import IncidentRecorder
from robo_safe_rl.errors import PhysicsError

FaultSpec = dict[int, "str | list[str]"] | Callable[[int, np.ndarray], "list[str]"]

SPEED_LIMIT = 10.0
DT = 0.1


class FaultEngineError(RuntimeError):
    """The fault env's physics-engine error (the role of ``pybullet.error``)."""


class FaultEnv(gym.Env[np.ndarray, np.ndarray]):
    """A point mass: state (pos (2,), vel (2,)); action (2,) in [-1, 1] accelerates it. Observation = state.

    Args:
        faults: Faults per env step (1-based, counted over the env's life, resets included) as ``{step: kind or
            [kinds]}``, or a function ``(step, action) -> [kinds]``.
        obs_dtype: Observation dtype.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium's class attribute)

    def __init__(self, faults: FaultSpec | None = None, obs_dtype: type = np.float32) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), obs_dtype)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.faults = faults or {}
        self.state = np.zeros(4)
        self.poisoned = False
        self.alive = True
        self.steps = 0
        self.resets = 0
        self.actions_seen: list[np.ndarray] = []

    def _faults_at(self, step: int, action: np.ndarray) -> list[str]:
        if callable(self.faults):
            return list(self.faults(step, action))
        kinds = self.faults.get(step, [])
        return [kinds] if isinstance(kinds, str) else list(kinds)

    def _engine_error(self) -> BaseException:
        return PhysicsError("fault env: physics engine failed")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if not self.alive:
            raise self._engine_error()
        self.resets += 1
        self.state = np.zeros(4)
        self.state[:2] = self.np_random.uniform(-0.1, 0.1, 2)
        return self.state.astype(self.observation_space.dtype), {"resets": self.resets}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.alive:
            raise self._engine_error()
        self.steps += 1
        a = np.asarray(action, dtype=np.float64)
        self.actions_seen.append(a.copy())
        faults = self._faults_at(self.steps, a)
        if "bug" in faults:
            raise KeyError("fault env: a bug in the task")
        if "physics_error" in faults:
            raise self._engine_error()
        if not np.isfinite(a).all():
            self.poisoned = True
        self.state[2:] += DT * a
        self.state[:2] += DT * self.state[2:]
        if self.poisoned or "nan_state" in faults:
            self.poisoned = True
            self.state[:] = np.nan
        obs = self.state.astype(self.observation_space.dtype)
        reward = 1.0 - 0.01 * float(np.dot(self.state[:2], self.state[:2]))
        if "nan_obs" in faults:
            obs[1] = np.nan
        if "inf_obs" in faults:
            obs[3] = np.inf
        if "nan_reward" in faults:
            reward = math.nan
        if "inf_reward" in faults:
            reward = math.inf
        if "huge_reward" in faults:
            reward = 1.0e30
        return obs, reward, False, False, {"step": self.steps}


class SimFaultEnv(FaultEnv):
    """:class:`FaultEnv` with the simulator protocol: rebuilds, state records, a speed limit, fault hooks."""

    physics_error_types: tuple[type[BaseException], ...] = (FaultEngineError,)

    def __init__(self, faults: FaultSpec | None = None, obs_dtype: type = np.float32) -> None:
        super().__init__(faults, obs_dtype)
        self.action_names = ["thrust_x", "thrust_y"]
        self.rebuilds = 0

    def _engine_error(self) -> BaseException:
        return FaultEngineError("Not connected to physics server.")

    def rebuild_simulation(self) -> None:
        self.rebuilds += 1
        self.alive = True
        self.poisoned = False
        self.state = np.zeros(4)

    def get_sim_state(self) -> dict[str, np.ndarray]:
        if not self.alive:
            raise self._engine_error()
        return {"pos": self.state[:2].copy(), "vel": self.state[2:].copy()}

    def set_sim_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        self.state = np.concatenate([state["pos"], state["vel"]]).astype(np.float64)
        return self.state.astype(self.observation_space.dtype)

    def check_state(self) -> str | None:
        if not self.alive:
            raise self._engine_error()
        if not np.isfinite(self.state).all():
            return "non-finite state"
        speed = float(np.hypot(*self.state[2:]))
        return None if speed <= SPEED_LIMIT else f"base speed {speed:.4g} m/s exceeds the limit {SPEED_LIMIT:g} m/s"

    def break_simulation(self) -> None:
        self.alive = False

    def perturb_state(self, scale: float) -> None:
        self.state[2:] = (scale * SPEED_LIMIT, 0.0)


@pytest.fixture
def make_fault_env() -> Callable[..., gym.Env]:
    """Factory: ``make_fault_env(faults=None, simulated=True, max_episode_steps=None, obs_dtype=np.float32)``.

    Returns the raw env (``simulated`` picks :class:`SimFaultEnv`), wrapped in ``TimeLimit`` when
    ``max_episode_steps`` is given.
    """

    def make(
        faults: FaultSpec | None = None,
        *,
        simulated: bool = True,
        max_episode_steps: int | None = None,
        obs_dtype: type = np.float32,
    ) -> gym.Env:
        env: gym.Env = (SimFaultEnv if simulated else FaultEnv)(faults, obs_dtype)
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps)
        return env

    return make


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """An empty run directory."""
    path = tmp_path / "run"
    path.mkdir()
    return path


@pytest.fixture
def recorder(run_dir: Path) -> IncidentRecorder:
    """An incident recorder writing into ``run_dir/incidents``."""
    return IncidentRecorder(run_dir / "incidents")


@pytest.fixture(scope="session")
def ant_env_id() -> Iterator[str]:
    """The id of the PyBullet Ant task (importing ``envs`` registers it)."""
    import robosafe_tasks  # noqa: F401  (registers the ids)

    yield "RoboSafe/Ant-v0"


@dataclass
class TerminalRun:
    """A command run with its stderr on a pseudo-terminal: exit code, stdout (a pipe) and what the terminal got."""

    returncode: int
    stdout: str
    terminal: str


def run_on_terminal(command: list[str], cwd: Path, timeout: float = 300) -> TerminalRun:
    """Run ``command`` with stderr on a new pseudo-terminal (as on a user's screen) and stdout on a pipe."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    env.pop("FORCE_COLOR", None)
    with subprocess.Popen(
        command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env
    ) as p:
        os.close(slave)
        # The terminal must be read while the command runs: a full pty buffer would block its writes.
        chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(master, chunks), daemon=True)
        reader.start()
        stdout = p.stdout.read() if p.stdout is not None else b""
        p.wait(timeout=timeout)
        reader.join(timeout=10)
    os.close(master)
    return TerminalRun(p.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace"))


def _drain(fd: int, chunks: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO once the last writer has closed the terminal
            return
        if not data:
            return
        chunks.append(data)


@pytest.fixture
def on_terminal() -> Callable[..., TerminalRun]:
    """``on_terminal(command, cwd)``: :func:`run_on_terminal`."""
    return run_on_terminal
