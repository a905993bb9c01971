"""What the gradient guard costs on a device: time per PPO update with the guard on vs off, and host-device
synchronisations per mini-batch (``tools/gpu_check.py``; the CPU figures are ``tools/bench.py``'s).

Both build :class:`~robo_safe_rl.training.ppo.SafePPO` with identical weights and one synthetic rollout (Gaussian
observations and rewards, 2 % terminations) stored on the device; ``update()`` (``epochs x mini-batches`` optimizer
steps) runs again and again on it. On CUDA every timed block is closed by ``torch.cuda.synchronize()`` (kernels are
asynchronous: without it the clock stops before the work is done).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from rsl_rl.models import MLPModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.training.ppo import SafePPO

OBS_DIM, NUM_ACTIONS = 28, 8  # pybullet Ant's observation and action sizes


def build_ppo(
    device: str,
    hidden_dims: Sequence[int],
    mode: str,
    *,
    num_envs: int = 4096,
    steps: int = 24,
    epochs: int = 5,
    mini_batches: int = 4,
    seed: int = 0,
) -> SafePPO:
    """A SafePPO on ``device`` (guard ``mode``: ``skip`` or ``off``) with a filled rollout, ready to ``update()``."""
    torch.manual_seed(seed)
    obs = TensorDict({"policy": torch.zeros(num_envs, OBS_DIM, device=device)}, batch_size=[num_envs], device=device)
    groups = {"actor": ["policy"], "critic": ["policy"]}
    dist = {"class_name": "rsl_rl.modules.distribution:GaussianDistribution", "init_std": 1.0}
    actor = MLPModel(obs, groups, "actor", NUM_ACTIONS, hidden_dims=list(hidden_dims), distribution_cfg=dist)
    critic = MLPModel(obs, groups, "critic", 1, hidden_dims=list(hidden_dims))
    storage = RolloutStorage("rl", num_envs, steps, obs, [NUM_ACTIONS], device=device)
    alg = SafePPO(
        actor.to(device),
        critic.to(device),
        storage,
        num_learning_epochs=epochs,
        num_mini_batches=mini_batches,
        device=device,
        grad_guard={"mode": mode},
    )
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.inference_mode():
        for _ in range(steps):
            obs = TensorDict(
                {"policy": torch.randn(num_envs, OBS_DIM, generator=gen, device=device)},
                batch_size=[num_envs],
                device=device,
            )
            alg.act(obs)
            dones = (torch.rand(num_envs, generator=gen, device=device) < 0.02).float()
            alg.process_env_step(obs, torch.randn(num_envs, generator=gen, device=device), dones, {})
        alg.compute_returns(obs)
    return alg


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def guard_overhead(
    device: str, hidden_dims: Sequence[int] = (256, 128, 128), *, repeats: int = 8, updates: int = 3, **sizes: Any
) -> dict[str, Any]:
    """Median seconds per ``update()`` with the guard off and on (mode ``skip``), timed in alternating blocks
    (A B B A ...) so that drift falls on both; ``ratio`` is on / off (1.0: free).

    Args:
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        hidden_dims: Actor and critic hidden layers (the project's default).
        repeats: Timed blocks per variant.
        updates: ``update()`` calls per block.
        **sizes: :func:`build_ppo`'s sizes (``num_envs``, ``steps``, ``epochs``, ``mini_batches``).
    """
    algs = {
        "off": build_ppo(device, hidden_dims, "off", **sizes),
        "on": build_ppo(device, hidden_dims, "skip", **sizes),
    }
    for alg in algs.values():
        alg.update()  # warm-up: allocations, kernels chosen, the first Adam step
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(repeats):
        for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
            _synchronize(device)
            start = time.perf_counter()
            for _ in range(updates):
                algs[name].update()
            _synchronize(device)
            runs[name].append((time.perf_counter() - start) / updates)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"hidden_dims": list(hidden_dims), "off_s_per_update": off, "on_s_per_update": on, "ratio": on / off}


def count_syncs(alg: SafePPO, device: str) -> int:
    """Host-device synchronisations of one ``alg.update()``, as ``torch.cuda.set_sync_debug_mode("warn")`` reports
    them (one warning each)."""
    _synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            alg.update()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def syncs_per_mini_batch(device: str, hidden_dims: Sequence[int], mode: str = "skip") -> dict[str, Any]:
    """Host-device syncs of an update with 2 and with 4 mini-batches (one epoch), split into a count per mini-batch
    and a fixed count per update: ``syncs(m) = per_mini_batch * m + per_update``.

    Args:
        device: A CUDA device (sync debug mode is CUDA's).
        hidden_dims: Actor and critic hidden layers; the counts must not depend on them.
        mode: The guard's mode.
    """
    algs = {m: build_ppo(device, hidden_dims, mode, epochs=1, mini_batches=m) for m in (2, 4)}
    for alg in algs.values():
        alg.update()  # warm-up: the first Adam step allocates its state
    counts = {m: count_syncs(alg, device) for m, alg in algs.items()}
    per_mini_batch = (counts[4] - counts[2]) / 2
    parameters = sum(p.numel() for p in algs[2].actor.parameters()) + sum(
        p.numel() for p in algs[2].critic.parameters()
    )
    return {
        "hidden_dims": list(hidden_dims),
        "parameters": parameters,
        "syncs_2_mini_batches": counts[2],
        "syncs_4_mini_batches": counts[4],
        "per_mini_batch": per_mini_batch,
        "per_update": counts[2] - 2 * per_mini_batch,
    }
