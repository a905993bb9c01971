"""The schedule probe: rsl-rl's adaptive rule replayed on recorded KLs, and what it records on a real short run."""

from __future__ import annotations

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.schedule import UpdateRecord, probe, summarise


def test_the_rule_replayed_on_a_worked_example() -> None:
    # desired_kl 0.01: KL 0 leaves the rate (rsl-rl raises it only for 0 < KL < 0.005); 0.001 raises it x1.5 (1e-4 ->
    # 1.5e-4); 0.01 is inside [0.005, 0.02] (kept); 0.03 > 0.02 divides by 1.5 (1e-4), again (6.67e-5).
    update = UpdateRecord(1.0e-4, [0.0, 0.001, 0.01, 0.03, 0.03])
    assert update.rates(0.01) == pytest.approx([1.0e-4, 1.5e-4, 1.5e-4, 1.0e-4, 1.0e-4 / 1.5])
    # At the floor the cuts stop at 1e-5.
    assert UpdateRecord(1.2e-5, [0.05, 0.05]).rates(0.01) == pytest.approx([1.0e-5, 1.0e-5])
    s = summarise([update, UpdateRecord(1.2e-5, [0.0, 0.05])], 0.01)
    assert s["at_floor"] == 0.5 and s["steps_over_twice_target_median"] == 1.5 and s["kl_end_median"] == 0.04


def test_a_real_run_records_every_mini_batch_and_a_zero_kl_first() -> None:
    r = probe(["task.num_envs=2", "runner.num_steps_per_env=8", "algorithm.num_mini_batches=2"], 2)
    assert r["updates"] == 2 and r["steps_per_update"] == 5 * 2  # 5 epochs x 2 mini-batches, one KL each
    # The rollout's stored distribution is the current policy's at the first mini-batch of every update: the
    # observation normaliser moves only after the update, never between the rollout and it.
    assert r["kl_first_max"] == 0.0
    assert r["kl_one_step_first_update"] > 0.0
