"""The one vocabulary of incidents: the kinds SafeStep and the tensor guard record, the fire drill injects and
diagnose classifies, with their counters and their precedence.

A step can show several kinds at once; they are listed in the order of :class:`IncidentKind` (most severe first),
and the first is the record's primary ``kind``.
"""

from __future__ import annotations

from enum import Enum


class IncidentKind(str, Enum):
    """What went wrong in one env step, most severe first. The values are the ``kind`` strings of incident records.

    Each value equals its name, so a kind compares and hashes like its record string (``"physics_error" in
    REBUILD_KINDS``).
    """

    nonfinite_action = "nonfinite_action"
    """The action had a NaN or Inf component (sanitised before it reached the env)."""
    physics_error = "physics_error"
    """The physics engine raised (``pybullet.error``, a dead client, the task's own physics-error type)."""
    nonfinite_state = "nonfinite_state"
    """The simulator state (``get_sim_state``) held a NaN or Inf after the step."""
    implausible_state = "implausible_state"
    """The state was finite but outside the task's limits (``check_state`` gave a reason)."""
    nonfinite_obs = "nonfinite_obs"
    """The observation held a NaN or Inf."""
    nonfinite_reward = "nonfinite_reward"
    """The reward was NaN or Inf."""
    implausible_reward = "implausible_reward"
    """The reward was finite but beyond the task's plausible bound (``reward_bound``, ``safety.step.reward_bound``)."""
    worker_crash = "worker_crash"
    """The worker process hosting the env died or hung: one record per env it hosted, written by the trainer (its
    counter, ``worker_crashes``, counts the deaths)."""


#: The counter (``Safety/<name>`` in TensorBoard, ``summary.json``'s ``safety``) that counts each kind of incident.
COUNTER_OF_KIND: dict[IncidentKind, str] = {
    IncidentKind.nonfinite_action: "nonfinite_actions",
    IncidentKind.physics_error: "physics_errors",
    IncidentKind.nonfinite_state: "nonfinite_states",
    IncidentKind.implausible_state: "implausible_states",
    IncidentKind.nonfinite_obs: "nonfinite_obs",
    IncidentKind.nonfinite_reward: "nonfinite_rewards",
    IncidentKind.implausible_reward: "implausible_rewards",
    IncidentKind.worker_crash: "worker_crashes",  # per worker death, counted by the env workers, not SafeStep
}

#: Kinds in which the simulated state itself went wrong (a blow-up), as opposed to what the env returned.
BLOWUP_KINDS: frozenset[IncidentKind] = frozenset({IncidentKind.nonfinite_state, IncidentKind.implausible_state})

#: Kinds of incident after which the simulation itself may be poisoned: recovery rebuilds it (a NaN that reached
#: PyBullet survives in-place resets and ``restoreState``; only a fresh world recovers).
REBUILD_KINDS: frozenset[IncidentKind] = BLOWUP_KINDS | {IncidentKind.physics_error}

#: The incident kind each fire-drill fault (``faults.env.<name>``) produces at SafeStep. A blow-up so large that the
#: engine's numbers overflow would show as ``nonfinite_state`` instead; the default scale of 10 stays finite.
KIND_OF_FAULT: dict[str, IncidentKind] = {
    "action_nonfinite": IncidentKind.nonfinite_action,
    "obs_nonfinite": IncidentKind.nonfinite_obs,
    "reward_nonfinite": IncidentKind.nonfinite_reward,
    "physics_error": IncidentKind.physics_error,
    "state_blowup": IncidentKind.implausible_state,
}


def classify_step(
    *,
    obs_finite: bool,
    reward_finite: bool,
    state_finite: bool | None = None,
    state_reason: str | None = None,
    reward_plausible: bool = True,
) -> list[IncidentKind]:
    """The incident kinds one completed env step shows, most severe first (empty for a clean step).

    Args:
        obs_finite: Whether every element of the observation is finite.
        reward_finite: Whether the reward is finite.
        state_finite: Whether every simulator state array is finite; ``None`` when the env exposes no state.
        state_reason: The task's ``check_state()`` reason (``None`` when plausible or not checked). A finite state
            with a reason is implausible; with a non-finite state the reason is subsumed by ``nonfinite_state``.
        reward_plausible: Whether a finite reward lies within the task's bound (ignored for a non-finite one).

    Returns:
        The kinds, in the order of :class:`IncidentKind`.
    """
    kinds: list[IncidentKind] = []
    if state_finite is False:
        kinds.append(IncidentKind.nonfinite_state)
    elif state_reason is not None:
        kinds.append(IncidentKind.implausible_state)
    if not obs_finite:
        kinds.append(IncidentKind.nonfinite_obs)
    if not reward_finite:
        kinds.append(IncidentKind.nonfinite_reward)
    elif not reward_plausible:
        kinds.append(IncidentKind.implausible_reward)
    return kinds


def needs_rebuild(kinds: list[IncidentKind]) -> bool:
    """Whether recovering from an incident of these kinds needs a new simulation (not only a reset)."""
    return any(kind in REBUILD_KINDS for kind in kinds)
