"""The runner's side: refuse non-finite checkpoints, write good ones atomically, survive a kill mid-save."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from robo_safe_rl.checkpoint import (
    Part,
    Status,
    TensorRow,
    atomic_torch_save,
    find_nonfinite,
    inspect_file,
    inspect_run_dir,
    save_checkpoint_if_finite,
)

NAN, INF = float("nan"), float("inf")
NONFINITE = pytest.mark.parametrize(
    ("value", "field"), [(NAN, "nan"), (INF, "posinf"), (-INF, "neginf")], ids=["nan", "posinf", "neginf"]
)


def test_find_nonfinite_clean(rsl_checkpoint: dict[str, Any]) -> None:
    assert find_nonfinite(rsl_checkpoint) == []


@NONFINITE
def test_find_nonfinite_names_every_bad_tensor(rsl_checkpoint: dict[str, Any], value: float, field: str) -> None:
    # The normaliser's running mean (1, 5) := [0, 1, 2, 3, 4] with index 2 bad -> finite range [0, 4];
    # Adam's first moment of parameter 12 (the critic's output bias, (1,)) := bad -> no finite element.
    mean = rsl_checkpoint["critic_state_dict"]["obs_normalizer._mean"]
    mean.copy_(torch.tensor([[0.0, 1.0, value, 3.0, 4.0]]))
    rsl_checkpoint["optimizer_state_dict"]["state"][12]["exp_avg"].fill_(value)
    counts = {"nan": 0, "posinf": 0, "neginf": 0}
    one = counts | {field: 1}
    assert find_nonfinite(rsl_checkpoint) == [
        TensorRow(
            "critic_state_dict/obs_normalizer._mean", Part.CRITIC, "float32", (1, 5), 5, *one.values(), 0.0, 4.0, 4.0
        ),
        TensorRow(
            "optimizer_state_dict/state/12/exp_avg", Part.OPTIMIZER, "float32", (1,), 1, *one.values(), None, None, None
        ),
    ]


def test_save_clean_writes_atomically(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    path = tmp_path / "model_2.pt"
    result = save_checkpoint_if_finite(rsl_checkpoint, path)
    assert result and result.written and result.nonfinite == []
    loaded = torch.load(path, weights_only=True)
    assert loaded["iter"] == 2
    assert torch.equal(loaded["actor_state_dict"]["mlp.0.weight"], rsl_checkpoint["actor_state_dict"]["mlp.0.weight"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_2.pt"]  # no temporary file left behind


@NONFINITE
def test_non_finite_checkpoint_is_refused_and_logged(
    tmp_path: Path, rsl_checkpoint: dict[str, Any], caplog: pytest.LogCaptureFixture, value: float, field: str
) -> None:
    good = tmp_path / "model_100.pt"
    assert save_checkpoint_if_finite(rsl_checkpoint, good)
    before = good.read_bytes()
    rsl_checkpoint["actor_state_dict"]["distribution.std_param"][0] = value
    bad = tmp_path / "model_150.pt"
    with caplog.at_level(logging.WARNING, logger="robo_safe_rl.checkpoint.io"):
        result = save_checkpoint_if_finite(rsl_checkpoint, bad)
    assert not result and not result.written
    assert [(r.name, getattr(r, field)) for r in result.nonfinite] == [("actor_state_dict/distribution.std_param", 1)]
    label = {"nan": "NaN", "posinf": "+Inf", "neginf": "-Inf"}[field]
    assert caplog.messages == [
        f"checkpoint {bad} not written: 1 tensor(s) hold non-finite values "
        f"(actor_state_dict/distribution.std_param: 1 {label} of 3); expected all finite. "
        "The previous checkpoint stays the newest."
    ]
    assert not bad.exists() and good.read_bytes() == before
    assert inspect_run_dir(tmp_path).last_clean.path == good  # type: ignore[union-attr]


def test_failed_write_leaves_target_and_no_temp_file(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    path = tmp_path / "model_1.pt"
    atomic_torch_save(rsl_checkpoint, path)
    before = path.read_bytes()
    with pytest.raises(Exception, match="pickle"):
        atomic_torch_save({"w": torch.ones(1), "not_picklable": lambda: None}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_1.pt"]


_SAVER = """
import sys, torch
from robo_safe_rl.checkpoint import atomic_torch_save
path, n = sys.argv[1], int(sys.argv[2])
version = 0
while True:
    # Every element of every tensor equals the version, so a mix of two versions or a torn write shows.
    atomic_torch_save({"big": torch.full((n,), float(version)), "iter": version}, path)
    print(version, flush=True)
    version += 1
"""


def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path: Path) -> None:
    path = tmp_path / "model_1.pt"
    n = 4 << 20  # 16 MiB of float32 per save: long enough to be caught mid-write
    for _attempt in range(3):
        saver = subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(path), str(n)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
        )
        try:
            assert saver.stdout is not None and saver.stdout.readline().strip() == "0"  # a first file is complete
            deadline = time.monotonic() + 60
            while not list(tmp_path.glob(".model_1.pt.*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.0005)
            saver.send_signal(signal.SIGKILL)
        finally:
            saver.kill()
            saver.wait()
        if list(tmp_path.glob(".model_1.pt.*.tmp")):  # the kill landed while a save was in progress
            break
    else:
        pytest.fail("never caught the saver in the middle of a save")
    loaded = torch.load(path, weights_only=True)
    assert loaded["big"].shape == (n,)
    assert bool((loaded["big"] == float(loaded["iter"])).all())
    report = inspect_run_dir(tmp_path)  # the stray temporary file is ignored
    assert [c.status for c in report.checkpoints] == [Status.CLEAN]
    assert os.path.getsize(path) > n * 4


def _to(obj: Any, device: str) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@NONFINITE
def test_cuda_checkpoint(tmp_path: Path, rsl_checkpoint: dict[str, Any], value: float, field: str) -> None:
    on_gpu = _to(rsl_checkpoint, "cuda")
    assert find_nonfinite(on_gpu) == []
    path = tmp_path / "model_2.pt"
    assert save_checkpoint_if_finite(on_gpu, path)
    # Saved from CUDA, inspected on the CPU.
    assert inspect_file(path).status is Status.CLEAN
    on_gpu["optimizer_state_dict"]["state"][5]["exp_avg_sq"][1, 2] = value
    (row,) = find_nonfinite(on_gpu)
    assert (row.name, getattr(row, field), row.nonfinite) == ("optimizer_state_dict/state/5/exp_avg_sq", 1, 1)
    assert not save_checkpoint_if_finite(on_gpu, tmp_path / "model_3.pt")
