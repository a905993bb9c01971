"""The clean-path benchmark of SafeStep runs, measures both sides and takes the clean path only."""

from __future__ import annotations

import math

import pytest

from benchmarks.safe_step import bench_safe_step


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "ant"])
def test_bench_safe_step_reports_both_rates_and_their_ratio(env_id: str, ant_env_id: str) -> None:
    env_id = ant_env_id if env_id == "ant" else env_id
    result = bench_safe_step(env_id, steps=300, repeats=3)
    assert result["env_id"] == env_id and (result["steps"], result["repeats"]) == (300, 3)
    assert len(result["unwrapped_runs"]) == len(result["wrapped_runs"]) == len(result["ratios"]) == 3
    assert result["unwrapped_steps_per_s"] > 0 and result["wrapped_steps_per_s"] > 0
    ratio = result["wrapped_steps_per_s"] / result["unwrapped_steps_per_s"]
    assert math.isclose(result["ratio"], ratio)
    # In-bounds actions: nothing was sanitised, nothing went wrong.
    assert result["counters"] == dict.fromkeys(result["counters"], 0)
