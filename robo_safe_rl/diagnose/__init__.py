"""Diagnose physics errors caused by bad actions: from the incidents SafeStep recorded to their root cause.

- :func:`~robo_safe_rl.diagnose.inputs.resolve` reads the incidents a PATH names, strictly;
- :func:`~robo_safe_rl.diagnose.pipeline.diagnose_source` analyses each action, attributes it
  (:mod:`~robo_safe_rl.diagnose.attribution` documents the rules), consults the policy checkpoint and the run's
  safety events, groups incidents sharing a cause, replays them in fresh envs and writes reproduction scripts;
- :func:`~robo_safe_rl.diagnose.vet.vet_policy` runs a checkpoint's actor (rebuilt by
  :func:`~robo_safe_rl.checkpoint.policy.load_policy`) in its task and reports its first bad action;
- :func:`~robo_safe_rl.diagnose.cli.main` is ``tools/diagnose.py``.

Nothing here imports the task package ``envs``: replays ``gymnasium.make`` the recorded task id, which the caller
registers (``tools/diagnose.py`` imports ``envs``).
"""

from __future__ import annotations

from robo_safe_rl.diagnose.action import ActionFinding, ComponentIssue, analyse_action, component_issues
from robo_safe_rl.diagnose.attribution import ACTION_CAUSES, CAUSE_TITLES, Cause, attribute
from robo_safe_rl.diagnose.evidence import CheckpointFinding, EventFinding, correlate
from robo_safe_rl.diagnose.inputs import IncidentSource, LoadedIncident, resolve
from robo_safe_rl.diagnose.outcome import ReplayResult, StepOutcome, classify_outcome
from robo_safe_rl.diagnose.pipeline import ReplayMode, diagnose_source
from robo_safe_rl.diagnose.replay import replay_incident
from robo_safe_rl.diagnose.report import JSON_SCHEMA, DiagnoseReport, Group, IncidentDiagnosis
from robo_safe_rl.diagnose.vet import VetReport, vet_policy

__all__ = [
    "ACTION_CAUSES",
    "CAUSE_TITLES",
    "JSON_SCHEMA",
    "ActionFinding",
    "Cause",
    "CheckpointFinding",
    "ComponentIssue",
    "DiagnoseReport",
    "EventFinding",
    "Group",
    "IncidentDiagnosis",
    "IncidentSource",
    "LoadedIncident",
    "ReplayMode",
    "ReplayResult",
    "StepOutcome",
    "VetReport",
    "analyse_action",
    "attribute",
    "classify_outcome",
    "component_issues",
    "correlate",
    "diagnose_source",
    "replay_incident",
    "resolve",
    "vet_policy",
]
