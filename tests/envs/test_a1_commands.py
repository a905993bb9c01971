"""Velocity commands: ranges, standing envs, the heading controller, resampling (alone and in the env)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from a1_helpers import quiet_a1

from robosafe_tasks.a1 import commands
from robosafe_tasks.a1.config import CommandConfig


def test_samples_lie_in_their_ranges_and_some_stand_still() -> None:
    cfg = CommandConfig(heading_command=False, rel_standing_envs=0.25, lin_vel_x=(0.5, 1.0))
    rng = np.random.default_rng(0)
    drawn = [commands.sample(cfg, rng) for _ in range(400)]
    for c in drawn:
        commands.update(c, 0.0, cfg)
    moving = [c.velocity for c in drawn if not c.standing_env]
    assert all(0.5 <= v[0] <= 1.0 and -1.0 <= v[1] <= 1.0 and -1.0 <= v[2] <= 1.0 for v in moving)
    standing = [c for c in drawn if c.standing_env]
    assert all(c.velocity == [0.0, 0.0, 0.0] for c in standing)
    assert 70 <= len(standing) <= 130  # 25% of 400 = 100, binomial std 8.7
    assert all(c.time_left == 10.0 for c in drawn)


@pytest.mark.parametrize(
    ("heading", "yaw", "expected"),
    [
        (1.0, 0.0, 0.5),  # 0.5 * 1.0
        (3.0, 0.0, 1.0),  # 0.5 * 3.0 = 1.5, clipped to the range's 1.0
        (3.0, -3.0, 0.5 * (6.0 - 2 * math.pi)),  # the error wraps: 6.0 rad is -0.283 rad the short way
        (0.0, 0.4, -0.2),
    ],
)
def test_heading_controller(heading: float, yaw: float, expected: float) -> None:
    c = commands.Command([0.3, 0.1, 0.9], heading=heading, heading_env=True)
    commands.update(c, yaw, CommandConfig())
    assert c.velocity == pytest.approx([0.3, 0.1, expected], abs=1e-12)


def test_resampled_when_its_time_is_up() -> None:
    cfg = CommandConfig(resampling_time_s=(0.03, 0.03), heading_command=False, rel_standing_envs=0.0)
    rng = np.random.default_rng(1)
    first = commands.sample(cfg, rng)
    kept = commands.advance(first, 0.02, 0.0, cfg, rng)  # 0.01 s left
    assert kept is first and kept.time_left == pytest.approx(0.01)
    new = commands.advance(kept, 0.02, 0.0, cfg, rng)
    assert new is not first and new.velocity != first.velocity and new.time_left == 0.03


def test_the_env_resamples_at_its_interval() -> None:
    # Resampling every 2 steps (0.04 s): the observed command changes after steps 2 and 4, not in between.
    env = quiet_a1(commands={"resampling_time_s": [0.04, 0.04], "heading_command": False})
    obs, _ = env.reset(seed=0)
    seen = [obs[9:12].copy()]
    for _ in range(4):
        seen.append(env.step(np.zeros(12, np.float32))[0][9:12].copy())
    changed = [not np.array_equal(a, b) for a, b in itertools.pairwise(seen)]
    assert changed == [False, True, False, True]
    env.close()
