"""What SafeStep costs on the clean path: wrapped vs unwrapped env-steps/s, measured side by side in one process.

Two envs of the same id are built, one wrapped in :class:`~robo_safe_rl.bridge.safe_step.SafeStep` with the given
config, and both are driven with the same pre-drawn in-bounds actions (so SafeStep takes its clean path). The
timed blocks alternate, A B B A A B ..., so that drift of a shared machine falls on both; each block runs
``steps`` steps (episodes are reset inside the block, as in training). The result holds the median rate of each
and the ratio of the medians (wrapped / unwrapped; 1.0 means free).

The env id must already be registered: this module does not import the task package (``tools/bench.py`` does).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.safe_step import SafeStep
from robo_safe_rl.config.safe_step import SafeStepConfig


def _time_block(env: gym.Env, actions: np.ndarray) -> float:
    """Step ``env`` through ``actions`` (shape (steps, A)), resetting ended episodes; return env-steps/s."""
    step, reset = env.step, env.reset
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = step(action)
        if terminated or truncated:
            reset()
    return len(actions) / (time.perf_counter() - start)


def bench_safe_step(
    env_id: str,
    steps: int = 2000,
    repeats: int = 7,
    *,
    seed: int = 0,
    cfg: SafeStepConfig | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Measure SafeStep's clean-path cost on ``env_id``.

    Args:
        env_id: A registered gymnasium id with a Box action space.
        steps: Env steps per timed block.
        repeats: Timed blocks per variant (alternating).
        seed: Seeds the resets and the action draw.
        cfg: SafeStep settings (defaults when ``None``).
        env_kwargs: Extra keyword arguments for ``gymnasium.make``.

    Returns:
        ``env_id``, ``steps``, ``repeats``, ``unwrapped_steps_per_s`` and ``wrapped_steps_per_s`` (medians),
        ``ratio`` (wrapped / unwrapped medians), ``ratios`` (per repeat) and the per-block rates
        ``unwrapped_runs`` and ``wrapped_runs``.
    """
    kwargs = env_kwargs or {}
    raw = gym.make(env_id, **kwargs)
    wrapped = SafeStep(gym.make(env_id, **kwargs), cfg)
    try:
        space = raw.action_space
        rng = np.random.default_rng(seed)
        low = np.where(np.isfinite(space.low), space.low, -1.0)
        high = np.where(np.isfinite(space.high), space.high, 1.0)
        actions = rng.uniform(low, high, size=(steps, *space.shape)).astype(space.dtype)
        raw.reset(seed=seed)
        wrapped.reset(seed=seed)
        _time_block(raw, actions[: max(1, steps // 10)])  # warm caches and allocators
        _time_block(wrapped, actions[: max(1, steps // 10)])
        rates: dict[str, list[float]] = {"unwrapped": [], "wrapped": []}
        order = [("unwrapped", raw), ("wrapped", wrapped)]
        for r in range(repeats):
            for name, env in order if r % 2 == 0 else order[::-1]:
                rates[name].append(_time_block(env, actions))
        ratios = [w / u for w, u in zip(rates["wrapped"], rates["unwrapped"], strict=True)]
        unwrapped_median = statistics.median(rates["unwrapped"])
        wrapped_median = statistics.median(rates["wrapped"])
        return {
            "env_id": env_id,
            "steps": steps,
            "repeats": repeats,
            "unwrapped_steps_per_s": unwrapped_median,
            "wrapped_steps_per_s": wrapped_median,
            "ratio": wrapped_median / unwrapped_median,
            "ratios": ratios,
            "unwrapped_runs": rates["unwrapped"],
            "wrapped_runs": rates["wrapped"],
            "counters": dict(wrapped.counters),
        }
    finally:
        raw.close()
        wrapped.close()
