"""The diagnosis as data: per incident, per group of incidents sharing a cause, one verdict line per group, and the
JSON document of ``tools/diagnose.py --json``.

JSON document (``schema`` ``"robo_safe_rl.diagnose_report/2"``; the same content as the text output)::

    {"schema", "mode": "incidents" | "policy", "path", "exit_code": 0 | 1 | 2, "error": str | null,
     "run_dir": str | null, "incident_dirs": [str], "notes": [str],
     "incidents": [Incident], "groups": [Group], "verdicts": [str], "vet": Vet | null}

    Incident = {"ref": "incidents#3", "directory", "id", "arrays" (npz name), "kind", "kinds", "phase", "reason",
                "source", "iteration", "global_step", "env_index", "env_id", "env_step", "episode_step", "time_iso",
                "action": Action | null, "cause", "explanation", "group" (index into groups),
                "replay": Replay | null (not replayed), "checkpoint": Checkpoint | null, "events": Events | null,
                "drill": "faults.env.<fault>=<p>" | null (the run's fire drill injects this kind)}
    Action = {"names", "raw", "applied", "low", "high" (lists), "nonfinite", "out_of_range" (counts),
              "max_excess": float | null, "components": [{"index", "name", "value", "low", "high",
              "problem": "nan" | "+inf" | "-inf" | "above" | "below", "excess": float | null}],
              "obs_in_finite": bool | null, "obs_in_nonfinite": ["obs[3]", ...]}
    Replay = {"possible", "why_not", "env_id", "snapshot_age", "obs_deviation", "pre_state_reason",
              "reproduced", "raw": Step | null, "sanitised": Step | null, "sanitised_sound": bool | null,
              "steps_after", "sound_steps_after", "after_fault": Step | null, "script": str | null}
    Step = {"action", "outcome": "physics_error" | "nonfinite_state" | "implausible_state" | "nonfinite_obs" |
            "nonfinite_reward" | "sound", "reason", "reward", "state_before", "state_after" ({key: [float]})}
    Checkpoint = {"path", "chosen_by", "status": "clean" | "corrupt" | "unreadable", "iteration", "tensors",
                  "nonfinite_tensors", "layers", "actor_layers", "error"}
    Events = {"iteration", "first", "latest" (safety events as the run wrote them, or null), "count",
              "checkpoint_refused": [event]}
    Group = {"index", "kind", "cause", "cause_title", "checkpoints": [file name] (clean ones share a group), "count",
             "first", "last": {"ref", "iteration", "env_step", "env_index", "time_iso"}, "refs", "replayed", "verdict"}
    Vet = {"checkpoint", "task", "iteration", "steps", "steps_run", "episodes", "stochastic", "seed",
           "network": {"obs_dim", "action_dim", "actor" (the actor entry of the run's saved rsl-rl train dict),
           "source" (that file's name)}, "inspection": Checkpoint,
           "first_bad": {"step", "obs_finite", "action": Action} | null, "nonfinite_actions",
           "out_of_range_actions", "incidents_dir", "incidents_written", "safe_step" (non-zero counters), "notes",
           "verdict"}

``cause`` is one of ``nonfinite_observation``, ``nonfinite_policy_output``, ``extreme_action``,
``legal_action_blowup``, ``env_fault`` (:mod:`robo_safe_rl.diagnose.attribution`). Numbers that may be non-finite
(actions, states, rewards) are written as in incident records: ``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robo_safe_rl.diagnose.action import ActionFinding
from robo_safe_rl.diagnose.attribution import ACTION_CAUSES, CAUSE_TITLES, Cause
from robo_safe_rl.diagnose.evidence import CheckpointFinding, EventFinding
from robo_safe_rl.diagnose.inputs import LoadedIncident
from robo_safe_rl.diagnose.outcome import ReplayResult
from robo_safe_rl.diagnose.verdict import verdict_line
from robo_safe_rl.diagnose.vet import VetReport

JSON_SCHEMA = "robo_safe_rl.diagnose_report/2"
_RECORD_KEYS = (
    "kind",
    "kinds",
    "phase",
    "reason",
    "source",
    "iteration",
    "global_step",
    "env_index",
    "env_id",
    "env_step",
    "episode_step",
    "time_iso",
)


@dataclass
class IncidentDiagnosis:
    """Everything found about one incident."""

    incident: LoadedIncident
    finding: ActionFinding
    cause: Cause
    explanation: str
    replay: ReplayResult | None = None
    checkpoint: CheckpointFinding | None = None
    events: EventFinding | None = None
    drill: str | None = None
    group: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The incident's entry of the JSON document."""
        record = self.incident.record
        return {
            "ref": self.incident.ref,
            "directory": str(self.incident.directory),
            "id": self.incident.id,
            "arrays": record.get("arrays"),
            **{key: record.get(key) for key in _RECORD_KEYS},
            "action": None if self.finding.raw is None else self.finding.to_dict(),
            "cause": self.cause.value,
            "explanation": self.explanation,
            "group": self.group,
            "replay": None if self.replay is None else self.replay.to_dict(),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
            "events": None if self.events is None else self.events.to_dict(),
            "drill": self.drill,
        }


@dataclass
class Group:
    """Incidents sharing a cause: same kind, same attribution, same checkpoint."""

    index: int
    members: list[IncidentDiagnosis]

    @property
    def first(self) -> IncidentDiagnosis:
        """The earliest member (by record order)."""
        return self.members[0]

    @property
    def last(self) -> IncidentDiagnosis:
        """The latest member."""
        return self.members[-1]

    @property
    def cause(self) -> Cause:
        """The shared cause."""
        return self.first.cause

    @property
    def kind(self) -> str:
        """The shared incident kind."""
        return str(self.first.incident.record.get("kind"))

    @property
    def checkpoints(self) -> list[CheckpointFinding]:
        """The distinct checkpoints consulted for the members, in order (several clean ones may share a group)."""
        seen: dict[Path, CheckpointFinding] = {}
        for member in self.members:
            if member.checkpoint is not None:
                seen.setdefault(member.checkpoint.path, member.checkpoint)
        return list(seen.values())

    @property
    def replayed(self) -> IncidentDiagnosis | None:
        """The first member that was replayed, if any."""
        return next((m for m in self.members if m.replay is not None), None)

    def verdict(self) -> str:
        """The group's verdict line (see :func:`~robo_safe_rl.diagnose.verdict.verdict_line`)."""
        return verdict_line(self)

    def to_dict(self) -> dict[str, Any]:
        """The group's entry of the JSON document."""
        replayed = self.replayed
        return {
            "index": self.index,
            "kind": self.kind,
            "cause": self.cause.value,
            "cause_title": CAUSE_TITLES[self.cause],
            "checkpoints": [c.path.name for c in self.checkpoints],
            "count": len(self.members),
            "first": occurrence(self.first),
            "last": occurrence(self.last),
            "refs": [m.incident.ref for m in self.members],
            "replayed": None if replayed is None else replayed.incident.ref,
            "verdict": self.verdict(),
        }


def occurrence(diagnosis: IncidentDiagnosis) -> dict[str, Any]:
    """When and where one incident happened."""
    record = diagnosis.incident.record
    return {
        "ref": diagnosis.incident.ref,
        "iteration": record.get("iteration"),
        "env_step": record.get("env_step"),
        "env_index": record.get("env_index"),
        "time_iso": record.get("time_iso"),
    }


def group_key(diagnosis: IncidentDiagnosis) -> tuple[str, str, str]:
    """Kind, cause and checkpoint: incidents with equal keys share a cause. Clean checkpoints count as one (a clean
    checkpoint is the same evidence whichever iteration it is from); a corrupt or unreadable one is its own."""
    ckpt = diagnosis.checkpoint
    ckpt_key = "" if ckpt is None else ("clean" if ckpt.status == "clean" else str(ckpt.path))
    return str(diagnosis.incident.record.get("kind")), diagnosis.cause.value, ckpt_key


def group_incidents(diagnoses: list[IncidentDiagnosis]) -> list[Group]:
    """Group by :func:`group_key`, groups ordered by their first incident; sets each diagnosis's ``group``."""
    groups: dict[tuple[str, str, str], Group] = {}
    for diagnosis in diagnoses:
        key = group_key(diagnosis)
        if key not in groups:
            groups[key] = Group(index=len(groups), members=[])
        groups[key].members.append(diagnosis)
        diagnosis.group = groups[key].index
    return list(groups.values())


@dataclass
class DiagnoseReport:
    """The whole diagnosis of a PATH (or the vetting of a policy, in ``vet``)."""

    path: str
    mode: str = "incidents"
    run_dir: Path | None = None
    incident_dirs: list[Path] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vet: VetReport | None = None
    error: str | None = None

    @property
    def diagnoses(self) -> list[IncidentDiagnosis]:
        """Every incident, in record order."""
        return sorted(
            (m for g in self.groups for m in g.members), key=lambda m: (str(m.incident.directory), m.incident.id)
        )

    @property
    def exit_code(self) -> int:
        """2 unusable input; 1 incidents caused by actions (or a policy that emitted a bad action); else 0."""
        if self.error is not None:
            return 2
        if self.vet is not None:
            return 1 if self.vet.first_bad is not None else 0
        return 1 if any(g.cause in ACTION_CAUSES for g in self.groups) else 0

    def verdicts(self) -> list[str]:
        """One line per group (per cause), or the vetting's verdict."""
        if self.vet is not None:
            return [self.vet.verdict()]
        return [g.verdict() for g in self.groups]

    def to_json(self) -> dict[str, Any]:
        """The JSON document (schema in the module docstring)."""
        return {
            "schema": JSON_SCHEMA,
            "mode": self.mode,
            "path": self.path,
            "exit_code": self.exit_code,
            "error": self.error,
            "run_dir": None if self.run_dir is None else str(self.run_dir),
            "incident_dirs": [str(d) for d in self.incident_dirs],
            "notes": self.notes,
            "incidents": [d.to_dict() for d in self.diagnoses],
            "groups": [g.to_dict() for g in self.groups],
            "verdicts": [] if self.error is not None else self.verdicts(),
            "vet": None if self.vet is None else self.vet.to_dict(),
        }
