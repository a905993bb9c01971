"""Real trainings through SafeRunner: a loss that overflows."""

from __future__ import annotations

import torch
from tiny_env import TinyEnv, train_cfg

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
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
