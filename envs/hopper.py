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
    # The torso capsule has radius 0.05 m: its centre of mass below the floor surface means it is passing through
    # the floor (what a poisoned world does). Measured up to 1.32 m; 10 m is far above any hop of 75 N m legs.
    base_height=(0.0, 10.0),
    # Measured over 20 episodes of uniform and of bang-bang random actions (episodes of 5 to 30 steps, mostly falls):
    # torso speed <= 8.2 m/s, torso angular speed <= 34 rad/s, joint speed <= 49 rad/s. The bounds leave room for
    # strong learned hops and hard falls.
    base_speed=20.0,
    base_angular_speed=80.0,
    # Below PyBullet's 100 rad/s cap on multibody joint speeds (see ant.py), or it could never fire.
    joint_speed=80.0,
)

# |reward| of one step for any state within HOPPER_LIMITS and an action in [-1, 1], term by term (as ant.py):
# - alive: +-1.
# - progress: at most the body centre's speed, the mean of 11 points (10 link centres of mass, the fixed floor
#   origin; the fixed base is no part), so at most 10/11 of the fastest point's. Link centres of mass lie within
#   1.25 m of the torso's (the root joints' dummy links sit at the hinge, 1.25 m below it), and a chain of motor joints
#   carries a point at most 0.96 + 0.51 + 0.07 = 1.53 m (thigh, leg, foot joint to the farthest centre of mass beyond
#   each): 20 m/s + 80 rad/s * 1.25 m + 80 rad/s * 1.53 m = 243 m/s; 10/11 of it is 221.
# - electricity: 2.0 * 0.1 * 80 = 16; stall torque: 0.1; joints at their limit: 0.1 * 3 = 0.3.
# Total 239; the bound leaves room on top and is still ~40x what a step earns (|reward| <= 6.9 measured, above).
HOPPER_REWARD_BOUND = 300.0

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
