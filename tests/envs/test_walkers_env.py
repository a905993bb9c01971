"""The planar walkers (HalfCheetah, Hopper, Walker2D) through the gymnasium API and the simulator protocol:
spaces, checker, seeding, rendering, state records with their root joints, checks, fault injection, and SafeStep
in front (a NaN action does not poison the world)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robosafe_tasks
from robosafe_tasks.base import LocomotionEnv

#: id -> (observation size, action names, observed feet). Observation: 8 + 2 per motor + 1 per foot.
WALKERS = {
    "RoboSafe/HalfCheetah-v0": (
        26,
        ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"],
        ("ffoot", "fshin", "fthigh", "bfoot", "bshin", "bthigh"),
    ),
    "RoboSafe/Hopper-v0": (15, ["thigh_joint", "leg_joint", "foot_joint"], ("foot",)),
    "RoboSafe/Walker2D-v0": (
        22,
        ["thigh_joint", "leg_joint", "foot_joint", "thigh_left_joint", "leg_left_joint", "foot_left_joint"],
        ("foot", "foot_left"),
    ),
}
IDS = sorted(WALKERS)
UNBOUNDED_BOX_WARNING = "ignore:.*Box observation space (minimum|maximum) value is.*infinity"


@pytest.fixture(params=IDS, ids=[i.split("/")[1] for i in IDS])
def task_id(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def env(task_id: str) -> Iterator[LocomotionEnv]:
    made = gymnasium.make(task_id).unwrapped
    yield made
    made.close()


def actions_for(env: LocomotionEnv, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (steps, len(env.action_names))).astype(np.float32)


def rollout(env: LocomotionEnv, seed: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    for action in actions:
        obs, reward, *_ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
    return np.array(observations), np.array(rewards)


def test_registered_with_the_reference_time_limit(task_id: str) -> None:
    spec = gymnasium.spec(task_id)
    assert task_id in robosafe_tasks.TASKS and spec.max_episode_steps == 1000


def test_spaces_names_and_reset_observation(env: LocomotionEnv, task_id: str) -> None:
    obs_dim, names, feet = WALKERS[task_id]
    n = len(names)
    assert env.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    assert env.action_space == gymnasium.spaces.Box(-1.0, 1.0, (n,), np.float32)
    assert env.action_names == names and env.walker.foot_names == feet
    obs, info = env.reset(seed=0)
    assert obs.shape == (obs_dim,) and obs.dtype == np.float32 and info == {}
    # At the loaded pose, at rest: height above the initial height 0, target straight ahead (sin 0, cos 1), no
    # velocity, no roll or pitch; joint speeds 0; no contact shown yet.
    np.testing.assert_allclose(obs[:8], [0, 0, 1, 0, 0, 0, 0, 0], atol=1e-6)
    np.testing.assert_array_equal(obs[9 : 8 + 2 * n : 2], 0.0)
    np.testing.assert_array_equal(obs[8 + 2 * n :], 0.0)
    _, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert set(info) == {
        "reward_alive",
        "reward_progress",
        "reward_electricity",
        "reward_joints_at_limit",
        "reward_feet_collision",
    }
    assert reward == pytest.approx(sum(info.values()), abs=1e-12) and not terminated and not truncated


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
def test_gymnasium_env_checker_passes(task_id: str) -> None:
    env = gymnasium.make(task_id, render_mode="rgb_array")
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_same_seed_same_trajectory_different_seed_differs(task_id: str) -> None:
    first, second = gymnasium.make(task_id).unwrapped, gymnasium.make(task_id).unwrapped
    try:
        actions = actions_for(first, 30)
        obs_a, rew_a = rollout(first, 7, actions)
        rollout(second, 3, actions)  # another episode first must not matter
        obs_b, rew_b = rollout(second, 7, actions)
        np.testing.assert_array_equal(obs_a, obs_b)
        np.testing.assert_array_equal(rew_a, rew_b)
        assert not np.array_equal(rollout(second, 8, actions)[0][0], obs_a[0])
    finally:
        first.close()
        second.close()


def test_renders_headless_looking_at_the_torso(task_id: str) -> None:
    env = gymnasium.make(task_id, render_mode="rgb_array", render_width=64, render_height=48).unwrapped
    try:
        env.reset(seed=0)
        # Move the torso 5 m down the track through its x slide: the camera follows the torso, not the fixed base.
        state = env.get_sim_state()
        state["root_joint_pos"] = state["root_joint_pos"] + np.array([5.0, 0.0, 0.0])
        env.set_sim_state(state)
        image = env.render()
        assert image is not None and image.shape == (48, 64, 3) and image.dtype == np.uint8
        # The robot (coloured capsules) is in the middle of a white and blue checker floor.
        centre = image[16:32, 21:43].reshape(-1, 3).astype(int)
        assert np.any(np.ptp(centre, axis=1) > 60)
    finally:
        env.close()


def test_sim_state_carries_the_root_joints_and_reproduces_the_next_steps(task_id: str) -> None:
    original, copy = gymnasium.make(task_id).unwrapped, gymnasium.make(task_id).unwrapped
    try:
        actions = actions_for(original, 15, seed=1)
        original.reset(seed=1)
        for action in actions[:10]:
            obs, *_ = original.step(action)
        state = original.get_sim_state()
        assert state["root_joint_pos"].shape == (3,) and state["root_joint_vel"].shape == (3,)
        assert state["root_joint_pos"][0] != 0.0  # the torso moved along x
        copy.reset(seed=2)
        restored = copy.set_sim_state(state)
        # The joints are shown as they were. The torso's entries may not: after a step the reference (and the
        # original) read the torso link's cached transform, one substep (0.004 s) old, where the restored world's is
        # current; a torso falling at 2 m/s is 8 mm lower. The next step brings both to the same state.
        np.testing.assert_allclose(restored[8:], obs[8:], atol=1e-6)
        np.testing.assert_allclose(restored[:8], obs[:8], atol=0.05)
        for action in actions[10:]:
            obs_a, reward_a, term_a, _, _ = original.step(action)
            obs_b, reward_b, term_b, _, _ = copy.step(action)
            np.testing.assert_allclose(obs_b, obs_a, atol=1e-5)
            assert reward_b == pytest.approx(reward_a, abs=1e-6) and term_b == term_a
        after_a, after_b = original.get_sim_state(), copy.get_sim_state()
        for key in after_a:
            np.testing.assert_allclose(after_b[key], after_a[key], rtol=0, atol=1e-8, err_msg=key)
    finally:
        original.close()
        copy.close()


def test_set_sim_state_rejects_a_record_without_root_joints(env: LocomotionEnv) -> None:
    env.reset(seed=0)
    state = env.get_sim_state()
    with pytest.raises(ValueError, match=r"sim state lacks keys \['root_joint_pos'\]"):
        env.set_sim_state({k: v for k, v in state.items() if k != "root_joint_pos"})
    with pytest.raises(ValueError, match="sim state 'root_joint_vel' is not finite"):
        env.set_sim_state({**state, "root_joint_vel": np.array([0.0, np.inf, 0.0])})


@pytest.mark.parametrize("scale", [1.5, 10.0, 1e3])
def test_perturb_state_throws_the_torso_past_the_limits(env: LocomotionEnv, scale: float) -> None:
    env.reset(seed=0)
    env.perturb_state(scale)
    state = env.get_sim_state()
    limits = env.walker.limits
    # The slides throw the torso at scale * base_speed along (1, 0, 1) / sqrt(2), without spin.
    speed = scale * limits.base_speed
    np.testing.assert_allclose(state["root_joint_vel"], [speed / math.sqrt(2), speed / math.sqrt(2), 0.0], rtol=1e-12)
    np.testing.assert_allclose(state["base_lin_vel"], [speed / math.sqrt(2), 0.0, speed / math.sqrt(2)], rtol=1e-12)
    assert env.check_state() == f"base speed {speed:.4g} m/s exceeds the limit {limits.base_speed:g} m/s"
    # The safety layer perturbs before a step and checks after it: the blow-up must survive the step.
    env.step(np.zeros(len(env.action_names), dtype=np.float32))
    assert env.check_state() is not None


def test_nan_action_poisons_the_world_and_the_next_reset_rebuilds_it(env: LocomotionEnv) -> None:
    actions = actions_for(env, 20)
    fresh = rollout(env, 5, actions)[0]
    env.reset(seed=5)
    obs, reward, terminated, _, _ = env.step(np.full(len(env.action_names), np.nan, dtype=np.float32))
    assert terminated and np.isnan(obs).any() and math.isnan(reward)
    assert env.check_state().startswith("non-finite state in base_pos")
    np.testing.assert_array_equal(rollout(env, 5, actions)[0], fresh)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_safe_step_keeps_a_bad_action_from_the_engine(task_id: str, bad: float) -> None:
    safe_step = pytest.importorskip("robo_safe_rl.bridge.safe_step")
    env = safe_step.SafeStep(gymnasium.make(task_id))
    try:
        env.reset(seed=0)
        n = env.action_space.shape[0]
        action = np.zeros(n, dtype=np.float32)
        action[1] = bad
        obs, reward, terminated, _, info = env.step(action)
        assert np.isfinite(obs).all() and math.isfinite(reward)
        assert info["safe_step"]["actions_sanitised"] == 1 and env.unwrapped.check_state() is None
        for action in actions_for(env.unwrapped, 10):  # the episode goes on in a clean world
            obs, reward, terminated, truncated, _ = env.step(action)
            assert np.isfinite(obs).all() and math.isfinite(reward)
            if terminated or truncated:
                env.reset()
        assert env.unwrapped.check_state() is None
    finally:
        env.close()


def test_fire_drill_every_injected_fault_is_accounted_for(task_id: str, tmp_path) -> None:
    faults = pytest.importorskip("robo_safe_rl.bridge.faults")
    from robo_safe_rl.bridge.incidents import IncidentRecorder
    from robo_safe_rl.bridge.safe_step import SafeStep, sum_counters
    from robo_safe_rl.config.safe_step import EnvFaultConfig
    from robo_safe_rl.safety.incident_kinds import COUNTER_OF_KIND, KIND_OF_FAULT

    drill = EnvFaultConfig(
        action_nonfinite=0.03, obs_nonfinite=0.03, reward_nonfinite=0.03, physics_error=0.02, state_blowup=0.02, seed=3
    )
    recorder = IncidentRecorder(tmp_path / "incidents", max_records=50)
    envs = []
    for i in range(4):
        inner = faults.EnvFaultInjector(gymnasium.make(task_id), drill, env_index=i)
        envs.append(faults.ActionFaultInjector(SafeStep(inner, env_index=i, recorder=recorder), drill, env_index=i))
        envs[-1].reset(seed=i)
    rng = np.random.default_rng(0)
    n = envs[0].action_space.shape[0]
    try:
        for _ in range(150):
            for env in envs:
                obs, reward, terminated, truncated, _ = env.step(rng.uniform(-1, 1, n).astype(np.float32))
                assert np.isfinite(obs).all() and math.isfinite(reward)
                if terminated or truncated:
                    env.reset()
        injected = faults.sum_injected(envs)
        assert set(injected) == set(KIND_OF_FAULT) and min(injected.values()) >= 1, injected
        counters = sum_counters(envs)
        for fault, kind in KIND_OF_FAULT.items():
            assert counters[COUNTER_OF_KIND[kind]] == injected[fault], (fault, counters, injected)
        for env in envs:
            assert env.unwrapped.check_state() is None
    finally:
        for env in envs:
            env.close()
