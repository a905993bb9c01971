"""The HalfCheetah task: pybullet_envs' ``HalfCheetahBulletEnv-v0`` on gymnasium (``RoboSafe/HalfCheetah-v0``).

The planar cheetah of pybullet_data ``mjcf/half_cheetah.xml``: a 1 m torso capsule at 0.7 m with a head, a back and
a front leg of thigh, shin and foot, moving in the x-z plane, runs towards a target 1 km down the x axis.
Observation (26,), action (6,) and reward are those of the reference; see :mod:`envs.base` for the walker logic and
the deliberate differences.

Planar root: the torso rides on three unactuated joints over a fixed base at the origin, ``ignorex`` (x slide),
``ignorez`` (z slide), ``ignorey`` (pitch hinge), treated as the reference treats them (see :mod:`envs.hopper`).

Action order (``action_names``): bthigh, bshin, bfoot, fthigh, fshin, ffoot. Torque = 0.90 * power_coef *
clip(action, -1, 1) N m with ``power_coef`` 120, 90, 60, 140, 60, 30 (``HalfCheetah.robot_specific_reset``; note
fthigh 140 where the MJCF gear says 120: the reference's number is used).

Alive bonus: the reference's own rule, +1 while |pitch| < 1 rad and none of the shins and thighs (fshin, fthigh,
bshin, bthigh) touched the floor in the previous step (the contacts the observation shows), else -1. Observed
"feet" are all six lower links, in the reference's order ffoot, fshin, fthigh, bfoot, bshin, bthigh. A -1 does not
end the episode (``HalfCheetahBulletEnv._isDone`` is always False): episodes run to the time limit, or end on a
non-finite state.

Reference score: rl-baselines3-zoo's PPO reaches 2925 on ``HalfCheetahBulletEnv-v0`` at 2M env steps.
"""

from __future__ import annotations

from operator import itemgetter

from robosafe_tasks.base import LocomotionEnv
from robosafe_tasks.spec import StateLimits, WalkerSpec

#: The cheetah is alive while |pitch| < 1 rad and no shin or thigh touched the floor.
HALF_CHEETAH_MAX_PITCH = 1.0
#: Slots of fshin, fthigh, bshin, bthigh in the observed contacts (``HalfCheetah.alive_bonus``'s indices 1, 2, 4, 5).
KNEE_AND_THIGH_SLOTS = (1, 2, 4, 5)
# Picks those slots in one C call (a generator over them costs a frame per step).
_KNEES_AND_THIGHS = itemgetter(*KNEE_AND_THIGH_SLOTS)

HALF_CHEETAH_LIMITS = StateLimits(
    # The torso capsule has radius 0.046 m: its centre of mass below the floor surface is passing through the floor.
    # Measured 0.17 to 0.81 m (on its back, in a bound); 10 m is far above anything its legs can throw it to.
    base_height=(0.0, 10.0),
    # Measured over 8 episodes (of 1000 steps) each of uniform and of bang-bang random actions: torso speed <= 4.7
    # m/s, torso angular speed <= 8 rad/s (a learned run reaches a few m/s; flips, which never end an episode here,
    # turn it faster), joint speed <= 87.5 rad/s: the light feet whip close to PyBullet's 100 rad/s cap, so the
    # bound sits just below the cap (above it, it could never fire; see ant.py).
    base_speed=20.0,
    base_angular_speed=50.0,
    joint_speed=98.0,
)

# |reward| of one step within HALF_CHEETAH_LIMITS, term by term (as hopper.py): alive +-1; progress at most 16/17 of
# the fastest of 16 link centres of mass, which lie within 0.74 m of the torso's and at most 0.43 + 0.31 = 0.73 m down
# a leg's chain of joints (thigh, shin; the feet's own centres of mass sit on their axes): 16/17 * (20 + 50 * 0.74 +
# 98 * 0.73) = 121; electricity 2.0 * 0.1 * 98 = 19.6; stall 0.1; joints at their limit 0.1 * 6 = 0.6. Total 143;
# measured |reward| <= 9.3.
HALF_CHEETAH_REWARD_BOUND = 200.0

HALF_CHEETAH_SPEC = WalkerSpec(
    mjcf_file="half_cheetah.xml",
    foot_names=("ffoot", "fshin", "fthigh", "bfoot", "bshin", "bthigh"),
    power=0.90,
    limits=HALF_CHEETAH_LIMITS,
    reward_bound=HALF_CHEETAH_REWARD_BOUND,
    joint_power_coefs={"bthigh": 120.0, "bshin": 90.0, "bfoot": 60.0, "fthigh": 140.0, "fshin": 60.0, "ffoot": 30.0},
    torso_link="torso",
    root_joints=("ignorex", "ignorez", "ignorey"),
    fall_ends_episode=False,
)


class HalfCheetahEnv(LocomotionEnv):
    """pybullet_envs' ``HalfCheetahBulletEnv-v0`` as a gymnasium env with the simulator protocol.

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels. Default 320.
        render_height: Height of rendered images in pixels. Default 240.
        settings: Engine settings; the default is the pybullet_envs stadium scene.
    """

    walker = HALF_CHEETAH_SPEC

    def alive_bonus(self, z: float, pitch: float) -> float:
        """+1 while |pitch| < 1 rad and no shin or thigh touched the floor in the previous step, else -1.

        Args:
            z: Torso height in m (unused by the cheetah).
            pitch: Torso pitch in rad.

        Returns:
            +1.0 or -1.0 (which does not end the episode).
        """
        knees_down = any(_KNEES_AND_THIGHS(self.observed_feet_contact))
        return 1.0 if abs(pitch) < HALF_CHEETAH_MAX_PITCH and not knees_down else -1.0
