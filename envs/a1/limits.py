"""The A1's plausible state bounds for SafeStep and the bound on one step's reward, each number with its reason."""

from __future__ import annotations

import math

from robosafe_tasks.a1.config import A1Config
from robosafe_tasks.spec import StateLimits

#: PyBullet caps multibody joint speeds at 100 rad/s (btMultiBody's default maxCoordinateVelocity).
ENGINE_JOINT_SPEED_CAP = 100.0
#: Air time is counted up to this many seconds (the 20 s episode): a longer "swing" is no gait, and the cap keeps
#: ``feet_air_time`` bounded whatever the time limit.
AIR_TIME_CAP = 20.0

A1_LIMITS = StateLimits(
    # The trunk's centre is 5.7 cm above its bottom face: below the floor surface it is passing through the floor
    # (what a poisoned world does). 3 m is far above anything 33.5 N m legs can throw a 12.5 kg robot to.
    base_height=(0.0, 3.0),
    # Measured over 10 episodes of 300 steps, uniform actions in [-1, 1] and bang-bang actions at +-10 (the action
    # bounds), pushes on: base speed <= 2.3 m/s, base angular speed <= 24 rad/s, joint speed <= 88 rad/s. A fast
    # A1 runs at ~3 m/s; a push adds 0.7 m/s at most. 10 m/s and 40 rad/s leave room for hard falls and strong gaits.
    base_speed=10.0,
    base_angular_speed=40.0,
    # The DC motor model stops driving a joint at 21 rad/s, but bang-bang targets slam the light calves into their
    # limits at up to 88 rad/s (measured). The bound sits between that and the engine's 100 rad/s cap, which a bound
    # must stay below to ever fire: a joint at the cap is the engine clamping a blow-up.
    joint_speed=95.0,
)


def reward_bound(cfg: A1Config, limits: StateLimits) -> float:
    """Bound on ``|reward|`` of one step for any state within ``limits`` and an action in the action space.

    Each active term's largest magnitude times ``|weight| * step_dt``, summed (the larger weight of a term a
    curriculum changes):

    - tracking kernels: 1; flat orientation: 1 (a unit vector's xy part); thigh contacts: 4;
    - vertical speed^2 <= base_speed^2; roll and pitch rate^2 <= base_angular_speed^2;
    - torques^2 <= 12 effort_limit^2;
    - accelerations^2 <= 12 ((100 + joint_speed) / sim_dt)^2 (the velocity before the last substep is only capped
      by the engine's 100 rad/s);
    - action rate^2 <= 12 (2 action_clip)^2;
    - feet air time <= 4 (AIR_TIME_CAP + threshold);
    - joint limit excess <= 12 * 2 pi;
    - termination: 1.

    The result is doubled: it exists to catch a reward no state of this robot can give (1e30 from a bug), not to
    police a gait, and the factor 2 leaves room for what a bound term by term overlooks.

    Args:
        cfg: The task settings (weights, control limits).
        limits: The state bounds.

    Returns:
        The bound, > 0.
    """
    r, ctl = cfg.rewards, cfg.control
    largest = {
        "track_lin_vel_xy_exp": 1.0,
        "track_ang_vel_z_exp": 1.0,
        "lin_vel_z_l2": limits.base_speed**2,
        "ang_vel_xy_l2": limits.base_angular_speed**2,
        "dof_torques_l2": 12 * ctl.effort_limit**2,
        "dof_acc_l2": 12 * ((ENGINE_JOINT_SPEED_CAP + limits.joint_speed) / ctl.sim_dt) ** 2,
        "action_rate_l2": 12 * (2 * ctl.action_clip) ** 2,
        "feet_air_time": 4 * (AIR_TIME_CAP + r.feet_air_time_threshold),
        "undesired_contacts": 4.0,
        "flat_orientation_l2": 1.0,
        "dof_pos_limits": 12 * 2 * math.pi,
        "termination_penalty": 1.0,
    }
    # A curriculum moves a weight between its rewards value and its final one: the larger of the two bounds it.
    weights = {name: abs(weight) for name, weight in r.weights().items()}
    for name, change in cfg.curriculum.items():
        weights[name] = max(weights[name], abs(change.weight))
    total = sum(weight * largest[name] * ctl.step_dt for name, weight in weights.items())
    return 2.0 * max(total, 1e-6)
