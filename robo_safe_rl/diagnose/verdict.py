"""One verdict line per group of incidents: the cause in words, with the evidence that supports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from robo_safe_rl.diagnose.attribution import Cause
from robo_safe_rl.diagnose.evidence import CheckpointFinding

if TYPE_CHECKING:
    from robo_safe_rl.diagnose.report import Group


def verdict_line(group: Group) -> str:
    """One line per cause, naming the evidence: the checkpoint and the first training event for a policy, the
    observation for an input fault, the excess and the replay for an extreme action, the reason otherwise; and, when
    the run's fire drill injects incidents of this kind, that setting."""
    drill = group.first.drill
    if drill is None:
        return _verdict(group)
    checkpoints = group.checkpoints
    if group.cause is Cause.nonfinite_policy_output and all(not c.layers for c in checkpoints):
        clean = f"; {_clean(checkpoints)}" if checkpoints else ""
        return f"non-finite actions from a finite observation, injected by the run's fire drill ({drill}){clean}"
    return f"{_verdict(group)}; the run's fire drill injects these ({drill}): expected"


def _clean(checkpoints: list[CheckpointFinding]) -> str:
    if len(checkpoints) == 1:
        return checkpoints[0].describe()
    return f"{', '.join(c.path.name for c in checkpoints)} are clean"


def _verdict(group: Group) -> str:
    first = group.first
    ckpt, events = first.checkpoint, first.events
    event_text = "" if events is None else f"; {events.describe()}"
    cause = group.cause
    if cause is Cause.nonfinite_policy_output:
        if ckpt is None:
            return (
                f"bad actions from the policy: {first.finding.summary()}; no checkpoint at or before iteration "
                f"{first.incident.iteration} to inspect (pass --checkpoint){event_text}"
            )
        if ckpt.layers:
            return f"bad actions from a corrupted policy: {ckpt.describe()}{event_text}"
        return (
            f"non-finite policy output from a finite observation, yet {_clean(group.checkpoints)}: the weights went "
            f"bad after saving, or the network overflowed{event_text}"
        )
    if cause is Cause.nonfinite_observation:
        return (
            f"bad actions from non-finite observations: {first.explanation}; look at the env and the observation "
            "pipeline, not the policy"
        )
    if cause is Cause.extreme_action:
        ckpt_text = "" if ckpt is None else f"; {_clean(group.checkpoints)}"
        return f"finite but extreme action: {first.explanation}{ckpt_text}"
    if cause is Cause.legal_action_blowup:
        replay = None if group.replayed is None else group.replayed.replay
        confirmed = " (the replay reproduces it)" if replay is not None and replay.reproduced else ""
        return (
            f"finite action, physics blow-up: {first.incident.record.get('reason')}{confirmed}; the raw action is "
            "within limits: suspect the model or the limits"
        )
    return f"env/engine fault, not the action: {first.explanation}"
