"""Pure functions on a walker's simulator state: the layout of a state record, its validation, its limit check.

``LocomotionEnv.get_sim_state`` / ``set_sim_state`` / ``check_state`` are thin wrappers that query or write the
engine; the decisions live here so that they are tested without a physics world.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from robosafe_tasks.spec import StateLimits

#: One engine query of a floating-base robot, as PyBullet returns it: base position (3,) m, base orientation (4,)
#: quaternion xyzw, base linear velocity (3,) m/s, base angular velocity (3,) rad/s, and per motor joint the tuple
#: of ``getJointStates`` (position rad, velocity rad/s, reaction forces, applied torque).
StateQuery = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float], Sequence[Sequence]]


def state_shapes(num_motors: int, num_feet: int, num_root: int = 0) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a walker's simulator state record, in order.

    Args:
        num_motors: Number of motor joints n.
        num_feet: Number of observed feet f.
        num_root: Number of root joints r carrying the torso (3 for the planar robots, 0 for a floating base).

    Returns:
        ``base_pos`` (3,), ``base_orn`` (4,), ``base_lin_vel`` (3,), ``base_ang_vel`` (3,) (the torso's, whether it
        is the base or a link), ``joint_pos`` (n,), ``joint_vel`` (n,), ``initial_z`` (), ``potential`` (),
        ``walk_target`` (2,), ``feet_contact`` (f,), ``feet_contact_obs`` (f,), ``elapsed_steps`` (), and with root
        joints ``root_joint_pos`` (r,), ``root_joint_vel`` (r,).
    """
    shapes: dict[str, tuple[int, ...]] = {
        "base_pos": (3,),
        "base_orn": (4,),
        "base_lin_vel": (3,),
        "base_ang_vel": (3,),
        "joint_pos": (num_motors,),
        "joint_vel": (num_motors,),
        "initial_z": (),
        "potential": (),
        "walk_target": (2,),
        "feet_contact": (num_feet,),
        "feet_contact_obs": (num_feet,),
        "elapsed_steps": (),
    }
    if num_root:
        shapes.update(root_joint_pos=(num_root,), root_joint_vel=(num_root,))
    return shapes


def validate_state(
    state: Mapping[str, np.ndarray], num_motors: int, num_feet: int, num_root: int = 0
) -> dict[str, np.ndarray]:
    """Check a state record before it is written into a world, and convert it to float64 arrays.

    Args:
        state: A record as ``LocomotionEnv.get_sim_state`` returns it (extra keys are ignored).
        num_motors: Number of motor joints of the task.
        num_feet: Number of observed feet of the task.
        num_root: Number of root joints of the task.

    Returns:
        The record's arrays as float64, keyed as :func:`state_shapes`.

    Raises:
        ValueError: If a key is missing, an array has the wrong shape, or a value is NaN or Inf (written into the
            engine, it would poison the whole world).
    """
    return validate_record(state, state_shapes(num_motors, num_feet, num_root))


def validate_record(state: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Check any task's state record against its keys and shapes, and convert it to float64 arrays.

    Args:
        state: The record (extra keys are ignored).
        shapes: Key -> shape of every array the record must hold.

    Returns:
        The record's arrays as float64, keyed as ``shapes``.

    Raises:
        ValueError: If a key is missing, an array has the wrong shape, or a value is NaN or Inf.
    """
    missing = [key for key in shapes if key not in state]
    if missing:
        raise ValueError(f"sim state lacks keys {missing}; expected the keys {list(shapes)}")
    values = {key: np.asarray(state[key], dtype=np.float64) for key in shapes}
    for key, value in values.items():
        if value.shape != shapes[key]:
            raise ValueError(f"sim state {key!r} has shape {value.shape}, expected {shapes[key]}")
        if not np.isfinite(value).all():
            raise ValueError(f"sim state {key!r} is not finite: {value}; restoring it would poison the world")
    return values


def check_limits(query: StateQuery, limits: StateLimits, joint_names: Sequence[str]) -> str | None:
    """Say whether one engine query is a plausible state of the task.

    Checked in this order: finiteness, base height, base speed, base angular speed, joint speeds.

    Args:
        query: Base pose, base velocity and joint states, see :data:`StateQuery`.
        limits: The task's bounds.
        joint_names: Names of the motor joints, in the order of the joint states.

    Returns:
        None if plausible, else a one-line reason naming the quantity, its value and the limit, e.g.
        ``"base speed 40 m/s exceeds the limit 20 m/s"`` or ``"non-finite state in base_pos, joint_vel"``.
    """
    pos, orn, lin, ang, states = query
    joint_pos = [s[0] for s in states]
    joint_vel = [s[1] for s in states]
    # One sum is non-finite iff some element is NaN or Inf (finite values would need to be near 1e307 to overflow).
    if not math.isfinite(sum(pos) + sum(orn) + sum(lin) + sum(ang) + sum(joint_pos) + sum(joint_vel)):
        groups = {
            "base_pos": pos,
            "base_orn": orn,
            "base_lin_vel": lin,
            "base_ang_vel": ang,
            "joint_pos": joint_pos,
            "joint_vel": joint_vel,
        }
        bad = [name for name, values in groups.items() if not all(map(math.isfinite, values))]
        return f"non-finite state in {', '.join(bad)}"
    z = pos[2]
    low, high = limits.base_height
    if not low <= z <= high:
        return f"base height {z:.4g} m is outside the range [{low:g}, {high:g}] m"
    speed = math.sqrt(lin[0] * lin[0] + lin[1] * lin[1] + lin[2] * lin[2])
    if speed > limits.base_speed:
        return f"base speed {speed:.4g} m/s exceeds the limit {limits.base_speed:g} m/s"
    angular = math.sqrt(ang[0] * ang[0] + ang[1] * ang[1] + ang[2] * ang[2])
    if angular > limits.base_angular_speed:
        return f"base angular speed {angular:.4g} rad/s exceeds the limit {limits.base_angular_speed:g} rad/s"
    speeds = [abs(v) for v in joint_vel]
    fastest = max(speeds, default=0.0)
    if fastest > limits.joint_speed:
        name = joint_names[speeds.index(fastest)]
        return f"joint speed {fastest:.4g} rad/s of {name} exceeds the limit {limits.joint_speed:g} rad/s"
    return None
