"""SafeStep on the fault env of conftest.py (and on a plain gymnasium env): every fault path, its record and info."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robo_safe_rl import SafeStep
from robo_safe_rl.bridge.incidents import IncidentRecorder, load_incident_arrays, read_incidents
from robo_safe_rl.config.safe_step import SafeStepConfig
from robo_safe_rl.errors import ConfigError, RecoveryError

MakeEnv = Callable[..., gym.Env]
ZERO = np.zeros(2, dtype=np.float32)
PUSH = np.array([0.5, -0.25], dtype=np.float32)


def records(run_dir: Path) -> list[dict]:
    directory = run_dir / "incidents"
    return read_incidents(directory) if (directory / "incidents.jsonl").exists() else []


def pick(record: dict, *keys: str) -> tuple:
    return tuple(record[k] for k in keys)


def test_rejects_non_box_spaces() -> None:
    with pytest.raises(ConfigError, match=r"SafeStep requires a Box action space, got Discrete\(2\) in env 0 \(Cart"):
        SafeStep(gym.make("CartPole-v1"))
    env = gym.make("Pendulum-v1")
    env = gym.wrappers.TransformObservation(env, lambda o: {"x": o}, gym.spaces.Dict({"x": env.observation_space}))
    with pytest.raises(ConfigError, match=r"requires a Box observation space, got Dict.*FlattenObservation"):
        SafeStep(env, env_index=3)


def test_plain_gymnasium_env_with_defaults() -> None:
    env = SafeStep(gym.make("Pendulum-v1"))
    assert not env.simulated
    env.reset(seed=0)
    for _ in range(50):  # the clean path adds nothing to info
        _, reward, _, _, info = env.step(env.action_space.sample())
        assert "safe_step" not in info and math.isfinite(reward)
    # Pendulum's torque bound is 2: +Inf becomes 2, -Inf -2, NaN 0; each one component.
    for value in (math.inf, -math.inf, math.nan):
        obs, _, terminated, _, info = env.step(np.array([value], dtype=np.float32))
        assert np.isfinite(obs).all() and not terminated
        assert info["safe_step"]["incident"] == "nonfinite_action" and info["safe_step"]["actions_sanitised"] == 1
    assert env.counters["actions_sanitised"] == 3 and env.counters["nonfinite_actions"] == 3


@pytest.mark.parametrize(
    ("value", "applied"),
    # The action space is Box(-1, 1): NaN -> 0, +Inf -> 1, -Inf -> -1; the other component (0.5) is untouched.
    [(math.nan, 0.0), (math.inf, 1.0), (-math.inf, -1.0)],
    ids=["nan", "+inf", "-inf"],
)
def test_nonfinite_action_is_sanitised_and_recorded(
    value: float, applied: float, make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = SafeStep(make_fault_env(), env_index=5, recorder=recorder)
    env.reset(seed=1)
    env.step(PUSH)
    state_before = env.unwrapped.get_sim_state()
    raw = np.array([0.5, value], dtype=np.float32)
    obs, reward, terminated, truncated, info = env.step(raw)
    assert np.isfinite(obs).all() and math.isfinite(reward) and not terminated and not truncated
    np.testing.assert_array_equal(env.unwrapped.actions_seen[-1], [0.5, applied])
    assert raw[1] != raw[1] or math.isinf(raw[1]), "the caller's action must be left alone"
    assert info["safe_step"]["incident"] == "nonfinite_action"
    assert info["safe_step"]["reason"] == f"action: 1 of 2 elements non-finite: [1]={value}"
    assert env.counters["actions_sanitised"] == 1 and env.counters["nonfinite_actions"] == 1
    (record,) = records(run_dir)
    assert pick(record, "kind", "env_index", "env_step", "episode_step") == ("nonfinite_action", 5, 2, 2)
    assert record["raw_action"] == [0.5, {math.nan: "nan", math.inf: "inf", -math.inf: "-inf"}[value]]
    assert record["action"] == [0.5, applied] and record["nonfinite_action_elements"] == 1
    assert record["action_names"] == ["thrust_x", "thrust_y"] and record["simulated"] is True
    assert pick(record, "terminated", "rebuilt", "penalty") == (False, False, None)
    # The exact state before the faulty step, and the two (obs, action) pairs of the episode so far.
    assert record["sim_state_age"] == 0 and record["history_len"] == 2
    arrays = load_incident_arrays(run_dir / "incidents", record)
    np.testing.assert_array_equal(arrays["state.pos"], state_before["pos"])
    np.testing.assert_array_equal(arrays["state.vel"], state_before["vel"])
    np.testing.assert_array_equal(arrays["history_actions"], [PUSH, [0.5, applied]])


def test_huge_finite_action_is_clipped_without_an_incident(make_fault_env: MakeEnv, recorder: IncidentRecorder) -> None:
    env = SafeStep(make_fault_env(), recorder=recorder)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([1e10, -1e10], dtype=np.float32))
    np.testing.assert_array_equal(env.unwrapped.actions_seen[-1], [1.0, -1.0])
    assert info["safe_step"]["incident"] is None and info["safe_step"]["actions_sanitised"] == 2
    assert info["safe_step"]["reason"] == "action: 2 components outside the bounds, clamped"
    assert recorder.written == 0 and env.counters["nonfinite_actions"] == 0


@pytest.mark.parametrize(
    ("fault", "kinds", "rebuilt", "reason"),
    [
        ("nan_obs", ["nonfinite_obs"], False, "observation: 1 of 4 elements non-finite: [1]=nan"),
        ("inf_obs", ["nonfinite_obs"], False, "observation: 1 of 4 elements non-finite: [3]=inf"),
        ("nan_reward", ["nonfinite_reward"], False, "reward nan"),
        ("inf_reward", ["nonfinite_reward"], False, "reward inf"),
        ("physics_error", ["physics_error"], True, "conftest.FaultEngineError: Not connected to physics server."),
        (
            "nan_state",
            ["nonfinite_state", "nonfinite_obs"],
            True,
            "non-finite simulator state in pos, vel; non-finite state; observation: 4 of 4 elements non-finite",
        ),
    ],
)
def test_step_faults_end_the_transition_with_a_penalty(
    fault: str, kinds: list[str], rebuilt: bool, reason: str, make_fault_env: MakeEnv, recorder: IncidentRecorder,
    run_dir: Path,
) -> None:  # fmt: skip
    env = SafeStep(make_fault_env({3: fault}), SafeStepConfig(penalty=-7.0), env_index=1, recorder=recorder)
    env.reset(seed=0)
    for _ in range(2):
        env.step(PUSH)
    obs, reward, terminated, truncated, info = env.step(PUSH)
    assert np.isfinite(obs).all() and reward == -7.0 and terminated and not truncated
    safe = info["safe_step"]
    assert safe["kinds"][: len(kinds)] == kinds and safe["reset"] is True and safe["rebuilt"] is rebuilt
    assert safe["reason"].startswith(reason)
    assert "resets" in info, "the info of the new episode's reset is passed on"
    np.testing.assert_array_equal(obs, env.unwrapped.state.astype(np.float32))  # the first obs of the new episode
    assert env.unwrapped.rebuilds == int(rebuilt) and env.counters["env_rebuilds"] == int(rebuilt)
    assert env.counters["recoveries"] == 1
    (record,) = records(run_dir)
    assert record["kind"] == kinds[0] and record["kinds"][: len(kinds)] == kinds
    assert pick(record, "terminated", "rebuilt", "penalty", "episode_step") == (True, rebuilt, -7.0, 3)
    assert record["reason"] == safe["reason"]
    if fault == "physics_error":
        assert record["exception_type"] == "conftest.FaultEngineError"
        assert record["exception"] == "Not connected to physics server." and record["reward"] is None
    # The episode goes on in the new one, without the caller resetting.
    for _ in range(3):
        obs, reward, terminated, _, info = env.step(PUSH)
        assert np.isfinite(obs).all() and reward > 0 and not terminated and "safe_step" not in info


def test_counters_name_every_kind(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env({2: "nan_obs", 4: ["nan_reward", "inf_obs"], 6: "physics_error", 8: "nan_state"}))
    env.reset(seed=0)
    for _ in range(9):
        env.step(PUSH)
    env.step(np.array([math.nan, 0.0], dtype=np.float32))
    env.unwrapped.perturb_state(3.0)
    env.step(PUSH)
    assert env.counters == {
        "actions_sanitised": 1,
        "nonfinite_actions": 1,
        "physics_errors": 1,
        "nonfinite_states": 1,
        "implausible_states": 1,
        "nonfinite_obs": 3,  # steps 2 and 4, and the NaN state's observation at step 8
        "nonfinite_rewards": 2,  # step 4, and the NaN state's reward (the distance to the origin is NaN)
        "implausible_rewards": 0,  # the fault env declares no reward bound
        "recoveries": 5,
        "env_rebuilds": 3,  # physics error, NaN state, implausible state; obs/reward faults only reset
        "incidents_dropped": 0,
    }


def test_implausible_state_is_caught_by_the_task_check(make_fault_env: MakeEnv, recorder: IncidentRecorder) -> None:
    env = SafeStep(make_fault_env(), recorder=recorder)
    env.reset(seed=0)
    env.unwrapped.perturb_state(10.0)
    _, reward, terminated, _, info = env.step(ZERO)
    assert terminated and reward == -10.0
    assert info["safe_step"]["reason"] == "base speed 100 m/s exceeds the limit 10 m/s"
    assert info["safe_step"]["rebuilt"] and env.counters["implausible_states"] == 1
    # With the check off, the same blow-up goes unnoticed: finite numbers, nothing to see.
    unchecked = SafeStep(make_fault_env(), SafeStepConfig(check_state=False))
    unchecked.reset(seed=0)
    unchecked.unwrapped.perturb_state(10.0)
    _, _, terminated, _, info = unchecked.step(ZERO)
    assert not terminated and "safe_step" not in info


def test_only_a_rebuild_cures_a_poisoned_world(make_fault_env: MakeEnv) -> None:
    # The plain env cannot be rebuilt: after a NaN state every step is NaN again, as PyBullet after a NaN torque.
    # SafeStep still returns a finite observation every time (reset, penalty); the simulated one rebuilds once.
    plain = SafeStep(make_fault_env({2: "nan_state"}, simulated=False))
    simulated = SafeStep(make_fault_env({2: "nan_state"}))
    for env in (plain, simulated):
        env.reset(seed=0)
        ended = []
        for _ in range(6):
            obs, _, terminated, _, _ = env.step(PUSH)
            assert np.isfinite(obs).all()
            ended.append(terminated)
        expected = [False] + [True] * 5 if env is plain else [False, True] + [False] * 4
        assert ended == expected


def test_history_and_snapshot_allow_a_replay(
    make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path
) -> None:
    # Snapshots every 4 steps: before steps 1 (the reset) and 5. A physics error at step 7 records the snapshot taken
    # before step 5, age 2; history rows -3, -2 are steps 5 and 6, the last row is step 7 (the faulty one).
    cfg = SafeStepConfig(history_len=8, state_interval=4)
    env = SafeStep(make_fault_env({7: "physics_error"}), cfg, recorder=recorder)
    env.reset(seed=3)
    actions = [np.array([0.1 * i, -0.05 * i], dtype=np.float32) for i in range(1, 8)]
    for a in actions:
        env.step(a)
    (record,) = records(run_dir)
    assert pick(record, "kind", "sim_state_age", "history_len") == ("physics_error", 2, 7)
    arrays = load_incident_arrays(run_dir / "incidents", record)
    np.testing.assert_array_equal(arrays["history_actions"], actions)
    fresh = make_fault_env()
    fresh.reset(seed=0)
    fresh.set_sim_state({"pos": arrays["state.pos"], "vel": arrays["state.vel"]})
    for a in arrays["history_actions"][-(record["sim_state_age"] + 1) : -1]:
        obs, *_ = fresh.step(a)
    # The replay reaches the observation the policy saw before the faulty step.
    np.testing.assert_allclose(obs, arrays["history_obs"][-1], rtol=0, atol=1e-7)


def test_history_ring_wraps_oldest_first(make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path) -> None:
    env = SafeStep(
        make_fault_env({10: "nan_reward"}), SafeStepConfig(history_len=4, state_interval=2), recorder=recorder
    )
    env.reset(seed=0)
    for i in range(1, 11):
        env.step(np.array([i / 10, 0.0], dtype=np.float32))
    (record,) = records(run_dir)
    arrays = load_incident_arrays(run_dir / "incidents", record)
    np.testing.assert_allclose(arrays["history_actions"][:, 0], [0.7, 0.8, 0.9, 1.0], rtol=1e-6)
    assert arrays["history_obs"].shape == (4, 4) and record["reward"] == "nan"


def test_physics_error_at_reset_is_recovered(
    make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = SafeStep(make_fault_env(), recorder=recorder)
    env.reset(seed=0)
    env.unwrapped.break_simulation()
    obs, _ = env.reset()
    assert np.isfinite(obs).all() and env.unwrapped.rebuilds == 1
    (record,) = records(run_dir)
    assert pick(record, "kind", "phase", "rebuilt", "history_len") == ("physics_error", "reset", True, 0)


def make_unfixable(make_fault_env: MakeEnv) -> gym.Env:
    """A fault env whose rebuild does not bring the engine back."""
    env = make_fault_env()

    def rebuild_without_reconnecting() -> None:
        env.rebuilds += 1

    env.rebuild_simulation = rebuild_without_reconnecting
    return env


def test_an_env_that_cannot_come_back_stops_with_a_clear_error(
    make_fault_env: MakeEnv, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = SafeStep(make_unfixable(make_fault_env), SafeStepConfig(max_rebuild_attempts=2), recorder=recorder)
    env.reset(seed=0)
    env.unwrapped.break_simulation()
    with pytest.raises(RecoveryError, match=r"env 0 \(SimFaultEnv\): still broken after 2 rebuild-and-reset attempts "
                       r"\(last: conftest\.FaultEngineError: Not connected to physics server\.\)"):  # fmt: skip
        env.step(PUSH)
    assert env.unwrapped.rebuilds == 3  # the step's recovery, then two retries
    assert [(r["kind"], r["phase"]) for r in records(run_dir)] == [("physics_error", "step")] + [
        ("physics_error", "reset")
    ] * 3


def test_bugs_are_not_swallowed(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env({1: "bug"}))
    env.reset(seed=0)
    with pytest.raises(KeyError, match="a bug in the task"):
        env.step(PUSH)


def test_wrong_action_shape_is_a_caller_error(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env(), env_index=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"env 4 \(SimFaultEnv\): action of shape \(3,\), expected .* \(2,\)"):
        env.step(np.zeros(3))


def test_counts_without_a_recorder_and_counts_drops_with_one(make_fault_env: MakeEnv, run_dir: Path) -> None:
    faults = {2: "nan_obs", 4: "nan_obs", 6: "nan_obs"}
    unrecorded = SafeStep(make_fault_env(faults))
    capped = SafeStep(make_fault_env(faults), recorder=IncidentRecorder(run_dir / "incidents", max_records=1))
    for env in (unrecorded, capped):
        env.reset(seed=0)
        for _ in range(6):
            env.step(PUSH)
        assert env.counters["nonfinite_obs"] == 3
    assert unrecorded.counters["incidents_dropped"] == 0 and capped.counters["incidents_dropped"] == 2
    assert len(records(run_dir)) == 1


def test_a_time_limit_inside_is_respected(make_fault_env: MakeEnv) -> None:
    env = SafeStep(make_fault_env(max_episode_steps=3))
    env.reset(seed=0)
    truncations = [env.step(PUSH)[3] for _ in range(3)]
    assert truncations == [False, False, True]
