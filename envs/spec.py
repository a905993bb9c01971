"""What defines one locomotion task: the robot, its reward weights and its plausible state bounds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StateLimits:
    """Bounds of a plausible state; ``LocomotionEnv.check_state`` reports anything outside.

    Attributes:
        base_height: (min, max) height of the base in m.
        base_speed: Bound on the norm of the base's linear velocity in m/s.
        base_angular_speed: Bound on the norm of the base's angular velocity in rad/s.
        joint_speed: Bound on the absolute speed of each motor joint in rad/s.
    """

    base_height: tuple[float, float]
    base_speed: float
    base_angular_speed: float
    joint_speed: float

    def __post_init__(self) -> None:
        low, high = self.base_height
        if not low < high:
            raise ValueError(f"base_height must be (min, max) with min < max, got {self.base_height}")
        for name in ("base_speed", "base_angular_speed", "joint_speed"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class WalkerSpec:
    """The constants of one walker task (those of a pybullet_envs ``robot_locomotors.WalkerBase`` subclass).

    Attributes:
        mjcf_file: Robot file under pybullet_data's ``mjcf/`` folder.
        foot_names: Links whose contact with the floor is observed, in observation order.
        power: Torque scale of the robot (``WalkerBase.power``); torque = power * power_coef * clip(action) N m.
        limits: Plausible state bounds for ``LocomotionEnv.check_state``.
        reward_bound: Bound on ``|reward|`` of one step that any state within ``limits`` respects (derived from the
            reward terms and the limits, see ``ant.py``); a larger finite reward is implausible (a reward bug, not a
            gait). Exposed as ``LocomotionEnv.reward_bound`` for the safety layer.
        power_coef: Per-joint torque scale (``XmlBasedRobot.addToScene`` sets 100 for every joint); the MJCF
            actuator gear is not used, as in the reference. Default 100.0.
        electricity_cost: Weight of mean |action * 0.1 joint speed| (joint speed in rad/s). Default -2.0.
        stall_torque_cost: Weight of mean action^2. Default -0.1.
        joints_at_limit_cost: Weight of the number of motor joints at their limit. Default -0.1.
        walk_target: (x, y) of the walk target in m; 1 km down the x axis. Default (1000.0, 0.0).
        joint_power_coefs: Per-joint ``power_coef`` by joint name where it is not ``power_coef`` (the reference's
            ``robot_specific_reset`` sets them for Walker2D's feet and each HalfCheetah joint). Default: none.
        torso_link: Name of the torso link when the torso is not the base: the planar robots' MJCF files carry the
            torso on three unactuated root joints (``root_joints``) over a fixed base at the origin. ``None`` (the
            default): the base is the torso (a floating-base robot such as the Ant).
        root_joints: The planar root joints (x slide, z slide, pitch hinge; named ``ignore*`` in the MJCF files),
            in MJCF order; required with ``torso_link``. Default: none.
        fall_ends_episode: Whether a negative alive bonus ends the episode (``WalkerBaseBulletEnv._isDone``);
            ``HalfCheetahBulletEnv`` never ends an episode that way. Default True.
    """

    mjcf_file: str
    foot_names: tuple[str, ...]
    power: float
    limits: StateLimits
    reward_bound: float
    power_coef: float = 100.0
    electricity_cost: float = -2.0
    stall_torque_cost: float = -0.1
    joints_at_limit_cost: float = -0.1
    walk_target: tuple[float, float] = (1e3, 0.0)
    joint_power_coefs: Mapping[str, float] = field(default_factory=dict)
    torso_link: str | None = None
    root_joints: tuple[str, ...] = ()
    fall_ends_episode: bool = True

    def __post_init__(self) -> None:
        if not self.reward_bound > 0.0:
            raise ValueError(f"reward_bound must be > 0, got {self.reward_bound}")
        if (self.torso_link is None) != (not self.root_joints):
            raise ValueError(
                f"torso_link and root_joints go together (a torso carried by root joints), got torso_link="
                f"{self.torso_link!r}, root_joints={self.root_joints}"
            )


#: The signs of the first 8 observation components of pybullet_envs' WalkerBase.calc_state under a left-right mirror:
#: z - initial z (kept), the angle to the target's sine (changes sign) and cosine, the heading frame's forward, sideways
#: (changes sign) and vertical speed, roll (changes sign) and pitch.
WALKER_BASE_MIRROR_SIGN = (1, -1, 1, 1, -1, 1, -1, 1)


def walker_observation_mirror(
    action_mirror: tuple[tuple[int, ...], tuple[int, ...]], foot_mirror: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The observation mirror of a WalkerBase task (``mirrored[i] = sign[i] * x[index[i]]``), from its action mirror.

    The observation is the 8 base components (:data:`WALKER_BASE_MIRROR_SIGN`), then per joint in action order its
    relative position and speed, each mirrored as the joint's action, then the feet's contacts.

    Args:
        action_mirror: (index, sign) of the actions, one per joint.
        foot_mirror: Which foot each foot's contact is taken from (its index among the feet); contacts keep their sign.

    Returns:
        (index, sign), each of length 8 + 2 * joints + feet.
    """
    index, sign = action_mirror
    feet = 8 + 2 * len(index)
    return (
        (*range(8), *(8 + 2 * j + k for j in index for k in (0, 1)), *(feet + f for f in foot_mirror)),
        (*WALKER_BASE_MIRROR_SIGN, *(s for s in sign for _ in (0, 1)), *(1 for _ in foot_mirror)),
    )
