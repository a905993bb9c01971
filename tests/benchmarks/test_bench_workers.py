"""tools/bench.py's workers section: every case measured, written as a section with command, machine and date."""

from __future__ import annotations

from pathlib import Path

import pytest

import robosafe_tasks  # noqa: F401  (registers RoboSafe/Ant-v0)
from benchmarks.cli import main


@pytest.mark.slow
def test_quick_workers_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    assert main(["--quick", "--only", "workers", "--write", str(doc)]) == 0
    out = capsys.readouterr().out
    assert "Command: `python tools/bench.py --quick --only workers` · machine: " in out and "date: " in out
    for row in (
        "envs in the trainer",
        "`task.num_workers=2`",
        "`task.num_workers=2 task.pin_workers=false`",
        "gymnasium AsyncVectorEnv",
        "free raw PyBullet stepping",
    ):
        assert f"| {row}" in out, row
    assert " task.trainer_block=true` | " in out  # 1 worker beside the trainer's block on 2 cores
    assert "| `task.num_workers=2`, every process blocking at once |" in out
    assert "| the same, every process blocking at once |" in out
    assert "| 2 workers, 1 torch thread |" in out and "| 1 worker beside the trainer's block, 1 torch thread |" in out
    assert "Training iterations: `task=ant` with its tuned values, 16 envs x 8 steps" in out
    assert doc.read_text().count("<!-- bench:workers -->") == 1
