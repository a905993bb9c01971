"""The critic's own learning rate (``algorithm.critic_learning_rate``, SafePPO's addition (8)) in a real SafeRunner."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_env import TinyEnv, train_cfg

from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.recovery import Snapshot
from robo_safe_rl.training.runner import SafeRunner


def runner(log_dir: Path, **algorithm: object) -> SafeRunner:
    torch.manual_seed(0)
    return SafeRunner(
        TinyEnv(seed=1, num_envs=4), train_cfg(algorithm), log_dir=str(log_dir), device="cpu", files=RunDir(log_dir)
    )


def weights(run: SafeRunner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in (*run.alg.actor.parameters(), *run.alg.critic.parameters())]


def test_two_groups_at_one_rate_step_as_rsl_rls_one_group(tmp_path: Path) -> None:
    # Adam's step is per element: the same rate in the critic's own group gives the same weights, bit for bit, as
    # rsl-rl's one group holding both networks (fixed rate, 3 updates of 2 epochs x 2 mini-batches).
    # Each runner seeds torch's generator as it is made and samples from it as it learns: made and trained in turn.
    one = runner(tmp_path / "one", schedule="fixed", learning_rate=1e-3)
    one.learn(3)
    two = runner(tmp_path / "two", schedule="fixed", learning_rate=1e-3, critic_learning_rate=1e-3)
    two.learn(3)
    assert len(one.alg.optimizer.param_groups) == 1 and len(two.alg.optimizer.param_groups) == 2
    for a, b in zip(weights(one), weights(two), strict=True):
        assert torch.equal(a, b)


def test_the_schedule_moves_the_actors_rate_and_leaves_the_critics(tmp_path: Path) -> None:
    # The adaptive schedule starts at 1e-3 and moves by factors of 1.5 after every mini-batch; the critic's group
    # stays at its 3e-4 through all 4 updates, and its weights take other steps than at the actor's rate.
    own = runner(tmp_path / "own", learning_rate=1e-3, critic_learning_rate=3e-4)
    own.learn(4)
    shared = runner(tmp_path / "shared", learning_rate=1e-3)
    shared.learn(4)
    actor_group, critic_group = own.alg.optimizer.param_groups
    assert own.alg.learning_rate != 1e-3 and actor_group["lr"] == own.alg.learning_rate
    assert critic_group["lr"] == 3e-4
    assert not torch.equal(next(own.alg.critic.parameters()), next(shared.alg.critic.parameters()))
    # Both groups come back from a checkpoint (rsl-rl saves the optimizer's state dict whole).
    own.save(str(tmp_path / "model.pt"))
    again = runner(tmp_path / "again", learning_rate=1e-3, critic_learning_rate=3e-4)
    again.load(str(tmp_path / "model.pt"))
    assert [g["lr"] for g in again.alg.optimizer.param_groups] == [actor_group["lr"], 3e-4]


def test_a_rollback_lowers_both_rates(tmp_path: Path) -> None:
    # A rollback at lr_factor 0.5 restores the snapshot's rates and halves them: the actor's (the schedule's,
    # alg.learning_rate) and the critic's own 3e-4 -> 1.5e-4.
    run = runner(tmp_path / "run", schedule="fixed", learning_rate=1e-3, critic_learning_rate=3e-4)
    snapshot = Snapshot.take(run.alg, iteration=0)
    run.learn(1)
    assert snapshot.restore(run.alg, lr_factor=0.5) == 5e-4
    assert [g["lr"] for g in run.alg.optimizer.param_groups] == [5e-4, 1.5e-4]
