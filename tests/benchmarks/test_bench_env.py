"""The per-task env bench: a task's step() against raw stepping of the same robot, on the same trajectory."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robosafe_tasks
from benchmarks.cli import main
from benchmarks.env_rate import bench_a1_terms, bench_task_step
from robosafe_tasks.a1.config import TERM_NAMES


def test_task_step_bench_measures_both_cases_on_the_same_robot() -> None:
    r = bench_task_step("RoboSafe/Hopper-v0", steps=200, repeats=2)
    assert set(r["rates"]) == {"raw", "env_step", "raw_resets", "env_step_resets"}
    assert all(rate > 0 for rate in r["rates"].values())
    assert r["ratio"] == pytest.approx(r["rates"]["env_step"] / r["rates"]["raw"])
    assert r["ratio_resets"] == pytest.approx(r["rates"]["env_step_resets"] / r["rates"]["raw_resets"])
    # The raw baseline resets where step() ended its episodes: the Hopper under random actions falls within tens of
    # steps, and the same actions from the same seeded resets (the k-th with seed 1 + k) end the same episodes here.
    env = gym.make("RoboSafe/Hopper-v0", disable_env_checker=True).unwrapped
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(200, 3)).astype(np.float32)
    env.reset(seed=1)
    ends = []
    for i, a in enumerate(actions):
        if env.step(a)[2]:
            ends.append(i)
            env.reset(seed=1 + len(ends))
    env.close()
    assert len(ends) >= 3 and r["episode_ends"] == ends


def test_task_step_bench_ends_episodes_at_the_time_limit_too() -> None:
    # The Ant does not fall under random actions (no termination in thousands of steps): a training's TimeLimit ends
    # its episode after 1,000 steps, the 1,000th action being index 999.
    r = bench_task_step("RoboSafe/Ant-v0", steps=1100, repeats=1)
    assert gym.spec("RoboSafe/Ant-v0").max_episode_steps == 1000 and r["episode_ends"] == [999]


def test_a1_terms_bench_times_every_term_and_the_terms_together() -> None:
    r = bench_a1_terms(steps=20, repeats=1, calls=50)
    assert list(r["per_term_us"]) == list(TERM_NAMES) and all(us > 0 for us in r["per_term_us"].values())
    assert r["step_us"] == pytest.approx(1e6 / r["rates"]["all_terms"])
    assert r["terms_us"] == pytest.approx(r["step_us"] - 1e6 / r["rates"]["no_terms"])


@pytest.mark.slow  # the whole env section, quick sizes: tens of seconds
def test_env_section_has_a_row_per_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--only", "env"]) == 0
    out = capsys.readouterr().out
    for task_id in robosafe_tasks.TASKS:
        assert f"| `{task_id}` |" in out
    for term in TERM_NAMES:
        assert f"| `{term}` |" in out
    assert "| every term, in the step (all weights 0 vs the defaults) |" in out


def test_a1_rewards_pay_per_behaviour() -> None:
    from benchmarks.a1_rewards import bench_a1_rewards

    r = bench_a1_rewards(seeds=(0,), steps=200)
    rows = r["rows"]
    assert len(rows) == 4 and r["terms"][0] == "track_lin_vel_xy_exp"
    for row in rows.values():
        assert row["steps"] == 200  # none of the four ends an episode within 4 s on flat ground
    stand, noise_half, noise_one, trot = rows.values()
    # Standing is paid its tracking of the zero yaw rate in full (0.75 x 0.02 s) and barely moves; the trot moves.
    assert stand["terms"][1] == pytest.approx(0.015, abs=1e-3) and stand["speed"] < 0.05 < 0.3 < trot["speed"]
    # The ordering the A1's training meets: standing pays most, the first policy of Isaac Lab's init std 1.0 least.
    stand, noise_half, noise_one, trot = (row["terms"].sum() for row in (stand, noise_half, noise_one, trot))
    assert stand > noise_half > trot > noise_one
    assert noise_one < 0.0 < noise_half
