"""The A1 task through the gymnasium API: spaces, observation layout, checker, seeding, time limit, rendering,
configuration errors, terminations and the randomisation switches."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import numpy as np
import pybullet
import pytest
from a1_helpers import A1_ID, QUIET, place, quiet_a1
from gymnasium.utils.env_checker import check_env
from omegaconf import OmegaConf

import robosafe_tasks
from benchmarks.a1_rewards import trot
from robosafe_tasks.a1 import A1FlatEnv, robot

UNBOUNDED_BOX_WARNING = "ignore:.*Box observation space (minimum|maximum) value is.*infinity"


@pytest.fixture
def a1() -> Iterator[A1FlatEnv]:
    env = quiet_a1()
    yield env
    env.close()


def test_registered_with_the_20_s_time_limit() -> None:
    assert robosafe_tasks.TASKS[A1_ID] == "robosafe_tasks.a1:A1FlatEnv"
    # 1000 steps of 4 x 5 ms: Isaac Lab's episode_length_s = 20.
    assert gymnasium.spec(A1_ID).max_episode_steps == 1000
    env = A1FlatEnv()
    assert env.step_dt == pytest.approx(0.02)
    env.close()


def test_spaces_and_the_observation_of_the_standing_pose(a1: A1FlatEnv) -> None:
    assert a1.observation_space.shape == (48,) and a1.action_space == gymnasium.spaces.Box(-10, 10, (12,), np.float32)
    assert a1.action_names[:3] == ["FR_hip_joint", "FR_upper_joint", "FR_lower_joint"] and len(a1.action_names) == 12
    obs, info = a1.reset(seed=0)
    assert obs.dtype == np.float32 and info == {}
    # At rest, level, in the standing pose: zero velocities, gravity straight down the base's -z, joint offsets zero.
    np.testing.assert_allclose(obs[0:6], 0.0, atol=1e-7)
    np.testing.assert_allclose(obs[6:9], [0.0, 0.0, -1.0], atol=1e-7)
    np.testing.assert_allclose(obs[12:48], 0.0, atol=1e-6)
    c = a1.get_sim_state()["command"]
    np.testing.assert_array_equal(obs[9:12], c.astype(np.float32))
    # Heading mode: the yaw rate is 0.5 * heading error, within [-1, 1].
    assert abs(c[0]) <= 1.0 and abs(c[1]) <= 1.0 and abs(c[2]) <= 1.0
    obs, reward, terminated, truncated, info = a1.step(np.zeros(12, np.float32))
    assert isinstance(reward, float) and terminated is False and truncated is False
    assert info["reward_terms"].shape == (len(a1.reward_terms),)
    assert reward == pytest.approx(float(info["reward_terms"].sum()), abs=1e-12)


def test_metrics_are_the_tracking_errors_of_the_step_command() -> None:
    # A command that holds for the whole test, as a fixed yaw-rate command (no heading controller): the observation
    # shows the step's command beside the base-frame velocities the errors compare it with.
    env = quiet_a1(commands={"heading_command": False, "resampling_time_s": [100.0, 100.0], "rel_standing_envs": 0.0})
    try:
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs, _, _, _, info = env.step(rng.normal(0.0, 1.0, 12).astype(np.float32))
            v, w, c = obs[0:3].astype(np.float64), obs[3:6].astype(np.float64), obs[9:12].astype(np.float64)
            assert info["metrics"]["error_vel_xy"] == pytest.approx(math.hypot(c[0] - v[0], c[1] - v[1]), abs=1e-6)
            assert info["metrics"]["error_vel_yaw"] == pytest.approx(abs(c[2] - w[2]), abs=1e-6)
        assert info["metrics"]["error_vel_xy"] > 0.0  # random actions do not follow the command
    finally:
        env.close()


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
def test_check_env_with_every_randomisation_on() -> None:
    env = A1FlatEnv()
    check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.filterwarnings(UNBOUNDED_BOX_WARNING)
def test_check_env_through_make() -> None:
    env = gymnasium.make(A1_ID)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def _rollout(seed: int, steps: int = 30) -> np.ndarray:
    env = A1FlatEnv()  # every event and the noise on: all of them must follow the seed
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    out = [obs]
    for _ in range(steps):
        obs, reward, _, _, _ = env.step(rng.uniform(-1.0, 1.0, 12).astype(np.float32))
        out.append(np.append(obs, reward))
    env.close()
    return np.concatenate(out)


def test_same_seed_same_trajectory_different_seed_differs() -> None:
    first, again, other = _rollout(3), _rollout(3), _rollout(4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_time_limit_truncates() -> None:
    env = gymnasium.make(A1_ID, max_episode_steps=3, **QUIET)
    env.reset(seed=0)
    flags = [env.step(np.zeros(12, np.float32))[3] for _ in range(3)]
    assert flags == [False, False, True]
    env.close()


def test_render_headless_shows_the_robot() -> None:
    env = quiet_a1(render_mode="rgb_array", render_width=64, render_height=48)
    env.reset(seed=0)
    image = env.render()
    assert image.shape == (48, 64, 3) and image.dtype == np.uint8
    assert image.std() > 5.0  # not a blank frame: robot and floor differ
    env.close()
    assert quiet_a1().render() is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rewards": {"feet_air_tim": 1.0}}, r"env_kwargs.rewards: unknown keys \['feet_air_tim'\]"),
        ({"commands": {"lin_vel_x": [1.0, -1.0]}}, r"env_kwargs.commands.lin_vel_x must be a range"),
        ({"events": {"friction": {"enabled": "yes"}}}, r"env_kwargs.events.friction.enabled must be true or false"),
        ({"rewards": {"lin_vel_z_l2": math.nan}}, r"env_kwargs.rewards.lin_vel_z_l2 must be a finite float"),
        ({"control": {"decimation": 0}}, r"env_kwargs.control.decimation must be >= 1"),
        ({"render_mode": "human"}, r"render_mode must be one of"),
        ({"curriculum": {"dof_acc": {"weight": -1.0}}}, r"env_kwargs.curriculum: unknown reward terms \['dof_acc'\]"),
        ({"curriculum": {"dof_acc_l2": {"num_steps": -5}}}, r"env_kwargs.curriculum.dof_acc_l2.num_steps must be >= 0"),
        ({"curriculum": {"dof_acc_l2": {"weigth": 1.0}}}, r"curriculum.dof_acc_l2: unknown keys \['weigth'\]"),
        ({"curriculum": {"dof_acc_l2": -1.0}}, r"env_kwargs.curriculum.dof_acc_l2 must be a mapping"),
    ],
)
def test_bad_settings_name_their_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        A1FlatEnv(**kwargs)


def test_trunk_on_the_ground_terminates_unless_switched_off() -> None:
    for base_contact in (True, False):
        env = quiet_a1(terminations={"base_contact": base_contact, "bad_orientation": False})
        env.reset(seed=0)
        place(env, z=0.3, roll=math.pi)  # upside down: its trunk hits the floor after 26 steps (0.5 s)
        ends = [env.step(np.zeros(12, np.float32))[2] for _ in range(40)]
        assert any(ends) is base_contact
        env.close()


def test_tilt_beyond_the_limit_terminates_unless_switched_off() -> None:
    for bad_orientation in (True, False):
        env = quiet_a1(terminations={"base_contact": False, "bad_orientation": bad_orientation, "limit_angle": 1.0})
        env.reset(seed=0)
        place(env, z=1.0, roll=1.2)  # in the air, rolled 1.2 rad > 1.0
        assert env.step(np.zeros(12, np.float32))[2] is bad_orientation
        env.reset(seed=0)
        place(env, z=1.0, roll=0.8)
        assert env.step(np.zeros(12, np.float32))[2] is False
        env.close()


def _events(**on: dict) -> dict:
    events = {name: dict(value) for name, value in QUIET["events"].items()}
    events.update(on)
    return {"events": events}


def test_randomisation_switches() -> None:
    off = quiet_a1()
    off.reset(seed=0)
    w = off._world
    q, _ = w.joint_arrays()
    np.testing.assert_allclose(q, robot.DEFAULT_JOINT_POS, atol=1e-12)
    assert pybullet.getDynamicsInfo(w.robot, robot.TRUNK, physicsClientId=w.client)[0] == pytest.approx(w.trunk_mass)
    assert pybullet.getDynamicsInfo(w.robot, 3, physicsClientId=w.client)[1] == 1.0
    off.close()

    draws = {"friction": set(), "mass": set(), "yaw": set()}
    for seed in range(3):
        env = quiet_a1(**_events(**{k: {"enabled": True} for k in ("friction", "added_mass", "joint_scale", "yaw")}))
        env.reset(seed=seed)
        w = env._world
        friction = pybullet.getDynamicsInfo(w.robot, 3, physicsClientId=w.client)[1]
        added = pybullet.getDynamicsInfo(w.robot, robot.TRUNK, physicsClientId=w.client)[0] - w.trunk_mass
        assert 0.5 <= friction <= 1.25 and -1.0 <= added <= 3.0
        q, _ = w.joint_arrays()
        assert not np.allclose(q, robot.DEFAULT_JOINT_POS)
        assert np.all(q >= w.joint_low - 1e-9) and np.all(q <= w.joint_high + 1e-9)
        draws["friction"].add(friction)
        draws["mass"].add(round(added, 9))
        draws["yaw"].add(round(env.get_sim_state()["base_orn"][2], 9))
        env.close()
    assert all(len(values) == 3 for values in draws.values())


def test_pushes_add_their_velocity_at_their_interval() -> None:
    # A push every 20 ms (each step) of exactly +0.5 m/s in x and y, against the same episode without pushes.
    push = {"push_interval_s": {"enabled": True, "range": [0.02, 0.02]}, "push_velocity": [0.5, 0.5]}
    pushed, calm = quiet_a1(**_events(**push)), quiet_a1()
    shown = []
    for env in (pushed, calm):
        env.reset(seed=0)
        shown.append(env.step(np.zeros(12, np.float32))[0])
    difference = pushed.get_sim_state()["base_lin_vel"] - calm.get_sim_state()["base_lin_vel"]
    np.testing.assert_allclose(difference, [0.5, 0.5, 0.0], atol=1e-9)
    # The step's observation shows the pushed velocity (in the base frame: the trunk is nearly level, yaw 0).
    np.testing.assert_allclose(shown[0][:2] - shown[1][:2], [0.5, 0.5], atol=0.01)
    pushed.close()
    calm.close()


def test_the_first_substep_reads_the_state_the_env_left() -> None:
    # One substep per step: its PD torques come from the joint states the last query kept (reset, step, a push,
    # set_sim_state), which must be the engine's current ones, whatever happened since the previous step.
    push = {"push_interval_s": {"enabled": True, "range": [0.04, 0.04]}, "push_velocity": [0.5, 0.5]}
    env = quiet_a1(control={"decimation": 1}, **_events(**push))
    other = quiet_a1(control={"decimation": 1})
    other.reset(seed=3)
    moment = other.get_sim_state()
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for step in range(8):
        if step == 5:
            env.set_sim_state(moment)
        q, qd = env._world.joint_arrays()
        a = rng.uniform(-1.0, 1.0, 12)
        env.step(a)
        expected = robot.pd_torques(robot.DEFAULT_JOINT_POS + 0.25 * a, q, qd, env.cfg.control)
        np.testing.assert_array_equal(env._torques, expected)
    env.close()
    other.close()


def test_settings_read_from_the_task_yaml_as_omegaconf_containers() -> None:
    # `--list-tasks` builds each task from its YAML as OmegaConf reads it (ListConfig ranges, DictConfig sections).
    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "task" / "a1_flat.yaml")
    env = A1FlatEnv(**cfg.env_kwargs)
    assert env.cfg.commands.resampling_time_s == (10.0, 10.0) and env.cfg.events.friction.range == (0.5, 1.25)
    assert env.cfg == A1FlatEnv().cfg  # the YAML spells out the defaults
    env.close()


def test_an_open_loop_trot_carries_the_trunk_on_the_feet() -> None:
    # The physics admits a gait, so a policy that does not walk has not learned one: 5 s of a fixed trot at 2 Hz move
    # the quiet A1 2.10 m backwards and 0.29 m sideways (0.42 m/s; the trunk at 0.22 m; zero actions drift 0.06 m),
    # without a termination (no trunk contact, no tilt beyond the limit). With the thigh's phase shifted by half a
    # period it trots forwards, slower (0.20 m/s; 0.24 m/s with a thigh swing of +-1.0). (With PyBullet's
    # collision-shape inertias instead of the URDF's, lighter legs, the same trot ran 0.59 m/s.)
    env = quiet_a1()
    env.reset(seed=0)
    start = env.get_sim_state()["base_pos"].copy()
    for step in range(250):
        terminated = env.step(trot(step, env.step_dt))[2]
        assert not terminated
    moved = env.get_sim_state()["base_pos"] - start
    assert moved[0] < -1.8 and abs(moved[1]) < 1.0
    assert env.get_sim_state()["base_pos"][2] > 0.15
    env.close()
