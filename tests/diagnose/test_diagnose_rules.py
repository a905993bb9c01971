"""Pure parts of the diagnosis, on hand-made records: component checks, attribution rules, step classification,
event correlation and the exit-code rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diagnose_factory import ANT_JOINTS

from robo_safe_rl.diagnose.action import analyse_action, component_issues
from robo_safe_rl.diagnose.attribution import Cause, attribute
from robo_safe_rl.diagnose.evidence import correlate, describe_event
from robo_safe_rl.diagnose.inputs import LoadedIncident
from robo_safe_rl.diagnose.outcome import ReplayResult, StepOutcome, classify_outcome
from robo_safe_rl.diagnose.report import DiagnoseReport, Group, IncidentDiagnosis
from robo_safe_rl.safety.incident_kinds import IncidentKind

A = 8
FINITE_OBS = np.zeros((3, 28))


def _record(kind: str = "nonfinite_action", phase: str = "step", reason: str = "r", **extra: Any) -> dict[str, Any]:
    return {
        "id": 0,
        "kind": kind,
        "kinds": [kind],
        "phase": phase,
        "reason": reason,
        "action_names": ANT_JOINTS,
    } | extra


def _arrays(raw: list[float] | None, history_obs: np.ndarray | None = FINITE_OBS) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {"action_low": -np.ones(A), "action_high": np.ones(A)}
    if raw is not None:
        arrays["raw_action"] = np.array(raw, dtype=np.float32)
    if history_obs is not None:
        arrays["history_obs"] = history_obs
    return arrays


def _legal(value: float = 0.5) -> list[float]:
    return [value] * A


def _with(component: int, value: float) -> list[float]:
    raw = _legal(0.0)
    raw[component] = value
    return raw


def _step(outcome: IncidentKind | None, reward: float | None = 1.0) -> StepOutcome:
    return StepOutcome(np.zeros(A), outcome, None if outcome is None else "why", reward, {}, {})


def _replay(
    raw: IncidentKind | None, sanitised: IncidentKind | None = None, pre: str | None = None, reward: float = 1.0
) -> ReplayResult:
    return ReplayResult(possible=True, pre_state_reason=pre, raw=_step(raw, reward), sanitised=_step(sanitised))


def test_component_issues_name_each_bad_component_and_its_excess() -> None:
    # Worked example: bounds [-1, 1]; 1.5 is above by 0.5, -3 below by 2; 0.2 is fine.
    raw = np.array([np.nan, np.inf, -np.inf, 1.5, -3.0, 0.2])
    issues = component_issues(raw, -np.ones(6), np.ones(6), ["a", "b", "c", "d", "e", "f"])
    assert [(i.name, i.problem, i.excess) for i in issues] == [
        ("a", "nan", None),
        ("b", "+inf", None),
        ("c", "-inf", None),
        ("d", "above", 0.5),
        ("e", "below", 2.0),
    ]
    assert issues[3].describe() == "d = 1.5 (above 1 by 0.5)"


def test_analyse_action_reads_the_observation_the_policy_acted_on() -> None:
    history = np.zeros((3, 28))
    history[-1, 3] = np.nan
    history[0, 5] = np.inf  # an older row: not what this action was computed from
    finding = analyse_action(_record(), _arrays(_with(1, np.nan), history))
    assert finding.obs_in_finite is False
    assert finding.obs_in_nonfinite == ["obs[3]"]
    assert finding.summary() == "1 of 8 components non-finite: ankle_1 = nan"


CASES = [
    # (record kind, phase, raw action, history obs, expected cause, words in the explanation)
    ("nonfinite_state", "reset", None, None, Cause.env_fault, "during a reset"),
    ("nonfinite_action", "step", _with(2, np.nan), "nan", Cause.nonfinite_observation, "obs[0]"),
    ("nonfinite_action", "step", _with(2, np.nan), "finite", Cause.nonfinite_policy_output, "going in was finite"),
    ("nonfinite_action", "step", _with(0, -np.inf), None, Cause.nonfinite_policy_output, "not recorded"),
    ("implausible_state", "step", _with(0, 1e10), "finite", Cause.extreme_action, "hip_1 = 1e+10 (above 1 by 1e+10)"),
    ("implausible_state", "step", _legal(), "finite", Cause.legal_action_blowup, "within limits"),
    ("nonfinite_state", "step", _legal(), "finite", Cause.legal_action_blowup, "within limits"),
    ("physics_error", "step", _legal(), "finite", Cause.env_fault, "within limits"),
    ("nonfinite_obs", "step", _legal(), "finite", Cause.env_fault, "within limits"),
    ("nonfinite_reward", "step", _legal(), "finite", Cause.env_fault, "within limits"),
]


@pytest.mark.parametrize(("kind", "phase", "raw", "obs", "cause", "words"), CASES)
def test_attribution_rules_without_replay(
    kind: str, phase: str, raw: list[float] | None, obs: str | None, cause: Cause, words: str
) -> None:
    history = None if obs is None else np.zeros((2, 28))
    if obs == "nan":
        history[-1, 0] = np.nan  # type: ignore[index]
    record = _record(kind, phase)
    got, explanation = attribute(record, analyse_action(record, _arrays(raw, history)))
    assert got is cause
    assert words in explanation


REPLAY_CASES = [
    # A legal action whose replay reproduces the blow-up stays the action's; one whose replay is sound does not.
    (_legal(), _replay(IncidentKind.implausible_state), Cause.legal_action_blowup, "reproduced by the replay"),
    (_legal(), _replay(None), Cause.env_fault, "from outside the recorded actions"),
    (_legal(), _replay(IncidentKind.implausible_state, pre="base speed 52 m/s"), Cause.env_fault, "already unsound"),
    # An extreme action that the task bounds is not the cause (the explanation still names it, and a huge reward).
    (_with(0, 1e10), _replay(None, reward=-1e19), Cause.env_fault, "extreme (1 of 8 components out of range"),
    (_with(0, 1e10), _replay(None, reward=-1e19), Cause.env_fault, "reward is -1e+19"),
    (
        _with(0, 1e10),
        _replay(IncidentKind.nonfinite_state),
        Cause.extreme_action,
        "the sanitised one does not: it caused",
    ),
    (
        _with(0, 1e10),
        _replay(IncidentKind.nonfinite_state, IncidentKind.nonfinite_state),
        Cause.extreme_action,
        "so does",
    ),
    # A non-finite action is the policy's whatever the replay shows.
    (_with(0, np.nan), _replay(None), Cause.nonfinite_policy_output, "non-finite"),
]


@pytest.mark.parametrize(("raw", "replay", "cause", "words"), REPLAY_CASES)
def test_attribution_with_replay(raw: list[float], replay: ReplayResult, cause: Cause, words: str) -> None:
    record = _record("implausible_state")
    got, explanation = attribute(record, analyse_action(record, _arrays(raw)), replay)
    assert got is cause
    assert words in explanation


@pytest.mark.parametrize(
    ("state", "reason", "obs", "reward", "expected"),
    [
        (
            {"base_pos": np.array([np.nan, 0, 0])},
            "non-finite state in base_pos",
            np.zeros(2),
            np.nan,
            "nonfinite_state",
        ),
        (
            {"base_pos": np.zeros(3)},
            "base speed 40 m/s exceeds the limit 20 m/s",
            np.zeros(2),
            1.0,
            "implausible_state",
        ),
        ({"base_pos": np.zeros(3)}, None, np.array([0.0, np.inf]), 1.0, "nonfinite_obs"),
        ({"base_pos": np.zeros(3)}, None, np.zeros(2), -np.inf, "nonfinite_reward"),
        ({"base_pos": np.zeros(3)}, None, np.zeros(2), -1e19, "sound"),
    ],
)
def test_classify_outcome_in_the_order_of_incident_kinds(
    state: dict[str, np.ndarray], reason: str | None, obs: np.ndarray, reward: float, expected: str
) -> None:
    outcome, why = classify_outcome(state=state, check_reason=reason, obs=obs, reward=reward)
    assert (outcome.value if outcome is not None else "sound") == expected
    assert (why is None) == (expected == "sound")


EVENTS = [
    {"iteration": 3, "kind": "checkpoint_refused", "path": "model_3.pt"},
    {"iteration": 9, "kind": "grad_guard", "grad_nonfinite_steps": 3, "grad_norm_preclip": 2.5},
    {"iteration": 11, "kind": "rollback", "what": "non-finite weights"},
    {"iteration": 20, "kind": "grad_guard", "grad_nonfinite_steps": 1},
]


def test_correlate_finds_the_first_and_latest_trouble_up_to_the_iteration() -> None:
    found = correlate(EVENTS, 12)
    assert (found.first["iteration"], found.latest["iteration"], found.count) == (9, 11, 2)  # type: ignore[index]
    assert [e["iteration"] for e in found.refused] == [3]
    # The gradient norm is not trouble; the non-finite count is.
    assert describe_event(EVENTS[1]) == "gradient event at iteration 9 (grad_nonfinite_steps=3)"
    assert found.describe() == (
        "first gradient event at iteration 9 (grad_nonfinite_steps=3); 2 up to iteration 12, latest: rollback at "
        "iteration 11: non-finite weights; 1 checkpoint(s) refused as non-finite, first at iteration 3"
    )
    assert correlate(EVENTS, 5).describe().startswith("no gradient-guard event or rollback up to iteration 5")


def test_exit_code_is_one_only_for_causes_that_come_from_actions(tmp_path: Path) -> None:
    def group(cause: Cause) -> Group:
        incident = LoadedIncident(tmp_path, _record(), {})
        return Group(0, [IncidentDiagnosis(incident, analyse_action(_record(), {}), cause, "")])

    assert DiagnoseReport(path="p").exit_code == 0
    assert DiagnoseReport(path="p", groups=[group(Cause.env_fault)]).exit_code == 0
    for cause in (Cause.nonfinite_observation, Cause.nonfinite_policy_output, Cause.extreme_action):
        assert DiagnoseReport(path="p", groups=[group(Cause.env_fault), group(cause)]).exit_code == 1
    assert DiagnoseReport(path="p", groups=[group(Cause.extreme_action)], error="bad").exit_code == 2
