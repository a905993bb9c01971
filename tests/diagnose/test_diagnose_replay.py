"""Replays of real Ant incidents in fresh envs, and the verdicts they lead to.

Facts of this task the expectations rest on (``envs/base.py``): the torque is ``250 * clip(action, -1, 1)``, where
the clip passes NaN (a NaN torque turns the whole state NaN after one step) but turns +-Inf into +-1 (a finite,
legal torque); the electricity and stall costs use the *unclipped* action, so an infinite component makes the
reward non-finite (``-inf`` or ``inf * 0 = nan``) while the state stays finite, and 1e10 gives a finite but huge
negative reward (stall cost ``-0.1 * 1e20 / 8``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from diagnose_factory import drive_ant

from robo_safe_rl.config.safe_step import SafeStepConfig
from robo_safe_rl.diagnose.action import analyse_action
from robo_safe_rl.diagnose.attribution import Cause
from robo_safe_rl.diagnose.inputs import resolve
from robo_safe_rl.diagnose.pipeline import ReplayMode, diagnose_source
from robo_safe_rl.diagnose.replay import replay_incident
from robo_safe_rl.safety.incident_kinds import IncidentKind


@pytest.mark.parametrize(
    ("rid", "component", "raw_outcome"),
    [
        (0, "hip_2", IncidentKind.nonfinite_state),
        (1, "hip_1", IncidentKind.nonfinite_reward),
        (2, "ankle_4", IncidentKind.nonfinite_reward),
    ],
    ids=["nan", "+inf", "-inf"],
)
def test_nonfinite_action_replays_from_the_exact_state(
    bad_actions_run: Path, copy_run, rid: int, component: str, raw_outcome: IncidentKind
) -> None:
    run = copy_run(bad_actions_run)
    report = diagnose_source(resolve(f"{run}#{rid}"), steps_after=20)
    (diagnosis,) = report.diagnoses
    assert diagnosis.cause is Cause.nonfinite_policy_output
    assert [i.name for i in diagnosis.finding.nonfinite] == [component]
    replay = diagnosis.replay
    assert replay is not None and replay.possible and replay.snapshot_age == 0
    # set_sim_state restores the observation to ~1e-6 (link transforms lag the base by a substep).
    assert replay.obs_deviation is not None and replay.obs_deviation < 1e-4
    assert replay.raw is not None and replay.raw.outcome is raw_outcome and replay.reproduced
    if raw_outcome is IncidentKind.nonfinite_reward:  # the task clipped the Inf torque: the state stayed finite
        assert all(np.isfinite(v).all() for v in replay.raw.state_after.values())  # type: ignore[union-attr]
    assert replay.sanitised_sound and replay.sound_steps_after == 20
    assert replay.script == str(run / "repro" / f"incident_{rid}.py") and Path(replay.script).is_file()
    assert report.exit_code == 1


def test_the_three_nonfinite_actions_form_one_group_without_a_checkpoint(bad_actions_run: Path) -> None:
    report = diagnose_source(resolve(str(bad_actions_run)), replay=ReplayMode.none)
    (group,) = report.groups
    assert (group.kind, group.cause, len(group.members)) == ("nonfinite_action", Cause.nonfinite_policy_output, 3)
    assert [m.incident.iteration for m in group.members] == [0, 0, 3]
    assert group.verdict().startswith("bad actions from the policy: 1 of 8 components non-finite: hip_2 = nan; no ")
    assert "no checkpoint at or before iteration 0 to inspect (pass --checkpoint)" in group.verdict()


def test_extreme_action_bounded_by_the_task_is_not_the_cause_of_a_blowup(tmp_path: Path) -> None:
    # Step 12: the base is thrown at 3x its speed limit inside the step (as the state_blowup drill does) while the
    # policy sends 1e10 on hip_1. SafeStep snapshots every 8 steps, so the record's snapshot is 4 steps old.
    run = tmp_path / "run"

    def throw(step: int, task: object) -> None:
        if step == 12:
            task.perturb_state(3.0)  # type: ignore[attr-defined]

    recorder = drive_ant(run, 14, bad={12: (0, 1e10)}, inside=throw, cfg=SafeStepConfig(state_interval=8))
    assert recorder.written == 1
    provisional = diagnose_source(resolve(str(run)), replay=ReplayMode.none)
    assert provisional.groups[0].cause is Cause.extreme_action and provisional.exit_code == 1

    report = diagnose_source(resolve(str(run)), steps_after=10)
    (diagnosis,) = report.diagnoses
    replay = diagnosis.replay
    assert diagnosis.incident.record["kind"] == "implausible_state"
    assert replay is not None and replay.snapshot_age == 4
    # Four recorded actions replayed from the snapshot land on the state the policy saw.
    assert replay.obs_deviation is not None and replay.obs_deviation < 1e-4
    # 1e10 is clipped to 1 by the task: the state stays sound; the stall cost makes the reward -1e10^2 * 0.1 / 8.
    assert replay.raw is not None and replay.raw.outcome is None and not replay.reproduced
    assert replay.raw.reward == pytest.approx(-1.25e18, rel=1e-3)
    assert diagnosis.cause is Cause.env_fault and report.exit_code == 0
    assert "the action was extreme (1 of 8 components out of range: hip_1 = 1e+10 (above 1 by 1e+10))" in (
        diagnosis.explanation
    )
    assert report.verdicts()[0].startswith("env/engine fault, not the action: base speed")


def test_a_state_already_thrown_before_the_step_is_not_the_actions_doing(tmp_path: Path) -> None:
    # The base is thrown *before* SafeStep's step; with a snapshot every step, the record holds the thrown state.
    run = tmp_path / "run"

    def throw(step: int, task: object) -> None:
        if step == 6:
            task.perturb_state(3.0)  # type: ignore[attr-defined]

    drive_ant(run, 7, outside=throw, cfg=SafeStepConfig(state_interval=1))
    assert diagnose_source(resolve(str(run)), replay=ReplayMode.none).groups[0].cause is Cause.legal_action_blowup
    report = diagnose_source(resolve(str(run)), steps_after=5)
    (diagnosis,) = report.diagnoses
    assert diagnosis.replay is not None and diagnosis.replay.pre_state_reason is not None
    assert "base speed" in diagnosis.replay.pre_state_reason
    assert diagnosis.cause is Cause.env_fault and "already unsound" in diagnosis.explanation
    assert report.exit_code == 0


def test_a_dead_physics_client_is_an_engine_fault(tmp_path: Path) -> None:
    run = tmp_path / "run"

    def kill(step: int, task: object) -> None:
        if step == 7:
            task.break_simulation()  # type: ignore[attr-defined]

    drive_ant(run, 9, inside=kill)
    report = diagnose_source(resolve(str(run)), steps_after=5)
    (diagnosis,) = report.diagnoses
    assert diagnosis.incident.record["kind"] == "physics_error"
    assert diagnosis.cause is Cause.env_fault and diagnosis.checkpoint is None
    # A fresh client steps the same legal action without complaint.
    assert diagnosis.replay is not None and diagnosis.replay.raw is not None
    assert diagnosis.replay.raw.outcome is None
    assert report.verdicts() == [f"env/engine fault, not the action: {diagnosis.explanation}"]
    assert "Not connected to physics server" in report.verdicts()[0]
    assert report.exit_code == 0


def test_a_clamped_finite_action_alone_leaves_no_incident(tmp_path: Path) -> None:
    # SafeStep clamps a finite out-of-range action and counts it; only non-finite actions are recorded.
    run = tmp_path / "run"
    assert drive_ant(run, 5, bad={2: (3, 1e10)}).written == 0
    report = diagnose_source(resolve(str(run)))
    assert report.groups == [] and report.exit_code == 0


def _nan_record(env_id: str | None, *, simulated: bool = True, state: bool = True) -> tuple[dict, dict]:
    record = {"id": 0, "kind": "nonfinite_action", "phase": "step", "env_id": env_id, "simulated": simulated}
    arrays = {"raw_action": np.array([np.nan, 0.0], dtype=np.float32)}
    if state:
        arrays["state.x"] = np.zeros(2)
    return record, arrays


@pytest.mark.parametrize(
    ("env_id", "simulated", "state", "why"),
    [
        ("CartPole-v1", False, False, "no simulator state (the task does not implement the simulator protocol)"),
        (None, True, True, "names no task"),
        ("RoboSafe/Nope-v0", True, True, "cannot make task: 'RoboSafe/Nope-v0' is not a registered task id"),
        # gymnasium.make("this:Nope-v0") would import the module `this` (it prints a poem) before looking for Nope.
        ("this:Nope-v0", True, True, "cannot make task: 'this:Nope-v0' names a module to import"),
        ("CartPole-v1", True, True, "task CartPole-v1 does not implement the simulator protocol"),
        (
            "RoboSafe/Ant-v0",
            True,
            True,
            "the recorded action has shape (2,), but task RoboSafe/Ant-v0 takes actions of",
        ),
    ],
)
def test_replay_says_why_it_is_impossible(env_id: str | None, simulated: bool, state: bool, why: str) -> None:
    record, arrays = _nan_record(env_id, simulated=simulated, state=state)
    result = replay_incident(record, arrays, analyse_action(record, arrays))
    assert not result.possible and why in result.why_not  # type: ignore[operator]
    assert "this" not in sys.modules
