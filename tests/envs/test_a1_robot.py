"""The A1's actuator: Isaac Lab's DC-motor PD law on worked examples, and the robot standing on it."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET

import numpy as np
import pybullet
import pybullet_data
import pytest
from a1_helpers import quiet_a1

from robosafe_tasks.a1 import robot
from robosafe_tasks.a1.config import ControlConfig


def test_pd_torques_follow_the_dc_motor_curve() -> None:
    target = np.array([1.0, 10.0, 10.0, -10.0, 0.0, math.nan])
    q = np.zeros(6)
    qd = np.array([0.0, 0.0, 21.0, 0.0, -10.5, 0.0])
    tau = robot.pd_torques(target, q, qd, ControlConfig())
    # 25 N m/rad * 1 rad; 250 N m clipped to 33.5; at the 21 rad/s velocity limit the motor cannot push forward (0);
    # -250 clipped to -33.5; at -10.5 rad/s pure damping 0.5 * 10.5 = 5.25 N m (the curve allows 33.5 * 1.5,
    # clipped to 33.5); NaN stays NaN (no clip hides a bad target).
    np.testing.assert_array_equal(tau[:5], [25.0, 33.5, 0.0, -33.5, 5.25])
    assert math.isnan(tau[5])


def test_stands_on_its_pd_law() -> None:
    # Zero actions hold the standing pose: dropped from 0.42 m, the robot rocks fore and aft on its soft gains
    # (Kd = 0.5 N m s/rad) for ~3 s; after 4 s the trunk rests at ~0.28 m, each joint within 0.25 rad of its target
    # (Kp = 25 N m/rad against the robot's weight), and nothing has terminated.
    env = quiet_a1()
    env.reset(seed=0)
    ends = [env.step(np.zeros(12, np.float32))[2] for _ in range(200)]
    state = env.get_sim_state()
    assert not any(ends)
    assert 0.25 < state["base_pos"][2] < 0.31
    assert np.abs(state["joint_pos"] - robot.DEFAULT_JOINT_POS).max() < 0.25
    assert np.abs(state["base_lin_vel"]).max() < 0.05
    assert env.check_state() is None
    env.close()


def test_joint_names_and_standing_pose_match_isaac_lab() -> None:
    assert robot.JOINT_NAMES[:3] == ("FR_hip_joint", "FR_upper_joint", "FR_lower_joint")
    # Left hips +0.1, right hips -0.1, front thighs 0.8, rear thighs 1.0, calves -1.5 (UNITREE_A1_CFG).
    pose = dict(zip(robot.JOINT_NAMES, robot.DEFAULT_JOINT_POS, strict=True))
    assert pose["FL_hip_joint"] == 0.1 and pose["RR_hip_joint"] == -0.1
    assert pose["FR_upper_joint"] == 0.8 and pose["RL_upper_joint"] == 1.0
    assert all(pose[f"{leg}_lower_joint"] == -1.5 for leg in ("FR", "FL", "RR", "RL"))
    assert pytest.approx(0.02) == ControlConfig().step_dt


def _urdf_principal_inertia(link: str) -> np.ndarray:
    """The principal moments of ``link``'s inertia tensor as the URDF file writes it, ascending."""
    root = ET.parse(os.path.join(pybullet_data.getDataPath(), robot.URDF_FILE)).getroot()
    i = root.find(f"./link[@name='{link}']/inertial/inertia").attrib
    tensor = np.array(
        [
            [i["ixx"], i["ixy"], i["ixz"]],
            [i["ixy"], i["iyy"], i["iyz"]],
            [i["ixz"], i["iyz"], i["izz"]],
        ],
        dtype=np.float64,
    )
    return np.linalg.eigvalsh(tensor)


def test_the_links_turn_with_the_urdfs_inertias() -> None:
    # Without URDF_USE_INERTIA_FROM_FILE PyBullet gives each link the inertia of its collision shapes: the calf's
    # moments would be about 0.00057 kg m^2 where the URDF says 0.0030 (about five times lighter in rotation, and
    # every joint acceleration of a gait larger). PyBullet keeps the tensor's principal moments.
    env = quiet_a1()
    names = {
        pybullet.getJointInfo(env.robot_id, j, physicsClientId=env.client_id)[12].decode(): j
        for j in range(pybullet.getNumJoints(env.robot_id, physicsClientId=env.client_id))
    }
    for link in ("FR_hip", "FR_upper", "RL_lower"):
        got = pybullet.getDynamicsInfo(env.robot_id, names[link], physicsClientId=env.client_id)[2]
        np.testing.assert_allclose(sorted(got), _urdf_principal_inertia(link), rtol=1e-4, atol=1e-9)
    calf = pybullet.getDynamicsInfo(env.robot_id, names["RL_lower"], physicsClientId=env.client_id)[2]
    assert 0.0029 < max(calf) < 0.0031
    env.close()
