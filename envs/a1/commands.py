"""Base velocity commands: Isaac Lab's ``UniformVelocityCommand`` for one env (pure functions of a numpy generator)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robosafe_tasks.a1.config import CommandConfig


@dataclass
class Command:
    """The current command of one env.

    Attributes:
        velocity: Commanded (forward m/s, lateral m/s, yaw rate rad/s) in the base's yaw frame.
        heading: Heading target in rad (used when ``heading_env``).
        heading_env: The yaw rate follows the heading target.
        standing_env: The command is zero (stand still).
        time_left: Seconds until the next resampling.
    """

    velocity: list[float]
    heading: float = 0.0
    heading_env: bool = False
    standing_env: bool = False
    time_left: float = 0.0


def sample(cfg: CommandConfig, rng: np.random.Generator) -> Command:
    """Draw a new command (``UniformVelocityCommand._resample_command``): velocities, heading target, the heading and
    standing flags, and the time to the next draw.

    Args:
        cfg: Ranges and fractions.
        rng: The env's generator.

    Returns:
        The command, its yaw rate not yet set by the heading controller (call :func:`update`).
    """
    velocity = [
        float(rng.uniform(*cfg.lin_vel_x)),
        float(rng.uniform(*cfg.lin_vel_y)),
        float(rng.uniform(*cfg.ang_vel_z)),
    ]
    heading = float(rng.uniform(*cfg.heading))
    heading_env = cfg.heading_command and float(rng.uniform()) <= cfg.rel_heading_envs
    standing_env = float(rng.uniform()) <= cfg.rel_standing_envs
    time_left = float(rng.uniform(*cfg.resampling_time_s))
    return Command(velocity, heading, heading_env, standing_env, time_left)


def update(command: Command, yaw: float, cfg: CommandConfig) -> None:
    """Apply the heading controller and the standing flag (``UniformVelocityCommand._update_command``).

    A heading env's yaw rate is ``clip(stiffness * wrap(heading - yaw), ang_vel_z range)``; a standing env's command
    is all zero.

    Args:
        command: Updated in place.
        yaw: The base's current heading in rad.
        cfg: Stiffness and yaw rate range.
    """
    if command.heading_env:
        error = math.remainder(command.heading - yaw, 2.0 * math.pi)  # wrapped to [-pi, pi]
        low, high = cfg.ang_vel_z
        command.velocity[2] = min(max(cfg.heading_control_stiffness * error, low), high)
    if command.standing_env:
        command.velocity = [0.0, 0.0, 0.0]


def advance(command: Command, dt: float, yaw: float, cfg: CommandConfig, rng: np.random.Generator) -> Command:
    """One policy step of the command manager: count down, resample when due, then update.

    Args:
        command: The current command.
        dt: Policy step in s.
        yaw: The base's heading in rad.
        cfg: Command settings.
        rng: The env's generator.

    Returns:
        The command to use from now on (a new one after a resampling).
    """
    command.time_left -= dt
    if command.time_left <= 0.0:
        command = sample(cfg, rng)
    update(command, yaw, cfg)
    return command
