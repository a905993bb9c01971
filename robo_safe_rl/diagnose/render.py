"""Human-readable output of a diagnosis through rich: colours on a terminal, plain unwrapped lines on a pipe."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape

from robo_safe_rl.diagnose.attribution import ACTION_CAUSES, CAUSE_TITLES
from robo_safe_rl.diagnose.outcome import ReplayResult, StepOutcome
from robo_safe_rl.diagnose.report import DiagnoseReport, Group, IncidentDiagnosis, occurrence
from robo_safe_rl.diagnose.vet import VetReport
from robo_safe_rl.terminal import printable

#: State arrays shown before/after a replayed step (the rest is in --json).
SHOWN_STATE_KEYS: tuple[str, ...] = ("base_pos", "base_lin_vel", "joint_vel")


def render(console: Console, report: DiagnoseReport) -> None:
    """Print ``report`` (a diagnosis of incidents, or a vetting) to ``console``."""
    if report.vet is not None:
        _render_vet(console, report.vet)
    else:
        _render_incidents(console, report)
    for note in report.notes:
        _line(console, f"note: {note}", "dim")
    verdicts = report.verdicts()
    if verdicts:
        _line(console, "verdict:" if len(verdicts) == 1 else "verdicts:", "bold")
        style = "bold red" if report.exit_code == 1 else "green"
        for text in verdicts:
            _line(console, f"- {text}", style)


def _line(console: Console, text: str, style: str | None = None) -> None:
    console.print(escape(printable(text)), style=style, highlight=False)


def _render_incidents(console: Console, report: DiagnoseReport) -> None:
    count = sum(len(g.members) for g in report.groups)
    if not count:
        _line(console, f"{report.path}: no incidents recorded", "green")
        return
    dirs = ", ".join(d.name for d in report.incident_dirs)
    _line(console, f"{report.path}: {count} incident(s) in {len(report.groups)} group(s) (from {dirs})")
    for group in report.groups:
        _render_group(console, group)


def _render_group(console: Console, group: Group) -> None:
    first = group.first
    names = [c.path.name for c in group.checkpoints]
    ckpt = f" [{', '.join(names)}]" if names else ""
    style = "bold red" if group.cause in ACTION_CAUSES else "bold yellow"
    _line(console, "")
    _line(console, f"[{group.index + 1}] {group.kind} x{len(group.members)}: {CAUSE_TITLES[group.cause]}{ckpt}", style)
    _line(console, f"  first: {_when(first)}")
    if len(group.members) > 1:
        _line(console, f"  last:  {_when(group.last)}")
    record = first.incident.record
    _line(console, f"  what happened: {record.get('reason')}")
    _line(console, f"  action: {first.finding.summary(max_items=8)}; observation going in: {_obs_in(first)}")
    _line(console, f"  why: {first.explanation}")
    replayed = group.replayed
    if replayed is not None and replayed.replay is not None:
        _render_replay(console, replayed, replayed.replay)
    for checkpoint in group.checkpoints:
        _line(console, f"  checkpoint ({checkpoint.chosen_by}): {checkpoint.describe()}")
    if first.events is not None:
        _line(console, f"  training events: {first.events.describe()}")


def _when(diagnosis: IncidentDiagnosis) -> str:
    occ = occurrence(diagnosis)
    parts = [f"iteration {occ['iteration']}"] if occ["iteration"] is not None else ["outside training"]
    parts += [f"env {occ['env_index']}", f"env step {occ['env_step']}"]
    return f"{occ['ref']} ({', '.join(parts)}; {occ['time_iso']})"


def _obs_in(diagnosis: IncidentDiagnosis) -> str:
    finding = diagnosis.finding
    if finding.obs_in_finite is None:
        return "not recorded"
    return "finite" if finding.obs_in_finite else f"non-finite at {', '.join(finding.obs_in_nonfinite[:8])}"


def _render_replay(console: Console, diagnosis: IncidentDiagnosis, replay: ReplayResult) -> None:
    ref = diagnosis.incident.ref
    if not replay.possible:
        _line(console, f"  replay of {ref}: impossible: {replay.why_not}", "yellow")
        return
    start = (
        "the exact state before the step"
        if not replay.snapshot_age
        else (f"a snapshot {replay.snapshot_age} steps older, then the {replay.snapshot_age} recorded actions since")
    )
    deviation = (
        "" if replay.obs_deviation is None else f"; observation within {replay.obs_deviation:.2g} of the recorded"
    )
    _line(console, f"  replay of {ref} in a fresh {replay.env_id} from {start}{deviation}:")
    if replay.pre_state_reason is not None:
        _line(console, f"    state before the action already unsound: {replay.pre_state_reason}", "yellow")
    if replay.raw is not None:
        verdict = "REPRODUCED" if replay.reproduced else "no fault"
        _line(
            console, f"    raw action       -> {replay.raw.describe()}: {verdict}", "red" if replay.reproduced else None
        )
        for line in _state_change(replay.raw):
            _line(console, f"      {line}", "dim")
    if replay.sanitised is not None:
        after = f", then {replay.sound_steps_after} of {replay.steps_after} zero-action steps sound" + (
            "" if replay.after_fault is None else f", then {replay.after_fault.describe()}"
        )
        text = replay.sanitised.describe() + (after if not replay.sanitised.faulty else "")
        _line(console, f"    sanitised action -> {text}", "green" if replay.sanitised_sound else "yellow")
    if replay.script is not None:
        _line(console, f"  reproduce: python {replay.script}  (exits 1 when the fault reproduces)")


def _state_change(step: StepOutcome) -> list[str]:
    if step.state_before is None:
        return []
    lines = []
    for key in SHOWN_STATE_KEYS:
        if key in step.state_before:
            after = "-" if step.state_after is None else _fmt(step.state_after.get(key))
            lines.append(f"{key}: {_fmt(step.state_before[key])} -> {after}")
    return lines


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return np.array2string(
        np.atleast_1d(np.asarray(value, dtype=np.float64)), precision=4, separator=", ", max_line_width=10_000
    )


def _render_vet(console: Console, vet: VetReport) -> None:
    mode = "sampled" if vet.stochastic else "deterministic"
    _line(
        console, f"{vet.checkpoint} in {vet.task}: {vet.steps_run} steps, {vet.episodes} episode end(s), {mode} actions"
    )
    _line(console, f"  network: {vet.policy.describe()}")
    _line(console, f"  checkpoint: {vet.inspection.describe()}", "red" if vet.inspection.layers else None)
    bad = vet.first_bad
    if bad is None:
        _line(console, "  first bad action: none", "green")
    else:
        obs = "finite" if bad.obs_finite else "non-finite"
        _line(
            console,
            f"  first bad action: step {bad.step}: {bad.finding.summary(max_items=8)}; observation in: {obs}",
            "red",
        )
    _line(
        console,
        f"  bad actions: {vet.nonfinite_actions} non-finite, {vet.out_of_range_actions} out of range, "
        f"of {vet.steps_run}",
    )
    if vet.counters:
        _line(console, "  SafeStep: " + ", ".join(f"{k} {v}" for k, v in vet.counters.items()))
    if vet.incidents_dir is not None and vet.incidents_written:
        _line(
            console,
            f"  {vet.incidents_written} incident(s) recorded: explain them with "
            f"python tools/diagnose.py {vet.incidents_dir}",
        )
