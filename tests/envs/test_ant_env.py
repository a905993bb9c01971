"""The Ant task through the gymnasium API: spaces, checker, seeding, time limit, rendering, closing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import numpy as np
import pybullet
import pytest
from gymnasium.utils.env_checker import check_env

import robosafe_tasks
from robosafe_tasks.ant import AntEnv

ANT_ID = "RoboSafe/Ant-v0"
REPO_ROOT = Path(__file__).resolve().parents[2]
# The reference's observation space is Box(-inf, inf); gymnasium's checker warns about unbounded boxes.
UNBOUNDED_BOX_WARNING = "ignore:.*Box observation space (minimum|maximum) value is.*infinity"


@pytest.fixture
def ant() -> Iterator[AntEnv]:
    env = AntEnv()
    yield env
    env.close()


def rollout(env: gymnasium.Env, seed: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Observations (len(actions) + 1, 28) and rewards (len(actions),) of one seeded episode."""
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    for action in actions:
        obs, reward, _, _, _ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
    return np.array(observations), np.array(rewards)


def test_spaces_and_names(ant: AntEnv) -> None:
    assert ant.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (28,), np.float32)
    assert ant.action_space == gymnasium.spaces.Box(-1.0, 1.0, (8,), np.float32)
    assert ant.action_names == ["hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3", "hip_4", "ankle_4"]
    assert ant.physics_error_types == (pybullet.error,)
    obs, info = ant.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (28,) and info == {}
    obs, reward, terminated, truncated, info = ant.step(ant.action_space.sample())
    assert obs.dtype == np.float32 and obs.shape == (28,)
    assert isinstance(reward, float) and terminated is False and truncated is False
    assert set(info) == {
        "reward_alive",
        "reward_progress",
        "reward_electricity",
        "reward_joints_at_limit",
        "reward_feet_collision",
    }
    assert reward == pytest.approx(sum(info.values()), abs=1e-12)


def test_reset_observation_is_the_loaded_pose(ant: AntEnv) -> None:
    obs, _ = ant.reset(seed=0)
    # Height above the initial height, heading to a target straight ahead, all velocities, roll, pitch: zero.
    np.testing.assert_allclose(obs[:8], [0, 0, 1, 0, 0, 0, 0, 0], atol=1e-5)
    # Joint speeds (odd entries of the joint block) are zero. Joints start within 0.1 rad of 0: hips in a +-40 degree
    # (+-0.698 rad) range, relative position |q| / 0.698 <= 0.143; ankles outside their 30..100 degree ranges
    # (mid 1.134 rad, span 1.222 rad; sign by leg), relative position 2 (1.134 -+ 0.1) / 1.222 in [1.693, 2.021].
    joints = obs[8:24]
    np.testing.assert_array_equal(joints[1::2], 0.0)
    assert np.all(np.abs(joints[0::4]) <= 0.144)
    assert np.all((np.abs(joints[2::4]) >= 1.693) & (np.abs(joints[2::4]) <= 2.021))
    # No foot contact is shown right after a reset.
    np.testing.assert_array_equal(obs[24:], 0.0)


def test_observation_entries_beyond_5_are_clipped_and_the_others_kept(ant: AntEnv) -> None:
    # The observation skips clipping when every entry is within +-5, so both paths are checked on one state, built by
    # hand at the loaded pose (yaw 0, so the heading-frame speed is the world x speed). Worked values: forward speed
    # 0.3 * 30 m/s = 9 -> 5; joint speeds 0.1 * 70 rad/s = 7 -> 5 and 0.1 * -70 = -7 -> -5; 0.1 * 1 rad/s = 0.1 kept.
    ant.reset(seed=0)
    state = ant.get_sim_state()
    state["base_lin_vel"] = np.array([30.0, 0.0, 0.0])
    state["joint_vel"] = np.array([70.0, -70.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    obs = ant.set_sim_state(state)
    assert obs[3] == 5.0
    assert (obs[9], obs[11], obs[13]) == (5.0, -5.0, np.float32(0.1))
    # Within range everywhere: nothing clipped, the joint speed is float32(0.1 * 1 rad/s) exactly.
    state["base_lin_vel"] = np.array([1.0, 0.0, 0.0])
    state["joint_vel"] = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    obs = ant.set_sim_state(state)
    assert obs[3] == np.float32(0.3) and obs[13] == np.float32(0.1)
    assert np.all(np.abs(obs) <= 5.0)


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
@pytest.mark.filterwarnings("ignore:.*Not able to test alternative render modes")  # covered through make below
def test_check_env_unwrapped() -> None:
    env = AntEnv(render_mode="rgb_array")
    try:
        check_env(env)
    finally:
        env.close()


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
def test_check_env_through_make() -> None:
    env = gymnasium.make(ANT_ID, render_mode="rgb_array")
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_importing_envs_registers_the_ant() -> None:
    assert ANT_ID in robosafe_tasks.TASKS
    spec = gymnasium.spec(ANT_ID)
    assert spec.max_episode_steps == 1000
    assert spec.entry_point == "robosafe_tasks.ant:AntEnv"


def test_same_seed_same_trajectory_different_seed_differs() -> None:
    actions = np.random.default_rng(0).uniform(-1, 1, (40, 8)).astype(np.float32)
    first, second = AntEnv(), AntEnv()
    try:
        obs_a, rew_a = rollout(first, 7, actions)
        rollout(second, 3, actions)  # a different history before the same seed must not matter
        obs_b, rew_b = rollout(second, 7, actions)
        np.testing.assert_array_equal(obs_a, obs_b)
        np.testing.assert_array_equal(rew_a, rew_b)
        obs_c, _ = rollout(second, 8, actions)
        assert not np.array_equal(obs_a[0], obs_c[0])
    finally:
        first.close()
        second.close()


def test_time_limit_truncates_at_1000_steps() -> None:
    env = gymnasium.make(ANT_ID)
    try:
        env.reset(seed=0)
        # Half torque on every ankle towards its far limit presses the feet down and holds the torso at ~0.6 m, so
        # the episode runs into the time limit (with zero torque the ant sinks onto its torso and terminates).
        stand = 0.5 * np.array([0, 1, 0, -1, 0, -1, 0, 1], dtype=np.float32)
        for step in range(1, 1001):
            _, _, terminated, truncated, _ = env.step(stand)
            assert not terminated
            assert truncated == (step == 1000)
    finally:
        env.close()


def test_time_limit_follows_make_kwargs() -> None:
    env = gymnasium.make(ANT_ID, max_episode_steps=5)
    try:
        env.reset(seed=0)
        flags = [env.step(np.zeros(8, dtype=np.float32))[3] for _ in range(5)]  # the ant sinks for ~20 steps
        assert flags == [False, False, False, False, True]
    finally:
        env.close()


def test_wrong_action_shape_is_rejected(ant: AntEnv) -> None:
    ant.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must have shape \(8,\), got \(7,\)"):
        ant.step(np.zeros(7, dtype=np.float32))


def test_unknown_render_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="render_mode must be one of \\['rgb_array'\\] or None, got 'human'"):
        AntEnv(render_mode="human")


@pytest.mark.parametrize(("width", "height"), [(320, 240), (64, 48)])
def test_render_returns_an_rgb_image_of_the_ant(width: int, height: int) -> None:
    env = AntEnv(render_mode="rgb_array", render_width=width, render_height=height)
    try:
        env.reset(seed=0)
        image = env.render()
        assert image is not None
        assert image.shape == (height, width, 3) and image.dtype == np.uint8
        # The ant (coloured limbs) sits in the middle of a white and blue checker floor.
        centre = image[height // 3 : 2 * height // 3, width // 3 : 2 * width // 3].reshape(-1, 3).astype(int)
        assert np.any(np.ptp(centre, axis=1) > 100)
    finally:
        env.close()


def test_render_without_mode_returns_none(ant: AntEnv) -> None:
    ant.reset(seed=0)
    assert ant.render() is None


def test_close_frees_the_client_and_is_idempotent() -> None:
    env = AntEnv()
    env.reset(seed=0)
    client = env.client_id
    assert pybullet.isConnected(physicsClientId=client)
    env.close()
    with pytest.raises(pybullet.error, match="Not connected to physics server"):
        pybullet.getNumBodies(physicsClientId=client)
    env.close()
    assert env.client_id == -1
    # A closed env stays closed: before, a step raised pybullet.error, which SafeStep took for a dead client and
    # answered with a new simulation behind the caller's back.
    for call in (lambda: env.step(np.zeros(8, dtype=np.float32)), env.reset, env.rebuild_simulation):
        with pytest.raises(gymnasium.error.ClosedEnvironmentError, match=r"AntEnv\.\w+\(\) after close\(\)"):
            call()
    assert env.client_id == -1


def test_implements_the_simulator_protocol(ant: AntEnv) -> None:
    protocol = pytest.importorskip("robo_safe_rl.bridge.protocol")
    assert protocol.is_simulated(ant)


def test_envs_imports_neither_rsl_rl_nor_robo_safe_rl() -> None:
    # In a fresh interpreter: this process may have imported robo_safe_rl for other tests.
    code = (
        "import sys, robosafe_tasks, robosafe_tasks.ant, gymnasium; gymnasium.make('RoboSafe/Ant-v0').close(); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'robo_safe_rl', 'rsl_rl', 'torch'}); "
        "sys.exit(str(bad) if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
