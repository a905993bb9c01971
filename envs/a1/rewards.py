"""The reward terms of Isaac Lab's velocity task (``isaaclab.envs.mdp.rewards`` and the locomotion ``mdp``), as pure
functions of one env's state, and the weighted sum that skips zero weights.

Every function returns the raw term (before weight and ``step_dt``); :func:`weighted_terms` forms
``weight * term * step_dt`` as Isaac Lab's ``RewardManager`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from robosafe_tasks.a1.config import RewardConfig


@dataclass
class StepState:
    """What the reward terms read after one policy step (base-frame quantities as Isaac Lab's ``*_b``).

    The 3- and 4-vectors may be tuples or lists of floats (the env's step passes them so; numpy's per-call overhead
    outweighs its arithmetic at these sizes) or arrays.

    Attributes:
        lin_vel_b: Base linear velocity in the base frame, m/s. Shape: (3,).
        ang_vel_b: Base angular velocity in the base frame, rad/s. Shape: (3,).
        gravity_b: Unit gravity direction in the base frame. Shape: (3,).
        command: Commanded (vx m/s, vy m/s, yaw rate rad/s) of the step.
        joint_pos: Joint positions, rad. Shape: (12,).
        torques: Torques applied in the last substep, N m. Shape: (12,).
        joint_acc: Joint accelerations over the last substep, rad/s^2. Shape: (12,).
        action: This step's action. Shape: (12,).
        last_action: The previous step's action. Shape: (12,).
        first_contact: Per foot, True if it touched down during this step. Shape: (4,).
        last_air_time: Per foot, the length of its last swing in s. Shape: (4,).
        thigh_forces: Normal contact force of each thigh on the ground, N. Shape: (4,).
        soft_low: Lower soft joint limits, rad. Shape: (12,).
        soft_high: Upper soft joint limits, rad. Shape: (12,).
        terminated: The step ends the episode by a termination (not the time-out).
    """

    lin_vel_b: Sequence[float]
    ang_vel_b: Sequence[float]
    gravity_b: Sequence[float]
    command: list[float]
    joint_pos: np.ndarray
    torques: np.ndarray
    joint_acc: np.ndarray
    action: np.ndarray
    last_action: np.ndarray
    first_contact: Sequence[bool]
    last_air_time: Sequence[float]
    thigh_forces: Sequence[float]
    soft_low: np.ndarray
    soft_high: np.ndarray
    terminated: bool = False


def track_lin_vel_xy_exp(s: StepState, cfg: RewardConfig) -> float:
    """exp(-|command_xy - v_xy|^2 / std^2): 1 when the base moves as commanded."""
    ex, ey = s.command[0] - s.lin_vel_b[0], s.command[1] - s.lin_vel_b[1]
    return math.exp(-(ex * ex + ey * ey) / cfg.tracking_std**2)


def track_ang_vel_z_exp(s: StepState, cfg: RewardConfig) -> float:
    """exp(-(command_yaw_rate - w_z)^2 / std^2)."""
    e = s.command[2] - s.ang_vel_b[2]
    return math.exp(-(e * e) / cfg.tracking_std**2)


def lin_vel_z_l2(s: StepState, cfg: RewardConfig) -> float:
    """v_z^2 (bouncing)."""
    return float(s.lin_vel_b[2] ** 2)


def ang_vel_xy_l2(s: StepState, cfg: RewardConfig) -> float:
    """w_x^2 + w_y^2 (rolling and pitching)."""
    return float(s.ang_vel_b[0] ** 2 + s.ang_vel_b[1] ** 2)


def dof_torques_l2(s: StepState, cfg: RewardConfig) -> float:
    """Sum of squared joint torques."""
    return float(np.dot(s.torques, s.torques))


def dof_acc_l2(s: StepState, cfg: RewardConfig) -> float:
    """Sum of squared joint accelerations."""
    return float(np.dot(s.joint_acc, s.joint_acc))


def action_rate_l2(s: StepState, cfg: RewardConfig) -> float:
    """Sum of squared changes of the action since the last step."""
    d = s.action - s.last_action
    return float(np.dot(d, d))


def feet_air_time(s: StepState, cfg: RewardConfig) -> float:
    """Per touch-down, (swing time - threshold); only while the commanded planar speed exceeds 0.1 m/s."""
    if math.hypot(s.command[0], s.command[1]) <= 0.1:
        return 0.0
    threshold = cfg.feet_air_time_threshold
    return float(sum(air - threshold for air, landed in zip(s.last_air_time, s.first_contact, strict=True) if landed))


def undesired_contacts(s: StepState, cfg: RewardConfig) -> float:
    """Number of thighs touching the ground."""
    threshold = cfg.contact_threshold
    return float(sum(force > threshold for force in s.thigh_forces))


def flat_orientation_l2(s: StepState, cfg: RewardConfig) -> float:
    """g_x^2 + g_y^2 of the gravity direction in the base frame (0 when the trunk is level)."""
    return float(s.gravity_b[0] ** 2 + s.gravity_b[1] ** 2)


def dof_pos_limits(s: StepState, cfg: RewardConfig) -> float:
    """Sum of how far the joints are beyond their soft limits, rad."""
    below = np.clip(s.soft_low - s.joint_pos, 0.0, None)
    above = np.clip(s.joint_pos - s.soft_high, 0.0, None)
    return float((below + above).sum())


def termination_penalty(s: StepState, cfg: RewardConfig) -> float:
    """1 on the step that terminates the episode (trunk contact, bad orientation), else 0; a time-out is not a
    termination (Isaac Lab's ``mdp.is_terminated``)."""
    return 1.0 if s.terminated else 0.0


#: Term name -> function, in :data:`~robosafe_tasks.a1.config.TERM_NAMES` order.
TERMS: dict[str, Callable[[StepState, RewardConfig], float]] = {
    f.__name__: f
    for f in (
        track_lin_vel_xy_exp,
        track_ang_vel_z_exp,
        lin_vel_z_l2,
        ang_vel_xy_l2,
        dof_torques_l2,
        dof_acc_l2,
        action_rate_l2,
        feet_air_time,
        undesired_contacts,
        flat_orientation_l2,
        dof_pos_limits,
        termination_penalty,
    )
}


def active_terms(weights: Mapping[str, float], scheduled: Collection[str] = ()) -> list[tuple[str, float]]:
    """The terms with a non-zero weight or a curriculum, in order, with their weights; the others are never computed.

    Args:
        weights: Term name -> weight (``RewardConfig.weights()``, or ``A1Config.weights_at``).
        scheduled: Terms whose weight a curriculum changes: active even while their weight is 0.
    """
    return [(name, weight) for name, weight in weights.items() if weight != 0.0 or name in scheduled]


def weighted_terms(s: StepState, terms: list[tuple[str, float]], cfg: RewardConfig, dt: float) -> list[float]:
    """``weight * term * dt`` of each active term.

    Args:
        s: The step's state.
        terms: :func:`active_terms`.
        cfg: Term parameters.
        dt: Policy step in s.

    Returns:
        One value per active term, in order.
    """
    # A curriculum's term at weight 0 is computed only once its weight moves.
    return [weight * TERMS[name](s, cfg) * dt if weight != 0.0 else 0.0 for name, weight in terms]
