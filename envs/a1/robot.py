"""The Unitree A1 of pybullet_data (``a1/a1.urdf``) in its own DIRECT client: world building, PD torques, contacts.

The URDF (12.46 kg, 12 revolute joints, legs in the order FR, FL, RR, RL, each hip (x axis), upper (y), lower (y))
follows Unitree's sign conventions, so Isaac Lab's standing pose of ``UNITREE_A1_CFG`` applies as it is (the "thigh"
and "calf" joints of Isaac Lab's asset are ``upper`` and ``lower`` here). The feet are the fixed ``*_toe`` links
(2 cm spheres).

Why an explicit PD law with the joint motors disabled, rather than PyBullet's POSITION_CONTROL: Isaac Lab's A1
actuator is an explicit DC-motor model (``DCMotorCfg``: torque = Kp (q* - q) - Kd q', clipped by a torque-speed
curve, recomputed every physics step), and its gains are in N m/rad and N m s/rad. PyBullet's POSITION_CONTROL is a
velocity constraint solved with the contacts, whose ``positionGain`` / ``velocityGain`` are dimensionless error
reduction factors and whose only limit is a constant ``force``: the same 25 / 0.5 cannot be written in it, and the
torque it applied (needed for the torque penalty) is only known after the step. Measured on the standing A1 with the
standing pose as target, 1 s (a shared 2-core machine, so the times are rough): the explicit law holds the trunk at
0.277 m with the joints 0.19 rad off their targets under the robot's weight (what Kp = 25 N m/rad means: Isaac Lab's
A1 sags the same way), 1.1 ms per policy step (4 substeps, each a joint query, a torque command and a
``stepSimulation``); POSITION_CONTROL (positionGain 0.2 to 0.5, velocityGain 1, force 33.5, one ``stepSimulation``
of 4 substeps) holds it at 0.300 m, 0.002 rad off, in 0.9 ms: a stiffer servo that no N m/rad value describes, for
20% less time.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pybullet
import pybullet_data

from robosafe_tasks import physics
from robosafe_tasks.a1.config import ControlConfig

URDF_FILE = "a1/a1.urdf"
#: Trunk height at spawn in m (``UNITREE_A1_CFG.init_state.pos``).
SPAWN_HEIGHT = 0.42
#: Motor joints in action order (the URDF's order).
JOINT_NAMES: tuple[str, ...] = tuple(
    f"{leg}_{part}_joint" for leg in ("FR", "FL", "RR", "RL") for part in ("hip", "upper", "lower")
)
#: Standing pose in rad (``UNITREE_A1_CFG.init_state.joint_pos``: left hips 0.1, right hips -0.1, front thighs 0.8,
#: rear thighs 1.0, calves -1.5).
DEFAULT_JOINT_POS: tuple[float, ...] = (
    -0.1, 0.8, -1.5,  # FR
    0.1, 0.8, -1.5,  # FL
    -0.1, 1.0, -1.5,  # RR
    0.1, 1.0, -1.5,  # RL
)  # fmt: skip
FOOT_LINKS: tuple[str, ...] = ("FR_toe", "FL_toe", "RR_toe", "RL_toe")
#: Links whose contact with the ground is undesired (Isaac Lab: ``.*THIGH``).
THIGH_LINKS: tuple[str, ...] = ("FR_upper", "FL_upper", "RR_upper", "RL_upper")
#: Link index of the trunk (the base).
TRUNK = -1


def load_plane(client: int) -> int:
    """Load pybullet_data's plane (the flat task's ground) and return its body id."""
    return pybullet.loadURDF(os.path.join(pybullet_data.getDataPath(), "plane.urdf"), physicsClientId=client)


def load_world(client: int, control: ControlConfig, load_ground: Callable[[int], int] = load_plane) -> tuple[int, int]:
    """Configure an empty world (gravity, a 1/200 s substep) and load the ground and the A1 standing above it.

    Args:
        client: Physics client id.
        control: Substep length (``sim_dt``).
        load_ground: Loads the ground into ``client`` and returns its body id (a plane, or the rough task's height
            field).

    Returns:
        ``(ground, robot)`` body ids.
    """
    # One stepSimulation per substep: the PD torques are recomputed before each, as Isaac Lab does.
    physics.configure_engine(
        client, physics.PhysicsSettings(gravity=9.81, timestep=control.sim_dt, frame_skip=1, solver_iterations=50)
    )
    data = pybullet_data.getDataPath()
    ground = load_ground(client)
    # Isaac Lab's terrain material: friction 1.0, restitution 0 (combined by multiplication, as Bullet does).
    for link in range(-1, pybullet.getNumJoints(ground, physicsClientId=client)):
        pybullet.changeDynamics(ground, link, lateralFriction=1.0, restitution=0.0, physicsClientId=client)
    # URDF_USE_INERTIA_FROM_FILE: without it PyBullet replaces each link's inertia tensor by that of its collision
    # shapes at the URDF's mass, and the A1's legs turn far lighter than the robot's: the calf 0.00057 kg m^2 about its
    # axis instead of 0.0030, the thigh 0.0035 instead of 0.0055. Isaac Lab's dof_acc_l2 penalty of the same behaviour
    # is then 1.5-1.8 times as large (BENCHMARKS.md, "The A1's inertias").
    robot = pybullet.loadURDF(
        os.path.join(data, URDF_FILE),
        [0.0, 0.0, SPAWN_HEIGHT],
        useFixedBase=False,
        flags=pybullet.URDF_USE_INERTIA_FROM_FILE,
        physicsClientId=client,
    )
    # PyBullet gives every link 0.04 linear and angular damping; Isaac Lab's A1 has none.
    for link in range(-1, pybullet.getNumJoints(robot, physicsClientId=client)):
        pybullet.changeDynamics(robot, link, linearDamping=0.0, angularDamping=0.0, physicsClientId=client)
    return ground, robot


def pd_torques(target: np.ndarray, q: np.ndarray, qd: np.ndarray, control: ControlConfig) -> np.ndarray:
    """Isaac Lab's ``DCMotor``: PD torque clipped by the motor's torque-speed curve.

    ``tau = Kp (target - q) - Kd qd``, then clipped to ``[sat (-1 - qd/v_max), sat (1 - qd/v_max)]`` intersected with
    ``[-effort_limit, effort_limit]`` (saturation effort = effort limit for the A1), so a joint turning at the
    velocity limit can no longer be driven faster.

    Args:
        target: Joint targets in rad. Shape: (12,).
        q: Joint positions in rad. Shape: (12,).
        qd: Joint velocities in rad/s. Shape: (12,).
        control: Gains and limits.

    Returns:
        Torques in N m. Shape: (12,). NaN in ``target`` gives NaN torques (nothing here hides a bad action).
    """
    tau = control.stiffness * (target - q) - control.damping * qd
    sat, limit = control.effort_limit, control.effort_limit
    ratio = qd / control.velocity_limit
    # minimum/maximum rather than np.clip (a Python-level wrapper, twice as slow at this size); both keep NaN.
    high = np.minimum(np.maximum(sat * (1.0 - ratio), 0.0), limit)
    low = np.minimum(np.maximum(sat * (-1.0 - ratio), -limit), 0.0)
    return np.minimum(np.maximum(tau, low), high)


def link_contact_forces(client: int, robot: int, ground: int, num_links: int) -> list[float]:
    """Total normal contact force of each robot link on the ground, in N.

    Args:
        client: Physics client id.
        robot: Body id of the robot.
        ground: Body id of the ground.
        num_links: Number of robot links (``getNumJoints``).

    Returns:
        ``num_links + 1`` forces: index ``link + 1`` (the trunk, link -1, is index 0).
    """
    forces = [0.0] * (num_links + 1)
    for point in pybullet.getContactPoints(bodyA=robot, bodyB=ground, physicsClientId=client):
        forces[point[3] + 1] += point[9]  # point[3]: the robot's link index; point[9]: normal force in N
    return forces
