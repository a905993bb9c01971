"""The Ant task: pybullet_envs' ``AntBulletEnv-v0`` on gymnasium (registered as ``RoboSafe/Ant-v0``).

The four-legged ant of pybullet_data ``mjcf/ant.xml`` (a 0.25 m torso sphere at 0.75 m, 8 hinge motors) walks
towards a target 1 km down the x axis. Observation (28,), action (8,), reward and termination are those of the
reference; see :mod:`envs.base` for the walker logic, its quirks and the deliberate differences (the info dict, the
handling of non-finite states).

Action order (``action_names``): hip_1, ankle_1, hip_2, ankle_2, hip_3, ankle_3, hip_4, ankle_4 (MJCF joint order,
not the order of the MJCF ``<actuator>`` block). Torque = 2.5 * 100 * clip(action, -1, 1) N m.
"""

from __future__ import annotations

from robosafe_tasks.base import LocomotionEnv
from robosafe_tasks.spec import StateLimits, WalkerSpec, walker_observation_mirror

#: Torso height at or below which the episode ends: the torso is a 0.25 m sphere, so it scrapes the ground.
ANT_MIN_TORSO_Z = 0.26

ANT_LIMITS = StateLimits(
    # The torso is a 0.25 m sphere: its centre below the floor surface means it is passing through the floor (what a
    # poisoned world does). 5 m is far above anything 250 N m legs can throw a 182 kg ant to.
    base_height=(0.0, 5.0),
    # Measured over 20 episodes of uniform and of bang-bang random actions: base speed <= 2.7 m/s, base angular
    # speed <= 12 rad/s, joint speed <= 21 rad/s. The bounds leave room for strong learned gaits and hard falls.
    base_speed=20.0,
    base_angular_speed=50.0,
    # PyBullet caps multibody joint speeds at 100 rad/s (btMultiBody's default maxCoordinateVelocity; 1e30 N m
    # torques reach exactly 100), so a bound must stay below 100 rad/s to ever fire.
    joint_speed=80.0,
)

# |reward| of one step for any state within ANT_LIMITS and an action in [-1, 1] (what SafeStep sends), term by term:
# - alive: +-1.
# - progress: -(change of the body centre's distance to the target) / dt, at most the body centre's speed. The centre
#   is the mean of 22 points (base, 20 link centres of mass, the fixed floor origin), so at most 21/22 of the fastest
#   point's speed. Link centres of mass lie within 0.85 m of the torso centre (0.28 m to the hip, 0.28 m thigh, shin
#   centre 0.28 m further), 0.57 m from the hip axis and 0.28 m from the ankle axis, so a point moves at most
#   20 m/s (base) + 50 rad/s * 0.85 m (base rotation) + 80 rad/s * (0.57 + 0.28) m (both joints) = 130 m/s;
#   21/22 of it is 124.
# - electricity: 2.0 * mean |a * 0.1 * joint speed| <= 2.0 * 0.1 * 80 = 16; stall torque: 0.1 * mean a^2 <= 0.1.
# - joints at their limit: 0.1 * 8 joints = 0.8.
# Total 142. The bound leaves room on top (link transforms lag the base by a substep) and is still ~100x what any gait
# earns (|reward| <= 2.3 over 40 episodes of random and bang-bang actions, measured): it exists to catch a reward
# that cannot come from this robot (1e30 from a bug), not to police a gait.
ANT_REWARD_BOUND = 200.0

# The Ant's mirror image in the xz plane (y -> -y), the plane its target lies in: rsl-rl's symmetry augmentation
# learns from it (robo_safe_rl.bridge.mirror; algorithm.symmetry_cfg). As signed permutations, mirrored[i] =
# sign[i] * x[index[i]]. The legs of ant.xml lie at (x, y) = (+,+) leg 1, (-,+) leg 2, (-,-) leg 3, (+,-) leg 4, so the
# mirror trades legs 1 and 4, and 2 and 3. A hip turns about z: reflected, its turn is the other way (-1). An ankle
# turns about a horizontal axis along which the reflection of leg 1's axis (-1, 1, 0), as a rotation axis (a
# pseudovector: -M a), is (1, 1, 0), leg 4's axis, with leg 4's range (30..100 deg, as leg 1's): the same angle (+1);
# likewise legs 2 and 3 (axes (1, 1, 0) and (-1, 1, 0), both -100..-30 deg). Action order hip_1, ankle_1, ..., hip_4,
# ankle_4:
ANT_ACTION_MIRROR = ((6, 7, 4, 5, 2, 3, 0, 1), (-1, 1, -1, 1, -1, 1, -1, 1))
# Observation (WalkerBase.calc_state; envs/spec.py:walker_observation_mirror): the base's components, then per joint
# in action order its relative position and speed, mirrored as the action (a hip's position is symmetric about 0
# within -40..40 deg, so its relative position changes sign too), then the four feet's contacts in leg order (1 <-> 4,
# 2 <-> 3).
ANT_OBSERVATION_MIRROR = walker_observation_mirror(ANT_ACTION_MIRROR, foot_mirror=(3, 2, 1, 0))

ANT_SPEC = WalkerSpec(
    mjcf_file="ant.xml",
    foot_names=("front_left_foot", "front_right_foot", "left_back_foot", "right_back_foot"),
    power=2.5,
    limits=ANT_LIMITS,
    reward_bound=ANT_REWARD_BOUND,
)


class AntEnv(LocomotionEnv):
    """pybullet_envs' ``AntBulletEnv-v0`` as a gymnasium env with the simulator protocol.

    Args:
        render_mode: ``None`` or ``"rgb_array"``.
        render_width: Width of rendered images in pixels. Default 320.
        render_height: Height of rendered images in pixels. Default 240.
        settings: Engine settings; the default is the pybullet_envs stadium scene.
    """

    walker = ANT_SPEC
    observation_mirror = ANT_OBSERVATION_MIRROR
    action_mirror = ANT_ACTION_MIRROR

    def alive_bonus(self, z: float, pitch: float) -> float:
        """+1 while the torso is above 0.26 m, else -1 (the episode ends); pitch is not used.

        Args:
            z: Torso height in m.
            pitch: Torso pitch in rad (unused by the Ant).

        Returns:
            +1.0 or -1.0.
        """
        return 1.0 if z > ANT_MIN_TORSO_Z else -1.0
