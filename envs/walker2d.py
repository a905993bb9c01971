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
from robosafe_tasks.hopper import HopperEnv
from robosafe_tasks.spec import StateLimits, WalkerSpec, walker_observation_mirror

WALKER2D_LIMITS = StateLimits(
    # As the Hopper's (the same torso): below the floor is passing through it; measured up to 1.25 m.
    base_height=(0.0, 10.0),
    # Measured over 20 episodes of uniform and of bang-bang random actions (6 to 24 steps, mostly falls): torso speed
    # <= 7.9 m/s, torso angular speed <= 32 rad/s, joint speed <= 37 rad/s.
    base_speed=20.0,
    base_angular_speed=80.0,
    joint_speed=80.0,  # below PyBullet's 100 rad/s cap (see ant.py)
)

# |reward| of one step within WALKER2D_LIMITS, term by term (as hopper.py): alive +-1; progress at most 16/17 of
# the fastest of 16 link centres of mass (17 parts with the floor), which lie within 1.25 m of the torso's and at most
# 0.97 + 0.52 + 0.10 = 1.59 m down a leg's chain of joints: 16/17 * (20 + 80 * 1.25 + 80 * 1.59) = 233; electricity
# 2.0 * 0.1 * 80 = 16; stall 0.1; joints at their limit 0.1 * 6 = 0.6. Total 251; measured |reward| <= 4.2.
WALKER2D_REWARD_BOUND = 300.0

# The Walker2D's left-right mirror, for rsl-rl's symmetry augmentation (robo_safe_rl.bridge.mirror;
# algorithm.symmetry_cfg), as signed permutations: mirrored[i] = sign[i] * x[index[i]]. walker2d.xml puts both legs in
# the plane y = 0, the same bodies on the same joints (all about -y): a reflection in that plane leaves each leg where
# it is, and the symmetry is the swap of two identical legs, joint for joint with the same angles (+1). Action order
# thigh, leg, foot, then the left leg's:
WALKER2D_ACTION_MIRROR = ((3, 4, 5, 0, 1, 2), (1,) * 6)
# Observation (as the Ant's, envs/spec.py:walker_observation_mirror): the angle to the target's sine, the sideways speed
# and the roll, which the planar walker keeps at 0, are given the Ant's signs; then the joints as the actions (position
# and speed each), then the two feet.
WALKER2D_OBSERVATION_MIRROR = walker_observation_mirror(WALKER2D_ACTION_MIRROR, foot_mirror=(1, 0))

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
    observation_mirror = WALKER2D_OBSERVATION_MIRROR
    action_mirror = WALKER2D_ACTION_MIRROR

    # The reference's Walker2D has the Hopper's alive rule, word for word (robot_locomotors.py).
    alive_bonus = HopperEnv.alive_bonus
