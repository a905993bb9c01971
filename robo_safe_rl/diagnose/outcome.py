"""What a replayed step did, and what a replay found: pure data and the classification of a step.

:mod:`robo_safe_rl.diagnose.replay` runs the envs; this module only describes and classifies their results.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from robo_safe_rl.safety.finite import json_fields, nonfinite_state_keys
from robo_safe_rl.safety.incident_kinds import IncidentKind, classify_step

#: The ``outcome`` of a step that showed no incident kind, in reports (not an incident kind itself).
SOUND = "sound"


@dataclass(frozen=True)
class StepOutcome:
    """One replayed step.

    Attributes:
        action: The action applied. Shape: (A,).
        outcome: The step's primary incident kind; ``None`` for a sound step.
        reason: One line: the exception, the non-finite state arrays, the ``check_state`` reason, or ``None``.
        reward: The reward (``None`` when the step raised).
        state_before: The simulator state before the step.
        state_after: The simulator state after it (``None`` when the step or the query raised).
    """

    action: np.ndarray
    outcome: IncidentKind | None
    reason: str | None
    reward: float | None
    state_before: dict[str, np.ndarray] | None
    state_after: dict[str, np.ndarray] | None

    @property
    def faulty(self) -> bool:
        """Whether the step showed any fault."""
        return self.outcome is not None

    @property
    def label(self) -> str:
        """The outcome as reports name it: the incident kind, or ``"sound"``."""
        return SOUND if self.outcome is None else self.outcome.value

    def describe(self) -> str:
        """``"nonfinite_state: non-finite state in base_pos, ..."`` or ``"sound (reward 0.91)"``."""
        if self.faulty:
            return f"{self.label}: {self.reason}"
        return f"{SOUND} (reward {self.reward:.4g})" if self.reward is not None else SOUND

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (state arrays as flat lists)."""
        return {**asdict(self, dict_factory=json_fields), "outcome": self.label}


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
        steps = {"raw": self.raw, "sanitised": self.sanitised, "after_fault": self.after_fault}
        return {
            **asdict(self, dict_factory=json_fields),
            **{key: None if step is None else step.to_dict() for key, step in steps.items()},
            "reproduced": self.reproduced,
            "sanitised_sound": self.sanitised_sound,
        }


def classify_outcome(
    *, state: dict[str, np.ndarray], check_reason: str | None, obs: np.ndarray, reward: float
) -> tuple[IncidentKind | None, str | None]:
    """Classify a completed step as SafeStep does (:func:`~robo_safe_rl.safety.incident_kinds.classify_step`).

    Args:
        state: The simulator state after the step.
        check_reason: The task's ``check_state()`` after the step.
        obs: The observation it returned.
        reward: The reward it returned.

    Returns:
        The primary incident kind and its one-line reason; ``(None, None)`` when sound.
    """
    bad_keys = nonfinite_state_keys(state)
    bad_obs = np.flatnonzero(~np.isfinite(np.asarray(obs, dtype=np.float64).reshape(-1)))
    kinds = classify_step(
        obs_finite=not bad_obs.size,
        reward_finite=math.isfinite(reward),
        state_finite=not bad_keys,
        state_reason=check_reason,
    )
    if not kinds:
        return None, None
    reasons = {
        IncidentKind.nonfinite_state: f"non-finite state in {', '.join(bad_keys)}",
        IncidentKind.implausible_state: check_reason,
        IncidentKind.nonfinite_obs: f"non-finite observation at {[int(i) for i in bad_obs[:8]]}",
        IncidentKind.nonfinite_reward: f"reward {reward}",
    }
    return kinds[0], reasons[kinds[0]]
