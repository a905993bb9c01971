"""``tools/gpu_check.py`` where no GPU is: it says so with its own exit code; its run checks and its guard timing work
on real CPU runs (the CUDA figures themselves need a GPU: BENCHMARKS.md's GPU section)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.gpu_check import EXIT_NO_CUDA, GUARD_FILE, check_run, guard_overhead, guard_syncs, split_syncs
from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_the_check_says_so_and_exits_with_its_own_code() -> None:
    done = subprocess.run(
        [sys.executable, "tools/gpu_check.py"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == EXIT_NO_CUDA == 3
    assert done.stdout == ""
    assert done.stderr.startswith("gpu_check: no CUDA device here (torch ") and done.stderr.count("\n") == 1


def test_the_run_checks_pass_a_clean_run_but_its_device_and_name_a_corrupt_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    tiny = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", "display=plain"]
    # device=cpu: the default (auto) trains on CUDA where there is a GPU, and this test checks a CPU run's summary.
    assert main([*tiny, "device=cpu", f"run_dir={run_dir}"]) == 0
    # Everything a clean run must leave is there; only the device is not CUDA.
    assert check_run(RunDir(run_dir), 2) == ["summary device is 'cpu', expected cuda"]
    assert check_run(RunDir(run_dir), 3)[0] == "summary iterations is 2, expected 3"
    final = run_dir / "model_1.pt"
    checkpoint = torch.load(final, weights_only=True)
    next(iter(checkpoint["actor_state_dict"].values())).fill_(math.nan)
    torch.save(checkpoint, final)
    assert check_run(RunDir(run_dir), 2)[-1] == "model_1.pt is corrupt"


def test_the_guard_overhead_is_timed_on_the_device_given() -> None:
    cost = guard_overhead("cpu", (16, 16), repeats=2, updates=1, num_envs=16, steps=4, epochs=1, mini_batches=2)
    assert cost["hidden_dims"] == [16, 16]
    assert cost["off_s_per_update"] > 0 and cost["on_s_per_update"] > 0
    assert math.isclose(cost["ratio"], cost["on_s_per_update"] / cost["off_s_per_update"])


def test_syncs_split_per_line_into_per_mini_batch_and_per_update_and_the_guards_are_summed() -> None:
    # An update of the [1024, 1024, 512] network at a fixed learning rate on an H200 (BENCHMARKS.md, "GPU path"):
    # torch's validation of the Normal's two arguments twice per mini-batch, the guard's read once per mini-batch,
    # and its end-of-update summary once.
    normal, check, summary = ("torch/distributions/normal.py", 80), (str(GUARD_FILE), 187), (str(GUARD_FILE), 232)
    two = Counter({normal: 4, check: 2, summary: 1})
    four = Counter({normal: 8, check: 4, summary: 1})
    split = split_syncs(two, four)
    assert split == {normal: (2, 0), check: (1, 0), summary: (0, 1)}
    assert list(split) == [normal, check, summary]  # most per mini-batch first
    assert guard_syncs(split) == (1, 1)
    # rsl-rl's adaptive schedule: a KL comparison read in only one of the 2-mini-batch update's branches.
    kl = ("robo_safe_rl/training/ppo.py", 282)
    assert split_syncs(two + Counter({kl: 1}), four + Counter({kl: 4}))[kl] == (1.5, -2)
    # The guard's share counts only its own module's lines, and sees a second sync per mini-batch there.
    extra = (str(GUARD_FILE), 99)
    assert guard_syncs(split_syncs(two + Counter({extra: 2}), four + Counter({extra: 4}))) == (2, 1)
