"""tools/train.py under torchrun on CPU (gloo): two ranks train together, agree on skips and rollbacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two ranks under torchrun: ~6 s alone, much more on a busy machine
def test_two_cpu_ranks_agree_on_faults_of_one_rank(tmp_path: Path) -> None:
    run_dir = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "tools/train.py",
        "device=cpu",
        "task.num_envs=2",
        "runner.num_steps_per_env=8",
        "runner.max_iterations=4",
        "runner.save_interval=2",
        "faults.grad.at_updates=[3,25]",
        "faults.grad.rank=1",
        "faults.policy.nonfinite_weights_after_update=[2]",
        "faults.policy.rank=1",
        "faults.env.obs_nonfinite=0.2",
        f"run_dir={run_dir}",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 4
    # Both ranks step their envs: the env steps of both are counted.
    assert summary["env_steps"] == 4 * 2 * 8 * 2
    # The NaN gradients were injected on rank 1 only; the guard's counters are summed over ranks.
    assert summary["faults_injected"]["grad_nonfinite"] == 2
    assert summary["safety"]["grad_steps_skipped"] == 2
    # The policy was corrupted on rank 1 only; rank 0, which writes the summary, rolled back with it.
    assert summary["faults_injected"]["policy_weights_after_update"] == 1
    assert summary["safety"]["rollbacks"] == 1 and summary["safety"]["nonfinite_updates"] == 1
    # Env faults of both ranks are counted: injected and caught, summed over ranks.
    injected_obs = summary["faults_injected"]["obs_nonfinite"]
    assert injected_obs == summary["safety"]["nonfinite_obs"]
    recorded = sum(
        len((run_dir / d / "incidents.jsonl").read_text().splitlines()) for d in ("incidents", "incidents_rank1")
    )
    assert recorded == injected_obs
    final = torch.load(summary["final_checkpoint"], weights_only=True)
    assert all(torch.isfinite(t).all() for t in final["actor_state_dict"].values())
    # Only rank 0 displays: one line for the last iteration, with the counters summed over both ranks.
    last = [line for line in done.stdout.splitlines() if line.startswith("iteration 4/4 |")]
    assert len(last) == 1 and "rollbacks 1" in last[0] and "skipped steps 2" in last[0], done.stdout[-2000:]
    # Only rank 0 writes incidents/ and checkpoints; rank 1 keeps its own incident folder.
    assert (run_dir / "incidents").is_dir() and (run_dir / "incidents_rank1").is_dir()
