"""The Walker2D task: pybullet_envs' ``Walker2DBulletEnv-v0`` on gymnasium (registered as ``RoboSafe/Walker2D-v0``).

The two-legged walker of pybullet_data ``mjcf/walker2d.xml``: a torso capsule (centre of mass at 1.25 m) and two
legs of thigh, leg and foot, moving in the x-z plane, walks towards a target 1 km down the x axis. Observation (22,),
action (6,), reward and termination are those of the reference; see :mod:`envs.base` for the walker logic and the
deliberate differences.

Planar root: the torso rides on three unactuated joints over a fixed base at the origin, ``ignorex`` (x slide),
``ignorez`` (z slide), ``ignorey`` (pitch hinge), treated as the reference treats them (see :mod:`envs.hopper`).

Action order (``action_names``): thigh_joint, leg_joint, foot_joint, thigh_left_joint, leg_left_joint,
foot_left_joint. Torque = 0.40 * 100 * clip(action, -1, 1) N m, except the feet: 0.40 * 30 (``Walker2D.
robot_specific_reset`` sets their ``power_coef`` to 30). The episode ends as the Hopper's: torso centre of mass at or
below 0.8 m, or |pitch| of 1 rad or more.

Reference score: rl-baselines3-zoo's PPO reaches 2110 on ``Walker2DBulletEnv-v0`` at 2M env steps.
"""

from __future__ import annotations

from robosafe_tasks.base import LocomotionEnv
from robosafe_tasks.hopper import HOPPER_MAX_PITCH, HOPPER_MIN_TORSO_Z
from robosafe_tasks.spec import StateLimits, WalkerSpec

WALKER2D_LIMITS = StateLimits(
    base_height=(0.0, 5.0),
    base_speed=20.0,
    base_angular_speed=50.0,
    joint_speed=80.0,
)

WALKER2D_REWARD_BOUND = 200.0

WALKER2D_SPEC = WalkerSpec(
    mjcf_file="walker2d.xml",
    foot_names=("foot", "foot_left"),
    power=0.40,
    limits=WALKER2D_LIMITS,
    reward_bound=WALKER2D_REWARD_BOUND,
    joint_power_coefs={"foot_joint": 30.0, "foot_left_joint": 30.0},
    torso_link="torso",
    root_joints=("ignorex", "ignorez", "ignorey"),
)


class Walker2DEnv(LocomotionEnv):
    """pybullet_envs' ``Walker2DBulletEnv-v0`` as a gymnasium env with the simulator protocol.

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels. Default 320.
        render_height: Height of rendered images in pixels. Default 240.
        settings: Engine settings; the default is the pybullet_envs stadium scene.
    """

    walker = WALKER2D_SPEC

    def alive_bonus(self, z: float, pitch: float) -> float:
        """+1 while the torso is above 0.8 m and |pitch| < 1 rad, else -1 (the episode ends).

        Args:
            z: Torso height in m.
            pitch: Torso pitch in rad.

        Returns:
            +1.0 or -1.0.
        """
        return 1.0 if z > HOPPER_MIN_TORSO_Z and abs(pitch) < HOPPER_MAX_PITCH else -1.0
