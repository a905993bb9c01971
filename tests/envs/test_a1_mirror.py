"""The A1's declared mirror against PyBullet: a quiet A1 commanded (vx, vy) and driven by random joint targets, and its
twin commanded (vx, -vy) and driven by the mirrored targets, give mirrored observations (the trunk's 2 mm lateral
offset of its centre of mass apart)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from a1_helpers import quiet_a1

from robosafe_tasks.a1 import A1FlatEnv

COMMAND: dict[str, Any] = {
    "lin_vel_x": [0.5, 0.5],
    "lin_vel_y": [0.3, 0.3],
    "ang_vel_z": [0.0, 0.0],
    "heading_command": False,
    "rel_standing_envs": 0.0,
    "resampling_time_s": [1000.0, 1000.0],
}


def reflect(x: np.ndarray, mirror: tuple[tuple[int, ...], tuple[int, ...]]) -> np.ndarray:
    index, sign = mirror
    return x[list(index)] * np.array(sign, dtype=x.dtype)


def mirror_error(action_mirror: tuple[tuple[int, ...], tuple[int, ...]], steps: int = 3) -> float:
    """Largest |obs_b - reflect(obs_a)| over ``steps`` policy steps of N(0, 1) actions (joint targets of the
    standing pose +- 0.25 rad), b commanded the mirrored velocity and driven by ``action_mirror`` of a's actions."""
    a = quiet_a1(commands=COMMAND)
    b = quiet_a1(commands={**COMMAND, "lin_vel_y": [-0.3, -0.3]})
    try:
        obs_a, _ = a.reset(seed=0)
        obs_b, _ = b.reset(seed=0)  # the standing pose is its own mirror image, and nothing is randomised
        error = float(np.abs(obs_b - reflect(obs_a, A1FlatEnv.observation_mirror)).max())
        rng = np.random.default_rng(0)
        for _ in range(steps):
            action = rng.normal(0.0, 1.0, 12).astype(np.float32)
            obs_a, *_ = a.step(action)
            obs_b, *_ = b.step(reflect(action, action_mirror))
            error = max(error, float(np.abs(obs_b - reflect(obs_a, A1FlatEnv.observation_mirror)).max()))
        return error
    finally:
        a.close()
        b.close()


def test_mirrored_targets_give_mirrored_observations() -> None:
    # Measured: 0 at the reset, then at most 0.05 over 3 steps (a joint speed in rad/s, of speeds of several rad/s;
    # angular velocity 0.02 rad/s). The URDF's legs are exact mirror images; its trunk's centre of mass sits 2.2 mm to
    # the left (y = 0.002186 m), which the mirror cannot reflect, and the contact solver visits the feet in one order.
    assert mirror_error(A1FlatEnv.action_mirror) < 0.1


@pytest.mark.parametrize(
    "wrong",
    [
        (A1FlatEnv.action_mirror[0], (1,) * 12),  # the hips keep their sign
        (tuple(range(12)), A1FlatEnv.action_mirror[1]),  # no legs traded
    ],
    ids=["hips-unsigned", "legs-not-traded"],
)
def test_a_wrong_action_mirror_is_far_off(wrong: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    assert mirror_error(wrong) > 1.0
