"""The inspection benchmark runs end to end on a small file and reports sane figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from benchmarks.checkpoint import CASES, bench_inspect, write_rsl_shaped_checkpoint
from robo_safe_rl.checkpoint import Status, inspect_file


def test_bench_checkpoint_is_rsl_shaped(tmp_path: Path) -> None:
    path = tmp_path / "model_4050.pt"
    size = write_rsl_shaped_checkpoint(path, size_mib=4)
    assert 3 << 20 < size < 5 << 20
    report = inspect_file(path)
    assert (report.status, report.iteration) == (Status.CLEAN, 4050)
    assert {row.name.split("/")[0] for row in report.rows} == {
        "actor_state_dict",
        "critic_state_dict",
        "optimizer_state_dict",
    }
    assert torch.load(path, weights_only=True)["iter"] == 4050


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory is read from /proc")
def test_bench_inspect_small(tmp_path: Path) -> None:
    result = bench_inspect(size_mib=8, repeats=1, directory=tmp_path)
    assert 7 < result["file_mib"] < 9
    for case in CASES:
        assert result[case]["seconds"] > 0 and result[case]["mb_per_s"] > 0 and result[case]["peak_mib"] >= 0
    assert set(result["ratios"]) == {
        "inspect_peak_over_file",
        "torch_load_peak_over_file",
        "inspect_speed_over_torch_load",
        "inspect_speed_over_read",
    }
    assert list(tmp_path.iterdir()) == []  # the file is deleted afterwards
