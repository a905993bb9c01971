"""Evidence from the run around an incident: the policy checkpoint of its iteration and the training's safety events.

- Checkpoint: ``--checkpoint`` when given, else the run directory's newest checkpoint of an iteration ``<= i``;
  inspected once per file with the checkpoint inspector (non-finite tensors, actor layers first).
- Events: the run's safety events (written by the runner: ``rollback``, ``recovery_failed``,
  ``checkpoint_refused``, ``grad_guard``; read by :meth:`~robo_safe_rl.rundir.RunDir.read_events`). For an incident
  at iteration ``i``: the first and the latest trouble event (``grad_guard``, ``rollback``, ``recovery_failed``) with
  ``iteration <= i``, their count, and the checkpoints refused up to ``i``.
- Fire drill: the run's resolved configuration says which faults a drill injected (``faults.env.<fault> > 0``);
  incidents of those kinds may be injected on purpose, and the verdicts say so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robo_safe_rl.checkpoint.report import Status, inspect_file
from robo_safe_rl.checkpoint.stats import Part
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.rundir import checkpoint_iteration
from robo_safe_rl.safety.grad_guard import COUNTER_KEYS
from robo_safe_rl.safety.incident_kinds import KIND_OF_FAULT

logger = logging.getLogger(__name__)

#: Event kinds that mark trouble in the learning state.
TROUBLE_KINDS: tuple[str, ...] = ("grad_guard", "rollback", "recovery_failed")
_EVENT_LABEL = {"grad_guard": "gradient event", "rollback": "rollback", "recovery_failed": "failed recovery"}


@dataclass(frozen=True)
class CheckpointFinding:
    """What the inspector found in the checkpoint consulted for an incident.

    Attributes:
        path: The file.
        chosen_by: ``"--checkpoint"`` or ``"newest model_<iter>.pt with iter <= <i>"``.
        status: ``clean``, ``corrupt`` or ``unreadable``.
        tensors: Tensors inspected.
        layers: Names of the tensors holding NaN/Inf, actor tensors first.
        actor_layers: Those of the actor.
        iteration: Iteration from the file name or stored in the file.
        error: Why it is unreadable.
    """

    path: Path
    chosen_by: str
    status: str
    tensors: int = 0
    layers: list[str] = field(default_factory=list)
    actor_layers: list[str] = field(default_factory=list)
    iteration: int | None = None
    error: str | None = None

    def describe(self) -> str:
        """``"model_10.pt has 3 non-finite tensors (actor_state_dict/mlp.0.weight, ...)"``."""
        if self.status == Status.UNREADABLE.value:
            return f"{self.path.name} cannot be read: {self.error}"
        if not self.layers:
            return f"{self.path.name} is clean ({self.tensors} tensors finite)"
        shown = ", ".join(self.layers[:4]) + (", ..." if len(self.layers) > 4 else "")
        noun = "tensor" if len(self.layers) == 1 else "tensors"
        return f"{self.path.name} has {len(self.layers)} non-finite {noun} ({shown})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "path": str(self.path),
            "chosen_by": self.chosen_by,
            "status": self.status,
            "iteration": self.iteration,
            "tensors": self.tensors,
            "nonfinite_tensors": len(self.layers),
            "layers": self.layers,
            "actor_layers": self.actor_layers,
            "error": self.error,
        }


class CheckpointCache:
    """Inspects each checkpoint once (a run's incidents often share one)."""

    def __init__(self) -> None:
        self._seen: dict[Path, CheckpointFinding] = {}

    def inspect(self, path: Path, chosen_by: str) -> CheckpointFinding:
        """Inspect ``path`` (weights only, optimizer state included); an unreadable file gives ``status`` unreadable."""
        key = path.resolve()
        if key not in self._seen:
            named = checkpoint_iteration(path)
            try:
                report = inspect_file(path)
            except CheckpointError as err:
                reason = str(err).removeprefix(f"{path}: ")
                finding = CheckpointFinding(path, chosen_by, Status.UNREADABLE.value, error=reason)
            else:
                bad = report.nonfinite_rows
                actor = [r.name for r in bad if r.part is Part.ACTOR]
                others = [r.name for r in bad if r.part is not Part.ACTOR]
                iteration = named if named is not None else report.iteration
                finding = CheckpointFinding(
                    path, chosen_by, report.status.value, len(report.rows), actor + others, actor, iteration
                )
            self._seen[key] = finding
        seen = self._seen[key]
        return seen if seen.chosen_by == chosen_by else _with_choice(seen, chosen_by)


def _with_choice(finding: CheckpointFinding, chosen_by: str) -> CheckpointFinding:
    return CheckpointFinding(
        finding.path,
        chosen_by,
        finding.status,
        finding.tensors,
        finding.layers,
        finding.actor_layers,
        finding.iteration,
        finding.error,
    )


@dataclass(frozen=True)
class EventFinding:
    """The run's safety events up to an incident's iteration.

    Attributes:
        iteration: The incident's iteration.
        first: The first trouble event (``grad_guard``, ``rollback``, ``recovery_failed``) at or before it.
        latest: The latest one at or before it.
        count: How many trouble events at or before it.
        refused: ``checkpoint_refused`` events at or before it.
    """

    iteration: int
    first: dict[str, Any] | None
    latest: dict[str, Any] | None
    count: int
    refused: list[dict[str, Any]]

    def describe(self) -> str:
        """``"first gradient event at iteration 9 (grad_nonfinite_steps=3); 2 up to iteration 12, latest: rollback
        at iteration 11: <what>"``."""
        if self.first is None:
            text = f"no gradient-guard event or rollback up to iteration {self.iteration}"
        else:
            text = f"first {describe_event(self.first)}"
            if self.count > 1 and self.latest is not None:
                text += f"; {self.count} up to iteration {self.iteration}, latest: {describe_event(self.latest)}"
        if self.refused:
            first_refused = self.refused[0]["iteration"]
            text += f"; {len(self.refused)} checkpoint(s) refused as non-finite, first at iteration {first_refused}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "iteration": self.iteration,
            "first": self.first,
            "latest": self.latest,
            "count": self.count,
            "checkpoint_refused": self.refused,
        }


def correlate(events: list[dict[str, Any]], iteration: int) -> EventFinding:
    """The events relevant to an incident at ``iteration`` (pure; ``events`` in file order)."""
    trouble = sorted(
        (e for e in events if e["kind"] in TROUBLE_KINDS and e["iteration"] <= iteration), key=lambda e: e["iteration"]
    )
    refused = [e for e in events if e["kind"] == "checkpoint_refused" and e["iteration"] <= iteration]
    return EventFinding(
        iteration=iteration,
        first=trouble[0] if trouble else None,
        latest=trouble[-1] if trouble else None,
        count=len(trouble),
        refused=refused,
    )


def describe_event(event: dict[str, Any]) -> str:
    """``"gradient event at iteration 9 (grad_nonfinite_steps=3)"``, ``"rollback at iteration 12: <what>"``."""
    kind = str(event.get("kind"))
    text = f"{_EVENT_LABEL.get(kind, kind)} at iteration {event.get('iteration')}"
    if kind == "grad_guard":  # the guard's counts are worth naming, its norms are not trouble
        counts = [f"{k}={event[k]:g}" for k in COUNTER_KEYS if isinstance(event.get(k), (int, float)) and event[k]]
        return f"{text} ({', '.join(counts)})" if counts else text
    what = event.get("what")
    return f"{text}: {what}" if what else text


def drill_settings(config: dict[str, Any] | None) -> dict[str, str]:
    """The run's fire-drill settings that inject incidents, keyed by the incident kind they produce.

    Returns:
        ``{"nonfinite_action": "faults.env.action_nonfinite=0.02", ...}``; empty without a drill.
    """
    faults = (config or {}).get("faults")
    env = faults.get("env") if isinstance(faults, dict) else None
    if not isinstance(env, dict):
        return {}
    found = {}
    for key, kind in KIND_OF_FAULT.items():
        value = env.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            found[kind.value] = f"faults.env.{key}={value:g}"
    return found
