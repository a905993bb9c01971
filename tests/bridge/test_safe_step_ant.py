"""SafeStep on the real PyBullet Ant (RoboSafe/Ant-v0): bad actions, a client killed from outside, blow-ups, and
a fire drill of random faults across 16 envs."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pybullet
import pytest

from robo_safe_rl import SafeStep
from robo_safe_rl.bridge.faults import ActionFaultInjector, EnvFaultInjector, sum_injected
from robo_safe_rl.bridge.incidents import IncidentRecorder, load_incident_arrays, read_incidents
from robo_safe_rl.bridge.safe_step import sum_counters
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig
from robo_safe_rl.safety.incident_kinds import COUNTER_OF_KIND, KIND_OF_FAULT

ANT_JOINTS = ["hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3", "hip_4", "ankle_4"]
STATE_KEYS = {"base_pos", "base_orn", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel"}


def walk(env: gym.Env, steps: int, rng: np.random.Generator) -> None:
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 8).astype(np.float32))
        if terminated or truncated:
            env.reset()


@pytest.mark.filterwarnings("ignore:.*(NaN value|not within the observation space).*:UserWarning")
def test_unguarded_nan_torque_poisons_the_robot(ant_env_id: str) -> None:
    # The fact SafeStep exists for: PyBullet does not raise on a NaN torque, the state is NaN after one step.
    env = gym.make(ant_env_id)
    env.reset(seed=0)
    action = np.zeros(8, dtype=np.float32)
    action[3] = np.nan
    obs, _, terminated, _, _ = env.step(action)
    assert not np.isfinite(obs).all() and terminated
    assert env.unwrapped.check_state().startswith("non-finite state in base_pos")
    env.close()


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e10], ids=["nan", "+inf", "-inf", "1e10"])
@pytest.mark.parametrize("joints", ["one", "all"])
def test_bad_actions_never_reach_the_engine(
    value: float, joints: str, ant_env_id: str, recorder: IncidentRecorder, run_dir: Path
) -> None:
    env = SafeStep(gym.make(ant_env_id), env_index=2, recorder=recorder)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    walk(env, 5, rng)
    before = env.unwrapped.get_sim_state()
    action = np.zeros(8, dtype=np.float32)
    action[[2] if joints == "one" else slice(None)] = value
    obs, reward, terminated, _, info = env.step(action)
    assert np.isfinite(obs).all() and math.isfinite(reward) and not terminated
    assert env.unwrapped.check_state() is None
    n = 1 if joints == "one" else 8
    assert info["safe_step"]["actions_sanitised"] == n and env.counters["actions_sanitised"] == n
    walk(env, 20, rng)  # the episode goes on normally
    if math.isfinite(value):  # clipped to 1, not an incident
        assert recorder.written == 0 and info["safe_step"]["incident"] is None
        return
    (record,) = read_incidents(run_dir / "incidents")
    assert record["kind"] == "nonfinite_action" and record["nonfinite_action_elements"] == n
    assert (record["env_id"], record["env_index"], record["action_names"]) == (ant_env_id, 2, ANT_JOINTS)
    assert record["action_low"] == [-1.0] * 8 and record["action_high"] == [1.0] * 8
    expected = {math.inf: 1.0, -math.inf: -1.0}.get(value, 0.0)
    assert record["action"] == [expected if (joints == "all" or i == 2) else 0.0 for i in range(8)]
    assert record["sim_state_age"] == 0 and set(record["sim_state_keys"]) >= STATE_KEYS
    arrays = load_incident_arrays(run_dir / "incidents", record)
    for key in before:
        np.testing.assert_array_equal(arrays[f"state.{key}"], before[key])
    assert arrays["history_obs"].shape == (6, 28) and arrays["history_actions"].shape == (6, 8)
    # The recorded state restores into a fresh env and gives back the observation seen before the bad action.
    fresh = gym.make(ant_env_id)
    fresh.reset(seed=1)
    restored = fresh.unwrapped.set_sim_state({k[6:]: v for k, v in arrays.items() if k.startswith("state.")})
    np.testing.assert_allclose(restored, arrays["history_obs"][-1], rtol=0, atol=1e-5)
    fresh.close()
    env.close()


def test_client_killed_from_outside_mid_episode(ant_env_id: str, recorder: IncidentRecorder, run_dir: Path) -> None:
    env = SafeStep(gym.make(ant_env_id), recorder=recorder)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    walk(env, 30, rng)
    old_client = env.unwrapped.client_id
    pybullet.disconnect(physicsClientId=old_client)
    obs, reward, terminated, truncated, info = env.step(np.zeros(8, dtype=np.float32))
    assert np.isfinite(obs).all() and reward == -10.0 and terminated and not truncated
    assert info["safe_step"]["reason"] == "pybullet.error: Not connected to physics server."
    assert info["safe_step"]["rebuilt"] and env.counters == {**env.counters, "physics_errors": 1, "env_rebuilds": 1}
    assert pybullet.isConnected(physicsClientId=env.unwrapped.client_id)
    # The episode continues in the new world without a reset by the caller.
    for _ in range(50):
        obs, reward, terminated, _, _ = env.step(rng.uniform(-1, 1, 8).astype(np.float32))
        assert np.isfinite(obs).all() and math.isfinite(reward)
    assert env.unwrapped.check_state() is None
    (record,) = read_incidents(run_dir / "incidents")
    assert (record["kind"], record["exception_type"], record["exception"]) == (
        "physics_error",
        "pybullet.error",
        "Not connected to physics server.",
    )
    # The snapshot is at most state_interval steps old and the history reaches back to it.
    assert 0 <= record["sim_state_age"] <= SafeStepConfig().state_interval
    assert record["history_len"] >= record["sim_state_age"] + 1
    env.close()


def test_state_blowup_is_implausible_and_rebuilt(ant_env_id: str) -> None:
    env = SafeStep(gym.make(ant_env_id))
    env.reset(seed=0)
    env.unwrapped.perturb_state(10.0)
    obs, reward, terminated, _, info = env.step(np.zeros(8, dtype=np.float32))
    assert terminated and reward == -10.0 and np.isfinite(obs).all()
    assert info["safe_step"]["kinds"] == ["implausible_state"]
    assert "exceeds the limit" in info["safe_step"]["reason"] and info["safe_step"]["rebuilt"]
    assert env.unwrapped.check_state() is None
    env.close()


NUM_ENVS = 16
QUICK = EnvFaultConfig(
    action_nonfinite=0.01, obs_nonfinite=0.01, reward_nonfinite=0.01, physics_error=0.005, state_blowup=0.005, seed=5
)
FULL = EnvFaultConfig(
    action_nonfinite=0.004, obs_nonfinite=0.004, reward_nonfinite=0.004, physics_error=0.002, state_blowup=0.002, seed=6
)


@pytest.mark.parametrize(
    ("steps_per_env", "drill", "max_records"),
    [
        # 10,000 env steps in all (~3 s); every kind about 50 to 100 times.
        pytest.param(625, QUICK, 250, id="10k-env-steps"),
        # 5,000 steps of each of the 16 envs: 80,000 Ant steps, ~20 s on one free core; every kind 150 to 350 times
        # (as many as 10,000 steps of each env at half these rates gave, in half the time).
        pytest.param(5_000, FULL, 1000, id="5k-steps-x-16-envs", marks=pytest.mark.slow),
    ],
)
def test_fire_drill_across_16_envs(
    steps_per_env: int, drill: EnvFaultConfig, max_records: int, ant_env_id: str, run_dir: Path
) -> None:
    recorder = IncidentRecorder(run_dir / "incidents", max_records=max_records)
    envs = []
    for i in range(NUM_ENVS):
        inner = EnvFaultInjector(gym.make(ant_env_id), drill, env_index=i)
        envs.append(ActionFaultInjector(SafeStep(inner, env_index=i, recorder=recorder), drill, env_index=i))
        envs[-1].reset(seed=i)
    rng = np.random.default_rng(0)
    for t in range(steps_per_env):
        actions = rng.uniform(-1, 1, (NUM_ENVS, 8)).astype(np.float32)
        for i, env in enumerate(envs):
            obs, reward, terminated, truncated, _ = env.step(actions[i])
            if not (np.isfinite(obs).all() and math.isfinite(reward)):
                pytest.fail(f"env {i} step {t}: non-finite observation or reward escaped")
            if terminated or truncated:
                env.reset()
    injected = sum_injected(envs)
    assert set(injected) == set(KIND_OF_FAULT) and min(injected.values()) >= 20, injected
    counters = sum_counters(envs)
    for fault, kind in KIND_OF_FAULT.items():
        assert counters[COUNTER_OF_KIND[kind]] == injected[fault], (fault, counters, injected)
        accounted = recorder.written_by_kind.get(kind.value, 0) + recorder.dropped_by_kind.get(kind.value, 0)
        assert accounted == injected[fault], (fault, recorder.written_by_kind, recorder.dropped_by_kind, injected)
    assert recorder.written == len(read_incidents(run_dir / "incidents")) == max_records
    assert counters["incidents_dropped"] == recorder.dropped > 0
    assert counters["env_rebuilds"] == injected["physics_error"] + injected["state_blowup"]
    for env in envs:
        env.close()
