"""What a replayed step did, and what a replay found: pure data and the classification of a step.

:mod:`robo_safe_rl.diagnose.replay` runs the envs; this module only describes and classifies their results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from robo_safe_rl.bridge.incidents import json_float, json_floats
from robo_safe_rl.safety.sanitize import nonfinite_state_keys


class Outcome(str, Enum):
    """What one replayed step did, most severe first (the incident kinds of a step, or ``sound``)."""

    physics_error = "physics_error"
    nonfinite_state = "nonfinite_state"
    implausible_state = "implausible_state"
    nonfinite_obs = "nonfinite_obs"
    nonfinite_reward = "nonfinite_reward"
    sound = "sound"


@dataclass(frozen=True)
class StepOutcome:
    """One replayed step.

    Attributes:
        action: The action applied. Shape: (A,).
        outcome: Its classification.
        reason: One line: the exception, the non-finite state arrays, the ``check_state`` reason, or ``None``.
        reward: The reward (``None`` when the step raised).
        state_before: The simulator state before the step.
        state_after: The simulator state after it (``None`` when the step or the query raised).
    """

    action: np.ndarray
    outcome: Outcome
    reason: str | None
    reward: float | None
    state_before: dict[str, np.ndarray] | None
    state_after: dict[str, np.ndarray] | None

    @property
    def faulty(self) -> bool:
        """Whether the step showed any fault."""
        return self.outcome is not Outcome.sound

    def describe(self) -> str:
        """``"nonfinite_state: non-finite state in base_pos, ..."`` or ``"sound (reward 0.91)"``."""
        if self.faulty:
            return f"{self.outcome.value}: {self.reason}"
        return f"sound (reward {self.reward:.4g})" if self.reward is not None else "sound"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "action": json_floats(self.action),
            "outcome": self.outcome.value,
            "reason": self.reason,
            "reward": None if self.reward is None else json_float(self.reward),
            "state_before": _state_json(self.state_before),
            "state_after": _state_json(self.state_after),
        }


@dataclass
class ReplayResult:
    """The replay of one incident (see the module docstring).

    Attributes:
        possible: Whether the replay could run; ``why_not`` says why not.
        why_not: The reason it could not.
        env_id: The task replayed.
        snapshot_age: Steps between the snapshot and the faulty step (recorded actions replayed first).
        obs_deviation: Max absolute difference between the observation after restoring (and replaying) and the one
            the policy saw (the history's last row); ``None`` when not comparable. The task restores to ~1e-6.
        pre_state_reason: Set when the state before the faulty step was already unsound (or broke while the
            recorded actions were replayed): then the action is not the cause.
        raw: The raw action's step.
        sanitised: The sanitised action's step (second env).
        steps_after: Zero-action steps asked for after the sanitised one.
        sound_steps_after: Of those, how many ran before a fault (all of them when none).
        after_fault: The first faulty one, else ``None``.
        script: Where the reproduction script was written, else ``None``.
    """

    possible: bool
    why_not: str | None = None
    env_id: str | None = None
    snapshot_age: int = 0
    obs_deviation: float | None = None
    pre_state_reason: str | None = None
    raw: StepOutcome | None = None
    sanitised: StepOutcome | None = None
    steps_after: int = 0
    sound_steps_after: int = 0
    after_fault: StepOutcome | None = None
    script: str | None = None

    @property
    def reproduced(self) -> bool:
        """Whether the raw action, from a sound pre-step state, produced a fault."""
        return self.raw is not None and self.raw.faulty and self.pre_state_reason is None

    @property
    def sanitised_sound(self) -> bool | None:
        """Whether the sanitised action and the steps after it stayed sound (``None`` when not run)."""
        if self.sanitised is None:
            return None
        return not self.sanitised.faulty and self.after_fault is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (schema in :mod:`robo_safe_rl.diagnose.report`)."""
        return {
            "possible": self.possible,
            "why_not": self.why_not,
            "env_id": self.env_id,
            "snapshot_age": self.snapshot_age,
            "obs_deviation": self.obs_deviation,
            "pre_state_reason": self.pre_state_reason,
            "reproduced": self.reproduced,
            "raw": None if self.raw is None else self.raw.to_dict(),
            "sanitised": None if self.sanitised is None else self.sanitised.to_dict(),
            "sanitised_sound": self.sanitised_sound,
            "steps_after": self.steps_after,
            "sound_steps_after": self.sound_steps_after,
            "after_fault": None if self.after_fault is None else self.after_fault.to_dict(),
            "script": self.script,
        }


def _state_json(state: dict[str, np.ndarray] | None) -> dict[str, Any] | None:
    return None if state is None else {k: json_floats(np.atleast_1d(v)) for k, v in state.items()}


def classify_outcome(
    *, state: dict[str, np.ndarray], check_reason: str | None, obs: np.ndarray, reward: float
) -> tuple[Outcome, str | None]:
    """Classify a completed step (the precedence of incident kinds).

    Args:
        state: The simulator state after the step.
        check_reason: The task's ``check_state()`` after the step.
        obs: The observation it returned.
        reward: The reward it returned.

    Returns:
        The outcome and its one-line reason (``None`` when sound).
    """
    bad_keys = nonfinite_state_keys(state)
    if bad_keys:
        return Outcome.nonfinite_state, f"non-finite state in {', '.join(bad_keys)}"
    if check_reason is not None:
        return Outcome.implausible_state, check_reason
    bad_obs = np.flatnonzero(~np.isfinite(np.asarray(obs, dtype=np.float64).reshape(-1)))
    if bad_obs.size:
        return Outcome.nonfinite_obs, f"non-finite observation at {[int(i) for i in bad_obs[:8]]}"
    if not math.isfinite(reward):
        return Outcome.nonfinite_reward, f"reward {reward}"
    return Outcome.sound, None
