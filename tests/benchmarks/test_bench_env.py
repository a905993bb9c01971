"""The per-task env bench: a task's step() against raw stepping of the same robot, on the same trajectory."""

from __future__ import annotations

import pytest

import robosafe_tasks
from benchmarks.cli import main
from benchmarks.env_rate import bench_task_step


def test_task_step_bench_measures_both_cases_on_the_same_robot() -> None:
    r = bench_task_step("RoboSafe/Hopper-v0", steps=30, repeats=1)
    assert set(r["rates"]) == {"raw", "env_step", "env_step_resets"}
    assert all(rate > 0 for rate in r["rates"].values())
    assert r["ratio"] == pytest.approx(r["rates"]["env_step"] / r["rates"]["raw"])


@pytest.mark.slow  # the whole env section, quick sizes: tens of seconds
def test_env_section_has_a_row_per_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--only", "env"]) == 0
    out = capsys.readouterr().out
    for task_id in robosafe_tasks.TASKS:
        assert f"| `{task_id}` |" in out
