"""What the gradient guard costs on the clean path: time per PPO update, guarded vs plain, side by side in one process.

Two algorithms are built with identical weights and identical rollout data: rsl-rl's ``PPO`` and
:class:`~robo_safe_rl.training.ppo.SafePPO` (``safety.grad_guard.mode`` as given, no faults). The timed blocks
alternate, A B B A A B ..., so that drift of a shared machine falls on both; each block runs ``updates`` calls of
``update()`` (the learning part of an iteration: ``epochs x mini_batches`` optimizer steps) on the same stored
rollout. The result holds the median time per update of each and the ratio of the medians (guarded / plain; 1.0 means
free), by wall clock and by process CPU time: on a shared machine other processes' load lands in the wall clock of
whichever block it hits, while CPU time (with one torch thread, ``torch.set_num_threads(1)``) counts only the work
done, so the CPU-time ratio is the steadier estimate of the guard's cost. The whole training iteration (rollout
included) is measured by the training benchmark; this one isolates the part the guard touches.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from rsl_rl.algorithms import PPO
from rsl_rl.models import MLPModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.training.ppo import SafePPO


def build_ppo(
    cls: type[PPO],
    obs_dim: int,
    num_actions: int,
    num_envs: int,
    steps: int,
    hidden: Sequence[int],
    *,
    device: str = "cpu",
    **kwargs: Any,
) -> PPO:
    """A PPO (or SafePPO) of MLP actor and critic on ``device`` with an empty rollout storage; ``kwargs`` are the
    algorithm's."""
    obs = TensorDict({"policy": torch.zeros(num_envs, obs_dim, device=device)}, batch_size=[num_envs], device=device)
    groups = {"actor": ["policy"], "critic": ["policy"]}
    dist = {"class_name": "rsl_rl.modules.distribution:GaussianDistribution", "init_std": 1.0}
    actor = MLPModel(obs, groups, "actor", num_actions, hidden_dims=list(hidden), distribution_cfg=dist)
    critic = MLPModel(obs, groups, "critic", 1, hidden_dims=list(hidden))
    storage = RolloutStorage("rl", num_envs, steps, obs, [num_actions], device=device)
    return cls(actor.to(device), critic.to(device), storage, device=device, **kwargs)


def fill_rollout(alg: PPO, obs_dim: int, seed: int) -> None:
    """A rollout of Gaussian observations and rewards with 2 % terminations, then returns and advantages."""
    device = alg.device
    gen = torch.Generator(device=device).manual_seed(seed)
    n = alg.storage.num_envs
    with torch.inference_mode():
        for _ in range(alg.storage.num_transitions_per_env):
            obs = TensorDict(
                {"policy": torch.randn(n, obs_dim, generator=gen, device=device)}, batch_size=[n], device=device
            )
            alg.act(obs)
            dones = (torch.rand(n, generator=gen, device=device) < 0.02).float()
            alg.process_env_step(obs, torch.randn(n, generator=gen, device=device), dones, {})
        alg.compute_returns(obs)


def _time_block(alg: PPO, updates: int) -> tuple[float, float]:
    """Seconds per update: wall clock and this process's CPU time."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(updates):
        alg.update()
    return (time.perf_counter() - wall) / updates, (time.process_time() - cpu) / updates


def bench_guard(
    num_envs: int = 16,
    steps_per_env: int = 24,
    *,
    obs_dim: int = 28,
    num_actions: int = 8,
    hidden_dims: Sequence[int] = (256, 128, 128),
    num_learning_epochs: int = 5,
    num_mini_batches: int = 4,
    mode: str = "skip",
    repeats: int = 15,
    updates: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure the guard's clean-path cost per PPO update on CPU.

    Args:
        num_envs: Envs of the synthetic rollout (the Ant default is 16).
        steps_per_env: Steps per env (default 24): a batch is ``num_envs * steps_per_env`` transitions.
        obs_dim: Observation size (pybullet Ant: 28).
        num_actions: Action size (Ant: 8).
        hidden_dims: Hidden layers of actor and critic alike.
        num_learning_epochs: rsl-rl's ``num_learning_epochs``.
        num_mini_batches: rsl-rl's ``num_mini_batches``.
        mode: The guard's mode (``skip``, ``zero`` or ``raise``; all take the same clean path).
        repeats: Timed blocks per variant (alternating A B B A ...).
        updates: ``update()`` calls per block.
        seed: Seeds the weights and the rollout, identical for both variants.

    Returns:
        The sizes; ``plain_s_per_update`` and ``guarded_s_per_update`` (wall-clock medians) and their ``ratio``
        (guarded / plain); ``plain_cpu_s_per_update``, ``guarded_cpu_s_per_update`` and ``ratio_cpu``, the same by
        process CPU time; and the per-block wall-clock times ``plain_runs`` and ``guarded_runs``.
    """
    ppo_kwargs = {"num_learning_epochs": num_learning_epochs, "num_mini_batches": num_mini_batches}
    shape = (obs_dim, num_actions, num_envs, steps_per_env, hidden_dims)
    torch.manual_seed(seed)
    plain = build_ppo(PPO, *shape, **ppo_kwargs)
    torch.manual_seed(seed)
    guarded = build_ppo(SafePPO, *shape, **ppo_kwargs, grad_guard={"mode": mode})
    for alg in (plain, guarded):
        fill_rollout(alg, obs_dim, seed)
        alg.update()  # warm-up: allocations, first Adam step
    runs: dict[str, list[float]] = {"plain": [], "guarded": []}
    cpu: dict[str, list[float]] = {"plain": [], "guarded": []}
    for i in range(repeats):
        for alg in (plain, guarded) if i % 2 == 0 else (guarded, plain):
            name = "plain" if alg is plain else "guarded"
            wall_s, cpu_s = _time_block(alg, updates)
            runs[name].append(wall_s)
            cpu[name].append(cpu_s)
    plain_s, guarded_s = statistics.median(runs["plain"]), statistics.median(runs["guarded"])
    plain_cpu, guarded_cpu = statistics.median(cpu["plain"]), statistics.median(cpu["guarded"])
    return {
        "num_envs": num_envs,
        "steps_per_env": steps_per_env,
        "mini_batch_size": num_envs * steps_per_env // num_mini_batches,
        "steps_per_update": num_learning_epochs * num_mini_batches,
        "hidden_dims": list(hidden_dims),
        "mode": mode,
        "repeats": repeats,
        "updates_per_block": updates,
        "torch_threads": torch.get_num_threads(),
        "plain_s_per_update": plain_s,
        "guarded_s_per_update": guarded_s,
        "ratio": guarded_s / plain_s,
        "plain_cpu_s_per_update": plain_cpu,
        "guarded_cpu_s_per_update": guarded_cpu,
        "ratio_cpu": guarded_cpu / plain_cpu,
        "plain_runs": runs["plain"],
        "guarded_runs": runs["guarded"],
    }
