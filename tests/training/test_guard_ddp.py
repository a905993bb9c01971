"""Multi-process: ``torchrun --nproc_per_node=2`` on CPU (gloo), a NaN gradient on rank 1 only.

One real torchrun run of ``guard_ddp_script.py`` (four phases, about 10 s) serves the module; see its docstring.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from robo_safe_rl.errors import ConfigError
from robo_safe_rl.training.distributed import init_distributed

SCRIPT = Path(__file__).with_name("guard_ddp_script.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT), str(out)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def load(out: Path, phase: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return tuple(torch.load(out / f"{phase}_rank{r}.pt", weights_only=True) for r in (0, 1))  # type: ignore[return-value]


def tensors(saved: dict[str, Any]) -> list[torch.Tensor]:
    state = [t for s in saved["optimizer"]["state"].values() for t in s.values()]
    return [*saved["actor"].values(), *saved["critic"].values(), *state]


@pytest.mark.slow  # the module's torchrun run trains two ranks: ~5 s alone
@pytest.mark.parametrize("phase", ["skip", "zero"])
def test_a_nan_on_rank_1_leaves_both_ranks_finite_and_bitwise_identical(ddp_run: Path, phase: str) -> None:
    rank0, rank1 = load(ddp_run, phase)
    for a, b in zip(tensors(rank0), tensors(rank1), strict=True):
        assert torch.isfinite(a).all() and torch.equal(a, b)
    # Counters are summed over ranks, so both ranks report the same: 2 faults injected (both on rank 1), 2 events.
    for saved in (rank0, rank1):
        assert saved["faults"] == {"grad_nonfinite": 2}
        assert saved["safety"]["grad_nonfinite_steps"] == 2 and saved["safety"]["grad_nonfinite_elements"] == 2
        assert saved["safety"]["grad_steps_skipped" if phase == "skip" else "grad_steps_zeroed"] == 2
        assert saved["error"] is None


@pytest.mark.slow
def test_raise_stops_every_rank_at_the_same_mini_batch(ddp_run: Path) -> None:
    rank0, rank1 = load(ddp_run, "raise")
    assert "a non-finite loss or gradient on another rank in iteration 0, mini-batch 2 (update 2), rank 0" in (
        rank0["error"] or ""
    )
    assert "1 non-finite gradient element(s), the first in actor.mlp.0.weight, in iteration 0, mini-batch 2" in (
        rank1["error"] or ""
    )
    assert "grad_guard_dump_it0_mb2_rank1.pt" in rank1["error"] and "No dump written" in rank0["error"]
    dump = torch.load(ddp_run / "grad_guard_dump_it0_mb2_rank1.pt", weights_only=True)
    assert (dump["rank"], dump["first_param"]) == (1, "actor.mlp.0.weight")
    for a, b in zip(tensors(rank0), tensors(rank1), strict=True):
        assert torch.isfinite(a).all() and torch.equal(a, b)


@pytest.mark.slow
def test_without_the_guard_the_all_reduce_spreads_rank_1s_nan_to_both_ranks(ddp_run: Path) -> None:
    for saved in load(ddp_run, "off"):
        assert saved["faults"] == {"grad_nonfinite": 1}
        assert all(torch.isnan(w).all() for w in saved["actor"].values() if w.is_floating_point())


def test_single_process_needs_no_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed("cpu") is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert init_distributed("cuda:3") is None


@pytest.mark.parametrize(
    ("env", "device", "message"),
    [
        (
            {"WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            "cpu",
            "RANK is not set: multi-process training expects to be launched",
        ),
        ({"WORLD_SIZE": "two"}, "cpu", r"WORLD_SIZE='two' is not an integer"),
        ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"}, "cpu", r"must lie in \[0, WORLD_SIZE=2\)"),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, "cuda:0", "expected 'cuda:1'. Hint: device=cuda"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "cuda", "expected 'cuda:0'"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "meta", "supports cpu \\(gloo\\) and cuda:N \\(nccl\\)"),
    ],
)
def test_bad_launch_settings_fail_before_any_process_group(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], device: str, message: str
) -> None:
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=message):
        init_distributed(device)
    assert not torch.distributed.is_initialized()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_ranks_without_cuda_get_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=r"has 0 usable CUDA device\(s\)\. Hint: device=cpu trains multi-process"):
        init_distributed("cuda:1")
