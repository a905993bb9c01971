"""Where a bad action came from: the attribution rules, as pure functions of a record, its action and its replay.

Rules, applied in this order to one incident:

1. **No action** (a fault during a reset, or a record without an action), or the env's worker process died
   (``worker_crash``: SafeStep had made the action legal before the engine saw it): ``env_fault``.
2. **Non-finite action**: if the observation the policy acted on (the history's last row) held a NaN or Inf,
   ``nonfinite_observation`` ("non-finite observation into the policy"); otherwise ``nonfinite_policy_output`` (the
   policy turned a finite observation into a non-finite action: suspect its weights, see the checkpoint).
3. **Finite action outside the bounds**: ``extreme_action`` (the report says by how much, and what the replay
   shows).
4. **Legal action, state blow-up** (``nonfinite_state`` or ``implausible_state``): ``legal_action_blowup``
   ("suspect the model or the limits").
5. **Legal action, any other fault** (physics error, non-finite observation or reward from the env): ``env_fault``.

For rules 3 and 4 the replay has the last word: when the state before the step was already unsound, or the raw
action, applied to the recorded state, leaves it sound (the fault came from outside the recorded actions: the
engine, an injected fault, a state the record does not capture), the incident is an ``env_fault`` whose
explanation still names the extreme action. Without a replay (``--replay none``, or none possible) rules 3 and 4
stand.

Causes 2 to 4 come from actions: a diagnosis that finds any of them exits 1; ``env_fault`` alone exits 0.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from robo_safe_rl.diagnose.action import ActionFinding
from robo_safe_rl.diagnose.outcome import ReplayResult, StepOutcome
from robo_safe_rl.safety.incident_kinds import BLOWUP_KINDS


class Cause(str, Enum):
    """The attribution of one incident (module docstring)."""

    nonfinite_observation = "nonfinite_observation"
    nonfinite_policy_output = "nonfinite_policy_output"
    extreme_action = "extreme_action"
    legal_action_blowup = "legal_action_blowup"
    env_fault = "env_fault"


#: How each cause reads in a report.
CAUSE_TITLES: dict[Cause, str] = {
    Cause.nonfinite_observation: "non-finite observation into the policy",
    Cause.nonfinite_policy_output: "non-finite policy output",
    Cause.extreme_action: "finite but extreme action",
    Cause.legal_action_blowup: "physics blow-up with a legal action",
    Cause.env_fault: "env/engine fault, not the action",
}

#: Causes that come from actions (a diagnosis that finds one exits 1).
ACTION_CAUSES: frozenset[Cause] = frozenset(
    {Cause.nonfinite_observation, Cause.nonfinite_policy_output, Cause.extreme_action, Cause.legal_action_blowup}
)

#: Causes for which the policy checkpoint and the training's safety events are consulted.
POLICY_CAUSES: frozenset[Cause] = frozenset(
    {Cause.nonfinite_policy_output, Cause.extreme_action, Cause.legal_action_blowup}
)

#: A finite reward beyond this magnitude is reported with a replay (Ant earns 1 to 3 per step).
HUGE_REWARD = 1.0e6


def attribute(record: dict[str, Any], finding: ActionFinding, replay: ReplayResult | None = None) -> tuple[Cause, str]:
    """Attribute one incident (rules in the module docstring).

    Args:
        record: The JSON line (``kind``, ``kinds``, ``phase``, ``reason``).
        finding: Its action finding.
        replay: Its replay, when one ran: it can show that a finite action was not the cause.

    Returns:
        The cause and a one-line explanation.
    """
    reason = str(record.get("reason") or record.get("kind"))
    if record.get("phase") != "step" or finding.raw is None:
        where = f"during a {record.get('phase')}" if record.get("phase") != "step" else "with no action recorded"
        return Cause.env_fault, f"{reason} ({where}: no action involved)"
    if record.get("kind") == "worker_crash":
        return Cause.env_fault, f"{reason} (the process died: not attributed to the action it was stepping)"
    if finding.nonfinite:
        if finding.obs_in_finite is False:
            shown = ", ".join(finding.obs_in_nonfinite[:6])
            return Cause.nonfinite_observation, (
                f"the observation the policy acted on was non-finite at {shown}; its action: {finding.summary()}"
            )
        seen = "observation not recorded" if finding.obs_in_finite is None else "the observation going in was finite"
        return Cause.nonfinite_policy_output, f"{finding.summary()} ({seen})"
    raw = replay.raw if replay is not None and replay.possible else None
    if raw is not None and replay is not None and replay.pre_state_reason is not None:
        return Cause.env_fault, f"{reason}; the state before the action was already unsound: {replay.pre_state_reason}"
    if finding.out_of_range:
        if raw is not None and not raw.faulty:
            return Cause.env_fault, f"{reason}; the action was extreme ({finding.summary()}) but {_harmless(raw)}"
        return Cause.extreme_action, f"{finding.summary()}; {_replay_verdict(record, replay)}"
    kinds = set(record.get("kinds") or [record.get("kind")])
    if kinds & BLOWUP_KINDS:
        if raw is not None and not raw.faulty:
            return Cause.env_fault, f"{reason}; the action was within limits and {_harmless(raw)}"
        confirmed = " (reproduced by the replay)" if replay is not None and replay.reproduced else ""
        return Cause.legal_action_blowup, f"{reason}; the action was within limits{confirmed}"
    return Cause.env_fault, f"{reason}; the action was within limits"


def _harmless(raw: StepOutcome) -> str:
    """The replay showed a sound step: the fault came from outside the recorded actions."""
    reward = raw.reward
    # A finite reward this large is still worth saying: a value function fed with it is as good as poisoned.
    huge = f" (though its reward is {reward:.3g})" if reward is not None and abs(reward) > HUGE_REWARD else ""
    return (
        f"replayed from the recorded state it leaves the state sound{huge}: the fault came from outside the recorded "
        "actions (the engine, an injected fault, or a state the record does not capture)"
    )


def _replay_verdict(record: dict[str, Any], replay: ReplayResult | None) -> str:
    """What the replay says about a finite out-of-range action that it did not clear."""
    if replay is None:
        return "not replayed"
    if not replay.possible or replay.raw is None:
        return f"no replay: {replay.why_not}"
    outcome = replay.raw.label
    if replay.sanitised_sound:
        return (
            f"the raw action reproduces a {outcome} and the sanitised one does not: it caused the {record.get('kind')}"
        )
    return f"the raw action reproduces a {outcome}, and so does the sanitised one"
