"""Multi-process drill of the gradient guard, run by ``test_guard_ddp.py`` under torchrun (2 CPU ranks, gloo).

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/training/guard_ddp_script.py OUT_DIR

A real rsl-rl ``OnPolicyRunner`` (its process-group set-up replaced by :func:`init_distributed`, so gloo on CPU)
trains SafePPO on ``tiny_env.TinyEnv``; each rank sees different observations, so the ranks' gradients
differ and are averaged every mini-batch, as in real multi-GPU training. A NaN gradient element is injected on rank
1 only. Phases (each writes ``OUT_DIR/<phase>_rank<r>.pt`` with the final weights, optimizer state, counters and the
error message if one was raised):

- ``skip``: NaN on rank 1 at updates 1 and 5; both ranks must skip both steps and end bitwise identical;
- ``zero``: the same faults; rank 1 zeroes its element before the all-reduce, so both ranks stay identical;
- ``raise``: NaN on rank 1 at update 2; both ranks must raise at the same mini-batch (no hang), rank 1 dumps;
- ``off``: no guard, NaN on rank 1 at update 3: the all-reduce spreads it into both ranks' weights.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from rsl_rl.runners import OnPolicyRunner
from tiny_env import TinyEnv, train_cfg

from robo_safe_rl.errors import NonFiniteError
from robo_safe_rl.training.distributed import init_distributed

ITERATIONS = 3  # x 2 epochs x 2 mini-batches = updates 0..11


class GlooRunner(OnPolicyRunner):
    """rsl-rl's runner with the process group of :func:`init_distributed` (NCCL for CUDA, gloo for CPU)."""

    def _configure_multi_gpu(self) -> None:
        multi_gpu = init_distributed(self.device)
        if multi_gpu is None:
            raise RuntimeError("run this script under torchrun with --nproc_per_node=2")
        self.cfg["multi_gpu"] = multi_gpu
        self.is_distributed = True
        self.gpu_world_size = multi_gpu["world_size"]
        self.gpu_local_rank = multi_gpu["local_rank"]
        self.gpu_global_rank = multi_gpu["global_rank"]


def run_phase(out: Path, phase: str, mode: str, at_updates: list[int], iterations: int) -> None:
    rank = int(os.environ["RANK"])
    torch.manual_seed(100 + rank)  # ranks sample differently; rank 0's initial weights are broadcast
    faults = {"at_updates": at_updates, "rank": 1, "param": "actor.mlp.0.weight", "element": 1}
    cfg = train_cfg({"grad_guard": {"mode": mode}, "grad_faults": faults, "dump_dir": str(out)})
    runner = GlooRunner(TinyEnv(seed=rank + 1), cfg, log_dir=None, device="cpu")
    error = None
    try:
        runner.learn(num_learning_iterations=iterations)
    except NonFiniteError as err:
        error = str(err)
    alg: Any = runner.alg
    torch.save(
        {
            "actor": alg.actor.state_dict(),
            "critic": alg.critic.state_dict(),
            "optimizer": alg.optimizer.state_dict(),
            "safety": alg.safety_counters,
            "faults": alg.faults_injected,
            "error": error,
        },
        out / f"{phase}_rank{rank}.pt",
    )


def main(out_dir: str) -> int:
    torch.set_num_threads(1)
    out = Path(out_dir)
    run_phase(out, "skip", "skip", [1, 5], ITERATIONS)
    run_phase(out, "zero", "zero", [1, 5], ITERATIONS)
    run_phase(out, "raise", "raise", [2], ITERATIONS)
    run_phase(out, "off", "off", [3], 1)  # the last update of the iteration, so no NaN forward follows
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
