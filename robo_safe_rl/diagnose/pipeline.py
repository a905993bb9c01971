"""The diagnosis loop: analyse and attribute every incident, gather evidence, group, replay, write reproductions.

Order of work for the incidents a PATH names:

1. per incident: check the action (:mod:`~robo_safe_rl.diagnose.action`), attribute it without replay
   (:mod:`~robo_safe_rl.diagnose.attribution`), and for a cause that comes from the policy consult the checkpoint
   of its iteration and the run's safety events (:mod:`~robo_safe_rl.diagnose.evidence`);
2. group the incidents sharing kind, cause and checkpoint;
3. replay (``replay="first"``: the first incident of each group; ``"all"``; ``"none"``), write a reproduction
   script per replay that could run, and attribute again with the replay: a state blow-up whose replay shows the
   action was not the cause moves to ``env_fault`` (with ``"first"`` the whole group follows its first incident);
4. group again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import gymnasium as gym

from robo_safe_rl.diagnose.action import analyse_action
from robo_safe_rl.diagnose.attribution import POLICY_CAUSES, attribute
from robo_safe_rl.diagnose.evidence import CheckpointCache, correlate, drill_settings
from robo_safe_rl.diagnose.inputs import IncidentSource
from robo_safe_rl.diagnose.replay import DEFAULT_STEPS_AFTER, replay_incident
from robo_safe_rl.diagnose.report import DiagnoseReport, IncidentDiagnosis, group_incidents
from robo_safe_rl.diagnose.repro import write_script
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.progress import track
from robo_safe_rl.rundir import CHECKPOINT_FILES, EVENTS_FILE, RunDir

logger = logging.getLogger(__name__)


class ReplayMode(str, Enum):
    """Which incidents are replayed."""

    first = "first"
    all = "all"
    none = "none"


def diagnose_source(
    source: IncidentSource,
    *,
    checkpoint: Path | None = None,
    replay: ReplayMode = ReplayMode.first,
    steps_after: int = DEFAULT_STEPS_AFTER,
    write_scripts: bool = True,
    make_env: Callable[[str], gym.Env] | None = None,
    progress: bool = False,
) -> DiagnoseReport:
    """Diagnose the incidents of ``source`` (module docstring).

    Args:
        source: What the PATH named (:func:`~robo_safe_rl.diagnose.inputs.resolve`).
        checkpoint: The policy checkpoint to consult for every incident, instead of the one of its iteration.
        replay: Which incidents to replay.
        steps_after: Zero-action steps after the sanitised action in a replay.
        write_scripts: Write ``<run_dir>/repro/incident_<id>.py`` per replay that ran.
        make_env: Builds an env from a task id for replays (``gymnasium.make`` when ``None``).
        progress: Show bars of the analysis and the replays on a terminal (:mod:`robo_safe_rl.progress`).

    Returns:
        The report (``mode`` ``"incidents"``).

    Raises:
        CheckpointError: If ``checkpoint`` cannot be inspected.
    """
    report = DiagnoseReport(path=str(source.path), run_dir=source.run_dir, incident_dirs=list(source.directories))
    if not source.incidents:
        where = ", ".join(str(d) for d in source.directories) or str(source.path)
        report.notes.append(f"no incident recorded in {where}")
        return report
    run = None if source.run_dir is None else RunDir(source.run_dir)
    events, notes = (None, []) if run is None else run.read_events()
    report.notes.extend(notes)
    drills = drill_settings(None if run is None else run.read_config())
    if drills:
        report.notes.append(f"the run's fire drill injects faults ({', '.join(drills.values())})")
    cache = CheckpointCache()
    if checkpoint is not None:
        given = cache.inspect(checkpoint, "--checkpoint")
        if given.error is not None:
            raise CheckpointError(f"{checkpoint}: {given.error}")
    diagnoses = []
    for incident in track(source.incidents, "diagnose: analysing incidents", enabled=progress):
        finding = analyse_action(incident.record, incident.arrays)
        cause, explanation = attribute(incident.record, finding)
        diagnosis = IncidentDiagnosis(incident, finding, cause, explanation)
        kinds = incident.record.get("kinds") or [incident.record.get("kind")]
        diagnosis.drill = next((drills[k] for k in kinds if k in drills), None)
        if cause in POLICY_CAUSES:
            if checkpoint is not None:
                diagnosis.checkpoint = cache.inspect(checkpoint, "--checkpoint")
            elif run is not None and incident.iteration is not None:
                found = run.checkpoint_at_or_before(incident.iteration)
                if found is not None:
                    chosen_by = f"newest {CHECKPOINT_FILES} with iter <= {incident.iteration}"
                    diagnosis.checkpoint = cache.inspect(found, chosen_by)
        if events is not None and incident.iteration is not None:
            diagnosis.events = correlate(events, incident.iteration)
        diagnoses.append(diagnosis)
    groups = group_incidents(diagnoses)
    if any(d.cause in POLICY_CAUSES for d in diagnoses) and events is None and source.run_dir is not None:
        report.notes.append(f"no {EVENTS_FILE} in {source.run_dir}: training events not consulted")

    if replay is not ReplayMode.none:
        chosen = diagnoses if replay is ReplayMode.all else [g.first for g in groups]
        for diagnosis in track(chosen, "diagnose: replaying incidents", enabled=progress):
            _replay(diagnosis, source.run_dir, steps_after, write_scripts, make_env, report.notes)
        if replay is ReplayMode.first:
            for group in groups:
                for member in group.members[1:]:
                    _follow(member, group.first)
        groups = group_incidents(diagnoses)
    report.groups = groups
    return report


def _replay(
    diagnosis: IncidentDiagnosis,
    run_dir: Path | None,
    steps_after: int,
    write_scripts: bool,
    make_env: Callable[[str], gym.Env] | None,
    notes: list[str],
) -> None:
    incident = diagnosis.incident
    kwargs = {} if make_env is None else {"make_env": make_env}
    result = replay_incident(incident.record, incident.arrays, diagnosis.finding, steps_after=steps_after, **kwargs)
    diagnosis.replay = result
    if result.possible and write_scripts:
        try:
            result.script = str(write_script(incident, run_dir))
        except OSError as err:
            notes.append(f"reproduction script of {incident.ref} not written: {err}")
    diagnosis.cause, diagnosis.explanation = attribute(incident.record, diagnosis.finding, result)
    if diagnosis.cause not in POLICY_CAUSES:
        diagnosis.checkpoint = None


def _follow(member: IncidentDiagnosis, leader: IncidentDiagnosis) -> None:
    """A member of a group that was not replayed takes the cause its group's replayed incident ended with."""
    if member.cause is not leader.cause:
        member.cause = leader.cause
        member.explanation += f" ({leader.cause.value}, as the replay of {leader.incident.ref} showed)"
        if member.cause not in POLICY_CAUSES:
            member.checkpoint = None
