"""Replay an incident in fresh envs of its task: the raw action, then the sanitised one and what follows it.

For a record with a simulator snapshot (``state.*`` arrays):

1. ``gymnasium.make(env_id)``, ``reset(seed=0)``, ``set_sim_state(snapshot)``; if the snapshot is ``sim_state_age``
   steps older than the faulty step, the recorded actions since (the history's rows before the last, the actions
   that reached the engine) are stepped first, so the world is in the exact state before the step;
2. the raw action goes to ``env.unwrapped.step`` directly, with no safety wrapper, and the result is classified
   (:func:`classify_outcome`): physics error raised, non-finite state, implausible state (the task's
   ``check_state``), non-finite observation or reward, or sound;
3. in a second fresh env (the first may be poisoned), the same pre-step state gets the sanitised action and then
   ``steps_after`` steps of the zero action (clamped into the bounds: "let go"), each classified; the first faulty
   one is reported.

A replay is impossible (and says why) for a fault during a reset, a record without a task id, snapshot or action,
a history too short to reach the step, a task id that is not registered (or names a module to import: never
made), a task that lacks the simulator protocol or takes actions of another shape, or a snapshot the task refuses
to restore.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.protocol import SimulatedEnv, is_simulated
from robo_safe_rl.bridge.safe_step import physics_error_types
from robo_safe_rl.diagnose.action import ActionFinding
from robo_safe_rl.diagnose.outcome import ReplayResult, StepOutcome, classify_outcome
from robo_safe_rl.diagnose.schema import task_id_problem
from robo_safe_rl.safety.finite import all_finite
from robo_safe_rl.safety.incident_kinds import IncidentKind
from robo_safe_rl.safety.sanitize import sanitize_action

logger = logging.getLogger(__name__)

#: Steps of the zero action after the sanitised one, by default.
DEFAULT_STEPS_AFTER = 50


def replay_blocker(record: dict[str, Any], arrays: dict[str, np.ndarray], finding: ActionFinding) -> str | None:
    """Why this record cannot be replayed, or ``None`` when it can (pure: checks the record only)."""
    if record.get("phase") != "step":
        return f"the fault happened during a {record.get('phase')!r} phase, not after an action"
    if finding.raw is None:
        return "the record holds no action"
    if not record.get("env_id"):
        return "the record names no task (env_id)"
    if not any(key.startswith("state.") for key in arrays):
        why = "the task does not implement the simulator protocol" if not record.get("simulated") else "none taken"
        return f"the record holds no simulator state ({why})"
    age = int(record.get("sim_state_age") or 0)
    history = arrays.get("history_actions")
    if age and (history is None or len(history) < age + 1):
        have = 0 if history is None else len(history)
        return f"the snapshot is {age} steps old but the history holds {have} actions (needs {age + 1})"
    return None


class _Task:
    """A fresh env of the task, restored to the pre-step state of a record."""

    def __init__(self, make_env: Callable[[str], gym.Env], env_id: str) -> None:
        self.env = make_env(env_id)
        self.task: Any = self.env.unwrapped
        if not is_simulated(self.task):
            self.env.close()
            raise _Impossible(f"task {env_id} does not implement the simulator protocol (get_sim_state, set_sim_state)")
        self.sim = cast(SimulatedEnv, self.task)
        self.errors = physics_error_types(self.task)
        self.env_id = env_id

    def check_action(self, action: np.ndarray) -> None:
        """Refuse an action the task's action space cannot take (a record of another task with the same id)."""
        shape = getattr(self.env.action_space, "shape", None)
        if shape is not None and action.shape != tuple(shape):
            self.close()
            raise _Impossible(
                f"the recorded action has shape {action.shape}, but task {self.env_id} takes actions of shape "
                f"{tuple(shape)}"
            )

    def restore(self, state: dict[str, np.ndarray], pre_actions: np.ndarray) -> tuple[np.ndarray, str | None]:
        """Reset, restore ``state``, step ``pre_actions``; return the observation and why the state is unsound."""
        self.env.reset(seed=0)
        try:
            obs = self._last_obs = self.sim.set_sim_state(state)
        except ValueError as err:
            raise _Impossible(f"the task refuses the recorded state: {err}") from err
        for k, action in enumerate(pre_actions):
            step = self.step(np.asarray(action))
            if step.faulty:
                return obs, f"replaying recorded action {k + 1} of {len(pre_actions)} gave {step.describe()}"
            obs = self._last_obs
        return obs, self.sim.check_state()

    def step(self, action: np.ndarray) -> StepOutcome:
        before: dict[str, np.ndarray] | None = None
        try:
            before = self.sim.get_sim_state()
            obs, reward, _, _, _ = self.task.step(action)
            self._last_obs = obs
            after = self.sim.get_sim_state()
            outcome, reason = classify_outcome(
                state=after, check_reason=self.sim.check_state(), obs=obs, reward=float(reward)
            )
        except self.errors as err:
            return StepOutcome(action, IncidentKind.physics_error, f"{type(err).__name__}: {err}", None, before, None)
        return StepOutcome(action, outcome, reason, float(reward), before, after)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()


class _Impossible(Exception):
    """Internal: the replay cannot run (the message says why)."""


def _make(env_id: str) -> gym.Env:
    # A record is data: an id with a module part would make gymnasium import that module (inputs refuse such
    # records; this keeps replay_incident safe for records that did not come through them).
    problem = task_id_problem(env_id)
    if problem is not None:
        raise _Impossible(f"cannot make task: {problem}")
    return gym.make(env_id, disable_env_checker=True)


def replay_incident(
    record: dict[str, Any],
    arrays: dict[str, np.ndarray],
    finding: ActionFinding,
    *,
    steps_after: int = DEFAULT_STEPS_AFTER,
    make_env: Callable[[str], gym.Env] = _make,
) -> ReplayResult:
    """Replay one incident (module docstring).

    Args:
        record: The JSON line.
        arrays: Its npz arrays.
        finding: Its action finding (raw action, bounds).
        steps_after: Zero-action steps after the sanitised action.
        make_env: Builds a fresh env from the task id (``gymnasium.make`` by default; the id must be registered).

    Returns:
        The result; ``possible=False`` with the reason when the replay cannot run.
    """
    why = replay_blocker(record, arrays, finding)
    if why is not None:
        return ReplayResult(possible=False, why_not=why)
    env_id = str(record["env_id"])
    state = {key.removeprefix("state."): value for key, value in arrays.items() if key.startswith("state.")}
    age = int(record.get("sim_state_age") or 0)
    history = arrays.get("history_actions")
    pre = history[len(history) - age - 1 : len(history) - 1] if age and history is not None else np.zeros((0,))
    # The action as the policy sent it, in its own dtype (a float64 1e300 must not become inf on the way).
    raw = np.asarray(arrays["raw_action"]) if "raw_action" in arrays else np.asarray(finding.raw, dtype=np.float32)
    result = ReplayResult(possible=True, env_id=env_id, snapshot_age=age, steps_after=steps_after)
    try:
        first = _Task(make_env, env_id)
        first.check_action(raw)
        try:
            obs, pre_reason = first.restore(state, pre)
            result.obs_deviation = _deviation(obs, arrays)
            result.pre_state_reason = pre_reason
            result.raw = first.step(raw)
        finally:
            first.close()
        second = _Task(make_env, env_id)
        try:
            second.restore(state, pre)
            result.sanitised = second.step(_sanitised(finding, raw))
            hold = _zero_action(finding, raw)
            for k in range(steps_after if not result.sanitised.faulty else 0):
                step = second.step(hold)
                if step.faulty:
                    result.after_fault = step
                    break
                result.sound_steps_after = k + 1
        finally:
            second.close()
    except _Impossible as err:
        return ReplayResult(possible=False, why_not=str(err), env_id=env_id)
    except gym.error.Error as err:
        return ReplayResult(
            possible=False,
            why_not=f"cannot make task {env_id}: {err} (tools/diagnose.py imports envs, which registers the RoboSafe "
            "tasks; another task's package must be imported first)",
            env_id=env_id,
        )
    return result


def _sanitised(finding: ActionFinding, raw: np.ndarray) -> np.ndarray:
    if finding.applied is not None and all_finite(finding.applied):
        return np.asarray(finding.applied, dtype=raw.dtype)
    low = finding.low if finding.low is not None else np.full(raw.shape, -np.inf)
    high = finding.high if finding.high is not None else np.full(raw.shape, np.inf)
    return sanitize_action(raw, low, high).values.astype(raw.dtype)


def _zero_action(finding: ActionFinding, raw: np.ndarray) -> np.ndarray:
    zero = np.zeros(raw.shape)
    if finding.low is not None and finding.high is not None:
        zero = np.clip(zero, finding.low, finding.high)
    return zero.astype(raw.dtype)


def _deviation(obs: np.ndarray, arrays: dict[str, np.ndarray]) -> float | None:
    history = arrays.get("history_obs")
    if history is None or not len(history):
        return None
    seen = np.asarray(history[-1], dtype=np.float64).reshape(-1)
    restored = np.asarray(obs, dtype=np.float64).reshape(-1)
    if seen.shape != restored.shape or not (all_finite(seen) and all_finite(restored)):
        return None
    return float(np.max(np.abs(seen - restored), initial=0.0))
