"""The incident vocabulary (robo_safe_rl.safety.incident_kinds): kinds, precedence, counters, rebuilds."""

from __future__ import annotations

import pytest

from robo_safe_rl.config.safe_step import EnvFaultConfig
from robo_safe_rl.safety.incident_kinds import (
    COUNTER_OF_KIND,
    KIND_OF_FAULT,
    IncidentKind,
    classify_step,
    needs_rebuild,
)


def test_every_kind_has_a_counter_and_compares_like_its_record_string() -> None:
    assert set(COUNTER_OF_KIND) == set(IncidentKind)
    for kind in IncidentKind:
        # Records hold the plain strings; sets of kinds are intersected with them (attribution's rule 4).
        assert kind.name == kind.value and kind == kind.value and hash(kind) == hash(kind.value)


def test_every_env_fault_of_the_drill_has_a_kind() -> None:
    probabilities = {"action_nonfinite", "obs_nonfinite", "reward_nonfinite", "physics_error", "state_blowup"}
    assert set(KIND_OF_FAULT) == probabilities
    assert probabilities <= set(vars(EnvFaultConfig()))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"obs_finite": True, "reward_finite": True}, []),
        ({"obs_finite": False, "reward_finite": True}, ["nonfinite_obs"]),
        ({"obs_finite": True, "reward_finite": False}, ["nonfinite_reward"]),
        # A non-finite state subsumes check_state's reason; obs and reward are listed after it.
        (
            {"obs_finite": False, "reward_finite": False, "state_finite": False, "state_reason": "non-finite"},
            ["nonfinite_state", "nonfinite_obs", "nonfinite_reward"],
        ),
        ({"obs_finite": True, "reward_finite": True, "state_finite": True, "state_reason": "z"}, ["implausible_state"]),
        # No state (plain env) but a reason cannot happen; a finite state without reason is clean.
        ({"obs_finite": True, "reward_finite": True, "state_finite": True}, []),
        # A finite reward beyond the task's bound; a non-finite one is only non-finite.
        ({"obs_finite": True, "reward_finite": True, "reward_plausible": False}, ["implausible_reward"]),
        ({"obs_finite": True, "reward_finite": False, "reward_plausible": False}, ["nonfinite_reward"]),
    ],
)
def test_classify_step(flags: dict, expected: list[str]) -> None:
    assert [k.value for k in classify_step(**flags)] == expected


def test_rebuild_only_when_the_world_may_be_poisoned() -> None:
    assert needs_rebuild([IncidentKind.nonfinite_obs, IncidentKind.physics_error])
    assert needs_rebuild([IncidentKind.implausible_state])
    assert not needs_rebuild([IncidentKind.nonfinite_obs, IncidentKind.nonfinite_reward])
    assert not needs_rebuild([IncidentKind.implausible_reward])  # the reward's computation, not the world
