"""The Ant's reward terms and termination, checked on hand-built states against numbers worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pybullet
import pytest

from robosafe_tasks.ant import AntEnv
from robosafe_tasks.physics import PhysicsSettings

# Joint ranges of mjcf/ant.xml in rad: hips +-40 degrees, ankles 30..100 degrees (legs 1 and 4) or -100..-30.
HIP_MID = 0.0
ANKLE_MID = np.deg2rad(65.0)  # 1.1345 rad; the relative position of a joint at its mid-range is 0
MID_RANGE = np.array([HIP_MID, ANKLE_MID, HIP_MID, -ANKLE_MID, HIP_MID, -ANKLE_MID, HIP_MID, ANKLE_MID])


@pytest.fixture
def ant() -> Iterator[AntEnv]:
    env = AntEnv()
    yield env
    env.close()


def pose(env: AntEnv, **changes: np.ndarray) -> np.ndarray:
    """Set the current sim state with some arrays changed (at rest unless changed) and return the observation."""
    state = env.get_sim_state()
    state.update(base_lin_vel=np.zeros(3), base_ang_vel=np.zeros(3), joint_vel=np.zeros(8))
    state.update(changes)
    return env.set_sim_state(state)


def test_progress_of_a_rigid_translation_is_21_22_of_the_speed() -> None:
    # Without gravity and damping, an ant in the air with joints at rest at mid-range and zero torque is a rigid
    # body in free flight: thrown at vx = 1 m/s, the torso and its 20 links move 1 m/s * 0.0165 s = 0.0165 m along x
    # per step. The body centre is the mean of those 21 points and the floor origin (the reference counts the floor
    # among the parts), and the walk target is 1000 m down x with the ant on the x axis, so progress
    # = -(d_new - d_old) / dt = (mean x displacement of the 22 points) / 0.0165 s.
    # Link positions are PyBullet's cached link transforms (getLinkState without computeForwardKinematics, as the
    # reference), which lag the base by one substep: in the first step the links show 3 of the 4 substeps
    # (0.75 * 0.0165 m), progress = (1 + 20 * 0.75) / 22 = 16/22 = 0.727272...; in the second the links make up a
    # whole step, progress = 21/22 = 0.954545... (the steady value: speed * 21/22).
    # Nothing moves at a joint: electricity 0, stall 0 (zero action), no joint at its limit (all at mid-range),
    # torso at 2 m > 0.26 m: alive +1. Reward = 1 + 21/22.
    env = AntEnv(settings=PhysicsSettings(gravity=0.0))
    try:
        env.reset(seed=0)
        # PyBullet damps multibody base velocities by default (0.04); a free flight must keep its speed.
        pybullet.changeDynamics(env.robot_id, -1, linearDamping=0.0, angularDamping=0.0, physicsClientId=env.client_id)
        zero = np.zeros(8, dtype=np.float32)
        pose(env, base_pos=np.array([0.0, 0.0, 2.0]), base_orn=np.array([0.0, 0.0, 0.0, 1.0]), joint_pos=MID_RANGE)
        # One step at rest records the potential of this pose (set_sim_state restores the stored one as given, here
        # that of the reset pose); the pose itself does not change.
        env.step(zero)
        pose(env, base_lin_vel=np.array([1.0, 0.0, 0.0]))
        _, _, _, _, first = env.step(zero)
        _, reward, terminated, _, info = env.step(zero)
        torso_x = env.get_sim_state()["base_pos"][0]
    finally:
        env.close()
    assert torso_x == pytest.approx(2 * 0.0165, rel=1e-12)
    assert first["reward_progress"] == pytest.approx(16.0 / 22.0, rel=1e-9)
    assert info["reward_progress"] == pytest.approx(21.0 / 22.0, rel=1e-9)
    assert info["reward_electricity"] == 0.0
    assert info["reward_joints_at_limit"] == 0.0
    assert info["reward_alive"] == 1.0
    assert info["reward_feet_collision"] == 0.0
    assert reward == pytest.approx(1.0 + 21.0 / 22.0, rel=1e-9)
    assert not terminated


def test_costs_of_a_known_action(ant: AntEnv) -> None:
    # Ant in the air at 2 m, all joints at 0 rad and at rest. The hips (range +-40 degrees) are mid-range; the
    # ankles at 0 rad are 30 degrees outside their ranges, relative position 2 (0 -+ 65) / 70 = -+1.857, and one
    # 0.0165 s step cannot bring them back within 0.99: 4 joints at their limit, cost -0.1 * 4 = -0.4.
    # Action a = (2, -1, 0.5, 0, 0, 0, 0, -0.5): as in the reference the costs use the action as given (the torques
    # clip 2 to 1). Stall cost -0.1 * mean(a^2) = -0.1 * (4 + 1 + 0.25 + 0.25) / 8 = -0.06875.
    # Electricity -2.0 * mean(|a_i * 0.1 qdot_i|) with the joint speeds qdot (rad/s) after the step: only the four
    # non-zero actions count: -2.0 / 8 * 0.1 * (2 |qdot_0| + |qdot_1| + 0.5 |qdot_2| + 0.5 |qdot_7|).
    ant.reset(seed=0)
    pose(ant, base_pos=np.array([0.0, 0.0, 2.0]), base_orn=np.array([0.0, 0.0, 0.0, 1.0]), joint_pos=np.zeros(8))
    action = np.array([2.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0, -0.5], dtype=np.float32)
    _, reward, terminated, _, info = ant.step(action)
    qdot = ant.get_sim_state()["joint_vel"]
    electricity = -2.0 / 8 * 0.1 * (2 * abs(qdot[0]) + abs(qdot[1]) + 0.5 * abs(qdot[2]) + 0.5 * abs(qdot[7]))
    assert abs(qdot[0]) > 1.0  # full torque on hip_1 does move it: the electricity term is not trivially 0
    assert info["reward_electricity"] == pytest.approx(electricity - 0.06875, rel=1e-9)
    assert info["reward_joints_at_limit"] == pytest.approx(-0.4, rel=1e-12)
    assert info["reward_alive"] == 1.0
    assert reward == pytest.approx(sum(info.values()), abs=1e-12)
    assert not terminated


@pytest.mark.parametrize(("torso_z", "alive"), [(0.255, -1.0), (0.40, 1.0)])
def test_termination_when_the_torso_is_below_026_m(ant: AntEnv, torso_z: float, alive: float) -> None:
    # The torso is a 0.25 m sphere: at 0.255 m with the legs spread flat (all joints at 0 rad) it lies on the floor
    # and the episode ends with alive bonus -1; at 0.40 m it falls 0.5 * 9.8 * 0.0165^2 = 1.3 mm in one step and
    # lives on with +1.
    ant.reset(seed=0)
    pose(ant, base_pos=np.array([0.0, 0.0, torso_z]), base_orn=np.array([0.0, 0.0, 0.0, 1.0]), joint_pos=np.zeros(8))
    _, _, terminated, truncated, info = ant.step(np.zeros(8, dtype=np.float32))
    assert info["reward_alive"] == alive
    assert terminated is (alive < 0)
    assert truncated is False
