"""What Isaac Lab's reward weights pay the A1 for fixed behaviours: standing still, the first policies' random joint
targets, an open-loop trot. Per step, each weighted term's mean, for a commanded velocity the trot roughly follows.

A policy learns what its first behaviours are paid for: if random targets earn less per step than nothing (the
episode's end), the first policies learn to end episodes; if standing earns more than any gait the search meets, they
learn to stand. This measures those payments on the task's own physics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: The command of every measured episode: 0.5 m/s backwards (the open-loop trot's direction), no lateral speed, no
#: turning (a fixed yaw rate instead of the heading controller), never a standing env.
COMMAND: dict[str, Any] = {
    "lin_vel_x": [-0.5, -0.5],
    "lin_vel_y": [0.0, 0.0],
    "ang_vel_z": [0.0, 0.0],
    "heading_command": False,
    "rel_standing_envs": 0.0,
    "resampling_time_s": [1000.0, 1000.0],
}
#: Randomisation and observation noise off: the same robot, friction and start in every episode but for the seed's
#: random actions.
QUIET_EVENTS: dict[str, Any] = {
    name: {"enabled": False} for name in ("friction", "added_mass", "joint_scale", "yaw", "push_interval_s")
}


def trot(step: int, dt: float, hz: float = 2.0) -> np.ndarray:
    """An open-loop trot in action units (x 0.25 rad): the diagonal pairs FR+RL and FL+RR in antiphase, each thigh
    swinging +-1.5 at ``hz`` and each calf lifting its foot by up to 2.0 during the thigh's forward half-swing."""
    action = np.zeros(12, np.float32)
    for leg, offset in enumerate((0.0, math.pi, math.pi, 0.0)):  # FR, FL, RR, RL
        phase = 2 * math.pi * hz * step * dt + offset
        action[3 * leg + 1] = 1.5 * math.sin(phase)
        action[3 * leg + 2] = -2.0 * max(0.0, math.sin(phase))
    return action


def behaviours(seed: int) -> dict[str, Callable[[int, float], np.ndarray]]:
    """Name -> action of step ``i`` (policy step ``dt`` s): the behaviours measured, the random ones seeded."""
    rng = np.random.default_rng(seed)

    def gaussian(std: float) -> Callable[[int, float], np.ndarray]:
        return lambda i, dt: rng.normal(0.0, std, 12).astype(np.float32)

    return {
        "zero actions (stands)": lambda i, dt: np.zeros(12, np.float32),
        "N(0, 0.5^2) actions (a first policy of init std 0.5)": gaussian(0.5),
        "N(0, 1) actions (a first policy of init std 1.0, Isaac Lab's)": gaussian(1.0),
        "open-loop trot, 2 Hz": trot,
    }


def bench_a1_rewards(seeds: tuple[int, ...] = (0, 1, 2, 3), steps: int = 500) -> dict[str, Any]:
    """Per behaviour, the mean over ``seeds``' episodes of each weighted term per step, the steps survived and the
    base's mean planar speed.

    Each episode starts from the task's reset (the standing pose dropped from 0.42 m, which settles in about 3 s) and
    runs ``steps`` policy steps or until it terminates.

    Returns:
        ``terms`` (names, in the step's order) and ``rows``: behaviour -> ``{"terms": per-step means, "steps": mean
        episode length, "speed": m/s}``.
    """
    from robosafe_tasks.a1 import A1FlatEnv

    env = A1FlatEnv(events=QUIET_EVENTS, commands=COMMAND, obs_noise=False)
    rows: dict[str, dict[str, Any]] = {}
    try:
        for seed in seeds:
            for name, act in behaviours(seed).items():
                env.reset(seed=seed)
                start = env.get_sim_state()["base_pos"][:2].copy()
                total, n = np.zeros(len(env.reward_terms)), 0
                for i in range(steps):
                    _, _, terminated, _, info = env.step(act(i, env.step_dt))
                    total += info["reward_terms"]
                    n += 1
                    if terminated:
                        break
                speed = float(np.linalg.norm(env.get_sim_state()["base_pos"][:2] - start)) / (n * env.step_dt)
                row = rows.setdefault(name, {"terms": [], "steps": [], "speed": []})
                row["terms"].append(total / n)
                row["steps"].append(n)
                row["speed"].append(speed)
    finally:
        env.close()
    means = {name: {key: np.mean(values, axis=0) for key, values in row.items()} for name, row in rows.items()}
    return {"terms": list(env.reward_terms), "rows": means}
