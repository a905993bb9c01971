"""The A1 under the safety layer: a non-finite joint target poisons PyBullet in one step, SafeStep keeps it from
the engine; the simulator protocol (state records, limits, rebuilds); the fire drill and a short training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from a1_helpers import quiet_a1
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from robo_safe_rl.apps.train import main
from robo_safe_rl.bridge.protocol import is_simulated
from robo_safe_rl.bridge.safe_step import SafeStep
from robosafe_tasks.a1 import A1FlatEnv
from robosafe_tasks.a1.sim_state import STATE_SHAPES

ROBOT_KEYS = ("base_pos", "base_orn", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel")


def nonfinite_action(value: float) -> np.ndarray:
    action = np.zeros(12, np.float32)
    action[4] = value  # one joint target of the FL leg
    return action


def test_one_nan_joint_target_poisons_the_whole_world_without_the_bridge() -> None:
    env = quiet_a1()
    env.reset(seed=0)
    # PyBullet 3.2.7 fact: a NaN torque does not raise; after one step every quantity of the robot is NaN, not just
    # the joint that was given it.
    obs, reward, terminated, _, _ = env.step(nonfinite_action(math.nan))
    state = env.get_sim_state()
    assert terminated and np.isnan(obs).any() and math.isnan(reward)
    assert all(np.isnan(state[key]).all() for key in ROBOT_KEYS)
    assert env.check_state().startswith("non-finite state in base_pos, base_orn")
    # The next reset rebuilds the world: the same seed gives the same first observation as a fresh env.
    again, _ = env.reset(seed=3)
    fresh = quiet_a1()
    np.testing.assert_array_equal(again, fresh.reset(seed=3)[0])
    env.close()
    fresh.close()


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_an_infinite_joint_target_saturates_the_motor_but_poisons_observation_and_reward(value: float) -> None:
    # The DC motor's torque clip turns an infinite PD torque into a limit torque, so the world stays finite (NaN is
    # what passes any clip, see above); but the observation's last action and the action-rate penalty are infinite.
    env = quiet_a1()
    env.reset(seed=0)
    obs, reward, _, _, _ = env.step(nonfinite_action(value))
    state = env.get_sim_state()
    assert all(np.isfinite(state[key]).all() for key in ROBOT_KEYS)
    assert np.isfinite(obs[:36]).all() and obs[36 + 4] == value
    assert reward == -math.inf  # -0.01 * (inf - 0)^2 * 0.02
    env.close()


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_safe_step_keeps_nonfinite_targets_from_the_engine(value: float) -> None:
    env = SafeStep(quiet_a1())
    env.reset(seed=0)
    for step in range(5):
        obs, reward, terminated, _, _info = env.step(nonfinite_action(value) if step == 2 else np.zeros(12, np.float32))
        assert np.isfinite(obs).all() and math.isfinite(reward) and not terminated
    state = env.unwrapped.get_sim_state()
    assert all(np.isfinite(state[key]).all() for key in ROBOT_KEYS)
    c = env.counters
    assert c["nonfinite_actions"] == 1 and c["actions_sanitised"] == 1
    assert c["recoveries"] == 0 and c["env_rebuilds"] == 0 and c["nonfinite_states"] == 0
    env.close()


def test_implements_the_simulator_protocol_and_its_state_record() -> None:
    env = A1FlatEnv()
    assert is_simulated(env)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(10):
        env.step(rng.uniform(-1, 1, 12))
    state = env.get_sim_state()
    assert {k: v.shape for k, v in state.items()} == STATE_SHAPES
    assert all(v.dtype == np.float64 and np.isfinite(v).all() for v in state.values())
    # Restored into another env, the same actions give the same next states (not bitwise: the contact solver's
    # warm start is not part of the state).
    other = A1FlatEnv(obs_noise=False)
    other.reset(seed=9)
    other.set_sim_state(state)
    env_quiet = A1FlatEnv(obs_noise=False)
    env_quiet.reset(seed=9)
    env_quiet.set_sim_state(state)
    for _ in range(5):
        a = rng.uniform(-1, 1, 12)
        first = env_quiet.step(a)
        second = other.step(a)
        np.testing.assert_allclose(first[0], second[0], atol=1e-6)
    bad = dict(state, joint_vel=np.full(12, np.nan))
    with pytest.raises(ValueError, match="'joint_vel' is not finite"):
        other.set_sim_state(bad)
    with pytest.raises(ValueError, match=r"lacks keys \['command'\]"):
        other.set_sim_state({k: v for k, v in state.items() if k != "command"})
    for e in (env, other, env_quiet):
        e.close()


def test_check_state_passes_an_episode_and_reports_a_blow_up() -> None:
    env = A1FlatEnv()
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(50):
        env.step(rng.uniform(-1, 1, 12))
        assert env.check_state() is None
    env.perturb_state(10.0)
    assert env.check_state() == "base speed 100 m/s exceeds the limit 10 m/s"
    env.close()


def test_a_broken_client_is_rebuilt_by_safe_step() -> None:
    env = SafeStep(quiet_a1())
    env.reset(seed=0)
    env.unwrapped.break_simulation()
    obs, _reward, terminated, _, info = env.step(np.zeros(12, np.float32))
    assert terminated and info["safe_step"]["kinds"] == ["physics_error"] and info["safe_step"]["rebuilt"]
    assert np.isfinite(obs).all()
    obs, _, terminated, _, _ = env.step(np.zeros(12, np.float32))
    assert np.isfinite(obs).all() and not terminated
    env.close()


@pytest.mark.slow
def test_gauntlet_drill_on_the_a1(tmp_path: Path) -> None:
    run_dir = tmp_path / "drill"
    args = ["+drill=gauntlet", "task=a1_flat", "task.num_envs=4", "task.num_workers=0", "runner.max_iterations=4"]
    assert main([*args, "runner.save_interval=2", f"run_dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    injected, safety = summary["faults_injected"], summary["safety"]
    assert summary["status"] == "completed"
    # 4 iterations x 4 envs x 24 steps = 384 env steps: the env-side faults fired (rates 0.005 to 0.02 per step).
    for kind, counter in {
        "action_nonfinite": "nonfinite_actions",
        "obs_nonfinite": "nonfinite_obs",
        "reward_nonfinite": "nonfinite_rewards",
        "physics_error": "physics_errors",
        "state_blowup": "implausible_states",
    }.items():
        assert injected.get(kind, 0) > 0 or kind in ("physics_error", "state_blowup"), kind
        assert safety[counter] == injected.get(kind, 0), (kind, counter)
    assert safety["env_rebuilds"] >= safety["physics_errors"] + safety["implausible_states"]
    assert safety["checkpoints_refused"] == 0


@pytest.mark.slow
def test_trains_and_logs_each_reward_term_and_tracking_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # Episodes of 12 steps, so that every iteration of 24 steps ends some and logs their terms.
    args = ["task=a1_flat", "task.num_envs=2", "task.num_workers=0", "task.max_episode_steps=12"]
    assert main([*args, "runner.max_iterations=2", f"run_dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["env_steps"] == 96
    events = EventAccumulator(str(run_dir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {f"Episode_Reward/{name}" for name in A1FlatEnv().reward_terms}
    expected |= {"Metrics/error_vel_xy", "Metrics/error_vel_yaw"}
    assert expected <= tags, sorted(expected - tags)
    assert all(math.isfinite(events.Scalars(tag)[-1].value) for tag in expected)
