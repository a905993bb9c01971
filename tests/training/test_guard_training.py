"""Real trainings through SafeRunner: a loss that overflows, and weights that turn non-finite in the middle of an
update (which used to end the run inside ``update()``, before the runner's post-update check could roll back)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_env import TinyEnv, train_cfg

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import EVENTS_FILE, SUMMARY_FILE
from robo_safe_rl.training.runner import SafeRunner

MINI_BATCHES = 2 * 2  # per update: tiny_env.train_cfg's 2 epochs x 2 mini-batches


def make_runner(mode: str, reward_scale: float = 1.0) -> SafeRunner:
    torch.manual_seed(0)
    cfg = train_cfg({"grad_guard": {"mode": mode}})
    return SafeRunner(TinyEnv(seed=1, reward_scale=reward_scale), cfg, log_dir=None, device="cpu")


def weights(runner: SafeRunner) -> list[torch.Tensor]:
    saved = runner.alg.save()
    return [t.clone() for t in (*saved["actor_state_dict"].values(), *saved["critic_state_dict"].values())]


def test_rewards_of_1e30_move_the_loss_counter_and_no_weight() -> None:
    # Rewards of about -4e30 are finite, so nothing upstream objects, but the value loss (V - R)^2 overflows float32 in
    # every mini-batch; its gradients stay finite. Each mini-batch is a counted loss event and no step is taken.
    runner = make_runner("skip", reward_scale=1e30)
    before = weights(runner)
    runner.learn(3)
    counters = runner.safety_counters()
    assert counters["loss_nonfinite"] == counters["grad_steps_skipped"] == 3 * MINI_BATCHES
    assert counters["grad_nonfinite_elements"] == 0 and counters["rollbacks"] == 0
    assert all(torch.equal(a, b) for a, b in zip(weights(runner), before, strict=True))
    assert runner.alg.optimizer.state_dict()["state"] == {}  # Adam never stepped, so its moments never moved


@pytest.mark.parametrize(("mode", "stop"), [("off", 3), ("skip", 2)])
def test_a_weight_turned_non_finite_between_mini_batches_rolls_back(
    mode: str, stop: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A hook after the optimizer's 6th step (iteration 1, mini-batch 1) writes a NaN into a weight: a corruption no
    # gradient check sees. The actor's mean turns NaN, so mini-batch 2's loss is NaN. Guard off: that step spreads the
    # NaN into the action std, and mini-batch 3's sampler raises "normal expects all elements of std >= 0.0" inside
    # update(). Guard on: the NaN loss is the first sign. Either way the update stops there and the runner rolls back.
    runner = make_runner(mode)
    steps = itertools.count()

    def poison(*_: Any) -> None:
        if next(steps) == 5:
            with torch.no_grad():
                runner.alg.actor.mlp[0].weight[0, 0] = math.nan

    runner.alg.optimizer.register_step_post_hook(poison)
    runner.learn(3)
    counters = runner.safety_counters()
    assert counters["nonfinite_updates"] == counters["rollbacks"] == 1
    assert runner.next_iteration == 3 and all(torch.isfinite(t).all() for t in weights(runner))
    assert f"iteration 1: the update of iteration 1 stopped at mini-batch {stop} " in caplog.text
    assert "non-finite learning state in actor/" in caplog.text


def test_the_gradient_drill_without_the_guard_rolls_back_and_the_ant_run_completes(tmp_path: Path) -> None:
    # Guard off, a NaN gradient at mini-batch 3 of iteration 0: the step writes NaN into every actor weight. This run
    # used to die of the sampler's error from inside update(), with no summary.json.
    run_dir = tmp_path / "run"
    small = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=3", "runner.save_interval=2"]
    drill = ["safety.grad_guard.mode=off", "faults.grad.at_updates=[3]"]
    assert main([*small, *drill, f"run_dir={run_dir}"]) == 0
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 3
    # The rolled-back iteration repeats update index 3, but a scheduled fault fires once.
    assert summary["faults_injected"] == {"grad_nonfinite": 1}
    assert summary["safety"]["nonfinite_updates"] == summary["safety"]["rollbacks"] == 1
    events = [json.loads(line) for line in (run_dir / EVENTS_FILE).read_text().splitlines()]
    (rollback,) = [e for e in events if e["kind"] == "rollback"]
    assert rollback["iteration"] == 0 and "stopped at mini-batch 4 (update 4)" in rollback["what"]
    assert "actor/mlp.0.weight" in rollback["layers"]
