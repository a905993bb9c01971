"""The Hopper task: pybullet_envs' ``HopperBulletEnv-v0`` on gymnasium (registered as ``RoboSafe/Hopper-v0``).

The one-legged hopper of pybullet_data ``mjcf/hopper.xml``: a torso capsule (centre of mass at 1.25 m), thigh, leg
and foot, moving in the x-z plane, hops towards a target 1 km down the x axis. Observation (15,), action (3,),
reward and termination are those of the reference; see :mod:`envs.base` for the walker logic and the deliberate
differences.

Planar root: the MJCF file carries the torso on three unactuated joints over a fixed base at the origin, ``ignore1``
(x slide), ``ignore2`` (z slide), ``ignore3`` (pitch hinge). As in the reference they are free (their default motors
disabled), not observed and not actuated, and each reset puts them back at 0 with zero velocity; the torso is the
link ``torso``, whose cached pose and computed velocity are what the observation and the reward read.

Action order (``action_names``): thigh_joint, leg_joint, foot_joint. Torque = 0.75 * 100 * clip(action, -1, 1) N m.
The episode ends when the torso's centre of mass is at or below 0.8 m or its |pitch| is 1 rad or more.

Reference score: rl-baselines3-zoo's PPO reaches 2575 on ``HopperBulletEnv-v0`` at 2M env steps.
"""

from __future__ import annotations

from robosafe_tasks.base import LocomotionEnv
from robosafe_tasks.spec import StateLimits, WalkerSpec

#: The Hopper and the Walker2D are alive while the torso's centre of mass is above 0.8 m and |pitch| < 1 rad.
HOPPER_MIN_TORSO_Z = 0.8
HOPPER_MAX_PITCH = 1.0

HOPPER_LIMITS = StateLimits(
    base_height=(0.0, 5.0),
    base_speed=20.0,
    base_angular_speed=50.0,
    joint_speed=80.0,
)

HOPPER_REWARD_BOUND = 200.0

HOPPER_SPEC = WalkerSpec(
    mjcf_file="hopper.xml",
    foot_names=("foot",),
    power=0.75,
    limits=HOPPER_LIMITS,
    reward_bound=HOPPER_REWARD_BOUND,
    torso_link="torso",
    root_joints=("ignore1", "ignore2", "ignore3"),
)


class HopperEnv(LocomotionEnv):
    """pybullet_envs' ``HopperBulletEnv-v0`` as a gymnasium env with the simulator protocol.

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels. Default 320.
        render_height: Height of rendered images in pixels. Default 240.
        settings: Engine settings; the default is the pybullet_envs stadium scene.
    """

    walker = HOPPER_SPEC

    def alive_bonus(self, z: float, pitch: float) -> float:
        """+1 while the torso is above 0.8 m and |pitch| < 1 rad, else -1 (the episode ends).

        Args:
            z: Torso height in m.
            pitch: Torso pitch in rad.

        Returns:
            +1.0 or -1.0.
        """
        return 1.0 if z > HOPPER_MIN_TORSO_Z and abs(pitch) < HOPPER_MAX_PITCH else -1.0
