"""The Ant's simulator protocol (state records, checks, rebuilds, fault injection) and the PyBullet facts behind it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import numpy as np
import pybullet
import pytest

from robosafe_tasks import physics
from robosafe_tasks.ant import ANT_LIMITS, AntEnv

ACTIONS = np.random.default_rng(0).uniform(-1.0, 1.0, (60, 8)).astype(np.float32)
NAN_ACTION = np.full(8, np.nan, dtype=np.float32)


@pytest.fixture
def ant() -> Iterator[AntEnv]:
    env = AntEnv()
    yield env
    env.close()


def episode(env: AntEnv, seed: int, steps: int = 30) -> np.ndarray:
    """Observations of a seeded episode under ACTIONS, shape (steps + 1, 28)."""
    obs, _ = env.reset(seed=seed)
    return np.array([obs] + [env.step(a)[0] for a in ACTIONS[:steps]])


def all_finite(state: dict[str, np.ndarray]) -> bool:
    return all(np.isfinite(v).all() for v in state.values())


def test_sim_state_keys_shapes_and_dtype(ant: AntEnv) -> None:
    ant.reset(seed=0)
    ant.step(ACTIONS[0])
    state = ant.get_sim_state()
    shapes = {k: v.shape for k, v in state.items()}
    assert shapes == {
        "base_pos": (3,),
        "base_orn": (4,),
        "base_lin_vel": (3,),
        "base_ang_vel": (3,),
        "joint_pos": (8,),
        "joint_vel": (8,),
        "initial_z": (),
        "potential": (),
        "walk_target": (2,),
        "feet_contact": (4,),
        "feet_contact_obs": (4,),
        "elapsed_steps": (),
    }
    assert all(v.dtype == np.float64 for v in state.values())
    assert all_finite(state)
    np.testing.assert_array_equal(state["walk_target"], [1000.0, 0.0])
    assert state["initial_z"] == pytest.approx(0.75)
    assert state["elapsed_steps"] == 1


def test_set_sim_state_then_the_same_action_reproduces_the_next_steps() -> None:
    original, copy = AntEnv(), AntEnv()
    try:
        original.reset(seed=1)
        for action in ACTIONS[:40]:  # mid-episode, feet on the floor: contacts are part of what must carry over
            obs, *_ = original.step(action)
        state = original.get_sim_state()
        assert state["feet_contact"].any()
        copy.reset(seed=2)
        restored_obs = copy.set_sim_state(state)
        np.testing.assert_allclose(restored_obs, obs, atol=1e-6)
        for action in ACTIONS[40:45]:
            obs_a, reward_a, term_a, _, info_a = original.step(action)
            obs_b, reward_b, term_b, _, info_b = copy.step(action)
            np.testing.assert_allclose(obs_b, obs_a, atol=1e-6)
            assert reward_b == pytest.approx(reward_a, abs=1e-9)
            assert term_b == term_a
            assert info_b == pytest.approx(info_a, abs=1e-9)
            next_a, next_b = original.get_sim_state(), copy.get_sim_state()
            for key in next_a:
                np.testing.assert_allclose(next_b[key], next_a[key], rtol=0, atol=1e-9, err_msg=key)
    finally:
        original.close()
        copy.close()


def test_set_sim_state_rejects_missing_keys_wrong_shapes_and_non_finite_values(ant: AntEnv) -> None:
    ant.reset(seed=0)
    state = ant.get_sim_state()
    with pytest.raises(ValueError, match=r"sim state lacks keys \['potential'\]"):
        ant.set_sim_state({k: v for k, v in state.items() if k != "potential"})
    with pytest.raises(ValueError, match=r"sim state 'joint_pos' has shape \(7,\), expected \(8,\)"):
        ant.set_sim_state({**state, "joint_pos": np.zeros(7)})
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="sim state 'base_lin_vel' is not finite"):
            ant.set_sim_state({**state, "base_lin_vel": np.array([bad, 0.0, 0.0])})
    assert ant.check_state() is None  # nothing was written to the world


def test_check_state_passes_a_normal_episode(ant: AntEnv) -> None:
    ant.reset(seed=0)
    assert ant.check_state() is None
    for action in ACTIONS:
        ant.step(action)
        assert ant.check_state() is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_pos": np.array([0.0, 0.0, 6.0])}, "base height 6 m is outside the range [0, 5] m"),
        ({"base_pos": np.array([0.0, 0.0, -0.3])}, "base height -0.3 m is outside the range [0, 5] m"),
        ({"base_lin_vel": np.array([0.0, 30.0, 40.0])}, "base speed 50 m/s exceeds the limit 20 m/s"),
        ({"base_ang_vel": np.array([60.0, 0.0, 0.0])}, "base angular speed 60 rad/s exceeds the limit 50 rad/s"),
        (
            {"joint_vel": np.array([0.0, 0.0, 0.0, -90.0, 0.0, 0.0, 0.0, 0.0])},
            "joint speed 90 rad/s of ankle_2 exceeds the limit 80 rad/s",
        ),
    ],
)
def test_check_state_names_quantity_value_and_limit(ant: AntEnv, change: dict, message: str) -> None:
    ant.reset(seed=0)
    ant.set_sim_state({**ant.get_sim_state(), **change})
    assert ant.check_state() == message


@pytest.mark.parametrize("scale", [1.5, 10.0, 1e6])
def test_perturb_state_is_a_blow_up_that_check_state_reports(ant: AntEnv, scale: float) -> None:
    ant.reset(seed=0)
    ant.perturb_state(scale)
    speed = scale * ANT_LIMITS.base_speed
    assert ant.check_state() == f"base speed {speed:.4g} m/s exceeds the limit 20 m/s"
    # The safety layer perturbs before a step and checks after it: the blow-up must survive the step.
    ant.step(ACTIONS[0])
    assert ant.check_state() is not None


def test_nan_action_poisons_the_state_and_rebuild_recovers_a_clean_episode(ant: AntEnv) -> None:
    fresh = episode(ant, seed=5)
    ant.reset(seed=5)
    # PyBullet 3.2.7 fact: a NaN torque does not raise; after one stepSimulation the whole robot state is NaN.
    obs, reward, terminated, _, _ = ant.step(NAN_ACTION)
    assert terminated
    assert np.isnan(obs).any() and np.isnan(reward)
    state = ant.get_sim_state()
    for key in ("base_pos", "base_orn", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel"):
        assert np.isnan(state[key]).all(), key
    assert ant.check_state() == (
        "non-finite state in base_pos, base_orn, base_lin_vel, base_ang_vel, joint_pos, joint_vel"
    )
    ant.rebuild_simulation()
    np.testing.assert_array_equal(episode(ant, seed=5), fresh)


def test_reset_after_a_non_finite_state_rebuilds_by_itself(ant: AntEnv) -> None:
    fresh = episode(ant, seed=5)
    ant.reset(seed=1)
    ant.step(NAN_ACTION)
    np.testing.assert_array_equal(episode(ant, seed=5), fresh)
    assert ant.check_state() is None


def test_engine_fact_restore_state_after_a_nan_leaves_the_robot_falling_through_the_floor() -> None:
    # Why rebuild_simulation exists: the world itself is poisoned, not only the robot's state.
    client = physics.connect_direct()
    try:
        settings = physics.PhysicsSettings()
        physics.configure_engine(client, settings)
        physics.load_stadium(client, settings)
        robot = physics.load_mjcf_robot(client, "ant.xml")
        motors = physics.find_motor_joints(client, robot)
        saved = pybullet.saveState(physicsClientId=client)
        pybullet.setJointMotorControlArray(
            robot, motors.indices, pybullet.TORQUE_CONTROL, forces=[float("nan")] * 8, physicsClientId=client
        )
        pybullet.stepSimulation(physicsClientId=client)
        assert np.isnan(pybullet.getBasePositionAndOrientation(robot, physicsClientId=client)[0]).all()
        pybullet.restoreState(saved, physicsClientId=client)
        assert pybullet.getBasePositionAndOrientation(robot, physicsClientId=client)[0] == (0.0, 0.0, 0.75)
        for _ in range(40):
            pybullet.stepSimulation(physicsClientId=client)
        z = pybullet.getBasePositionAndOrientation(robot, physicsClientId=client)[0][2]
        assert z < 0.0  # a clean world holds the torso at >= 0.25 m
    finally:
        pybullet.disconnect(physicsClientId=client)


def test_break_simulation_makes_the_next_call_raise_and_rebuild_recovers(ant: AntEnv) -> None:
    ant.reset(seed=0)
    ant.break_simulation()
    with pytest.raises(pybullet.error, match=r"^Not connected to physics server\.$"):
        ant.step(ACTIONS[0])
    with pytest.raises(pybullet.error, match="Not connected to physics server"):
        ant.get_sim_state()
    ant.rebuild_simulation()
    obs, _ = ant.reset(seed=0)
    assert np.isfinite(obs).all()
    for action in ACTIONS[:10]:
        obs, *_ = ant.step(action)
    assert np.isfinite(obs).all() and ant.check_state() is None
    ant.close()
    ant.close()


def test_a_broken_env_never_steps_the_world_that_reused_its_client_id(
    ant: AntEnv, caplog: pytest.LogCaptureFixture
) -> None:
    # PyBullet hands a freed client id to a later connect. The env whose client died must then raise, as a dead
    # client does, rather than silently step the other env's world.
    ant.reset(seed=0)
    broken_id = ant.client_id
    ant.break_simulation()
    others: list[AntEnv] = []
    try:
        while len(others) < 16 and (not others or others[-1].client_id != broken_id):
            others.append(AntEnv())
        other = others[-1]
        assert other.client_id == broken_id  # PyBullet 3.2.7 reuses the lowest free id
        assert "disconnected behind its owner's back" in caplog.text
        other.reset(seed=0)
        before = other.get_sim_state()
        with pytest.raises(pybullet.error, match="Not connected to physics server"):
            ant.step(ACTIONS[0])
        assert ant.client_id == -1
        after = other.get_sim_state()
        for key in before:
            np.testing.assert_array_equal(after[key], before[key], err_msg=key)
        ant.rebuild_simulation()  # a new client of its own
        assert ant.client_id not in {env.client_id for env in others}
        ant.reset(seed=0)
    finally:
        for env in others:
            env.close()


def test_an_env_that_rebuilt_elsewhere_keeps_its_new_client_when_its_old_id_is_reused() -> None:
    lower, env = AntEnv(), AntEnv()
    others: list[AntEnv] = []
    try:
        old_id = env.client_id
        env.break_simulation()
        lower.close()  # frees a lower id, which the rebuild takes
        env.rebuild_simulation()
        assert env.client_id != old_id
        while len(others) < 16 and (not others or others[-1].client_id != old_id):
            others.append(AntEnv())
        assert others[-1].client_id == old_id
        env.reset(seed=0)
        obs, *_ = env.step(ACTIONS[0])
        assert np.isfinite(obs).all()
    finally:
        for other in others:
            other.close()
        env.close()


def test_close_after_break_simulation_does_not_raise() -> None:
    env = AntEnv()
    env.break_simulation()
    env.close()
    env.close()


def test_rebuild_simulation_takes_a_few_milliseconds(ant: AntEnv) -> None:
    ant.reset(seed=0)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        ant.rebuild_simulation()
        ant.reset(seed=0)
        times.append(time.perf_counter() - start)
    # ~3.4 ms here; the bound only catches a regression to reconnect storms or reloading from disk many times.
    assert statistics.median(times) < 0.05
