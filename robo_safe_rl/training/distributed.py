"""Process-group set-up for multi-process training under ``torchrun``, on CUDA (NCCL) or on CPU (gloo).

rsl-rl's ``OnPolicyRunner._configure_multi_gpu`` hard-codes NCCL and ``cuda:{LOCAL_RANK}``; a runner that calls
:func:`init_distributed` instead (``SafeRunner`` does) also trains multi-process on CPU ranks, which is how the
multi-process paths are tested on machines without a GPU.

One machine, two processes (CPU or one GPU each)::

    torchrun --standalone --nproc_per_node=2 tools/train.py device=cpu        # or device=cuda (cuda:LOCAL_RANK)

Several machines: the same command on every node, with torchrun's rendezvous options instead of ``--standalone``
(node 0's address must be reachable from all nodes; the port open)::

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=NODE0_HOST:29400 \\
        --rdzv_id=my_run tools/train.py device=cuda

torchrun sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (and ``MASTER_ADDR``/``MASTER_PORT``) for every process;
nothing else is needed here. Every rank trains on its own envs; gradients are averaged each mini-batch, and the
gradient guard's skip decision is agreed by all ranks, so the replicas stay bitwise identical.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from robo_safe_rl.errors import ConfigError

logger = logging.getLogger(__name__)

_TIMEOUT = timedelta(minutes=30)  # torch's default; a rank stuck longer than this is dead, not slow


def _env_int(name: str, default: int | None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise ConfigError(f"{name} is not set: multi-process training expects to be launched by torchrun")
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not an integer (set by torchrun)") from err


def init_distributed(device: str) -> dict[str, int] | None:
    """Join the process group torchrun set up, and return rsl-rl's ``multi_gpu_cfg``.

    Args:
        device: This process's torch device: ``cpu``, or ``cuda:N`` with ``N == LOCAL_RANK`` (resolve ``auto`` or a
            bare ``cuda`` before calling).

    Returns:
        None when ``WORLD_SIZE`` is unset or 1 (single process); else ``{"global_rank": RANK, "local_rank":
        LOCAL_RANK, "world_size": WORLD_SIZE}``, the dict rsl-rl's PPO takes as ``multi_gpu_cfg``.

    Raises:
        ConfigError: On a missing or inconsistent rank variable, a device other than ``cpu`` or
            ``cuda:LOCAL_RANK``, or CUDA requested where it is not available.
    """
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size <= 1:
        return None
    rank = _env_int("RANK", None)
    local_rank = _env_int("LOCAL_RANK", None)
    if not 0 <= rank < world_size or not 0 <= local_rank < world_size:
        raise ConfigError(f"RANK={rank} and LOCAL_RANK={local_rank} must lie in [0, WORLD_SIZE={world_size})")
    kind = torch.device(device).type
    if kind == "cuda":
        expected = f"cuda:{local_rank}"
        if device != expected:
            raise ConfigError(
                f"device={device!r} on local rank {local_rank}: each process drives its own GPU, expected "
                f"{expected!r}. Hint: device=cuda resolves to cuda:LOCAL_RANK"
            )
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_rank >= available:
            raise ConfigError(
                f"device={device!r} but this machine has {available} usable CUDA device(s). "
                "Hint: device=cpu trains multi-process over gloo"
            )
        backend = "nccl"
    elif kind == "cpu":
        backend = "gloo"
    else:
        raise ConfigError(f"device={device!r}: multi-process training supports cpu (gloo) and cuda:N (nccl)")
    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise ConfigError(
                f"a process group (rank {dist.get_rank()} of {dist.get_world_size()}) already exists, "
                f"but torchrun says rank {rank} of {world_size}"
            )
    else:
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=_TIMEOUT)
    logger.info("rank %d of %d (local rank %d) joined the %s process group", rank, world_size, local_rank, backend)
    return {"global_rank": rank, "local_rank": local_rank, "world_size": world_size}
