"""Run directories: checkpoints in iteration order, the one to resume from, and where corruption starts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from robo_safe_rl.checkpoint import Status, exit_code, inspect_run_dir, list_checkpoints, to_json
from robo_safe_rl.errors import CheckpointError

NAN, INF = float("nan"), float("inf")


def _write_run(run_dir: Path, ckpt: dict[str, Any], plan: dict[int, str], value: float = NAN) -> None:
    """Write ``model_<it>.pt`` per entry of ``plan``: ``clean``, ``corrupt`` (one bad actor weight) or ``truncated``."""
    run_dir.mkdir(exist_ok=True)
    for it, kind in plan.items():
        saved = copy.deepcopy(ckpt) | {"iter": it}
        if kind == "corrupt":
            saved["actor_state_dict"]["mlp.4.weight"][0, 0] = value
        path = run_dir / f"model_{it}.pt"
        torch.save(saved, path)
        if kind == "truncated":
            path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "posinf", "neginf"])
def test_clean_then_corrupt(tmp_path: Path, rsl_checkpoint: dict[str, Any], value: float) -> None:
    # Numeric order matters: a string sort would put model_100 before model_50.
    plan = {0: "clean", 50: "clean", 100: "clean", 150: "corrupt", 200: "corrupt"}
    _write_run(tmp_path, rsl_checkpoint, plan, value)
    # Files that are not model_<iter>.pt are ignored: a killed atomic save's temporary file, configs, exports.
    (tmp_path / ".model_250.pt.1a2b3c4d.tmp").write_bytes(b"partial")
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    (tmp_path / "model_best.pt").write_bytes(b"")
    report = inspect_run_dir(tmp_path)
    assert [c.path.name for c in report.checkpoints] == [f"model_{it}.pt" for it in plan]
    assert [c.iteration for c in report.checkpoints] == list(plan)
    assert [c.status.value for c in report.checkpoints] == list(plan.values())
    assert report.last_clean.path.name == "model_100.pt"  # type: ignore[union-attr]
    assert report.first_corrupt.path.name == "model_150.pt"  # type: ignore[union-attr]
    assert report.verdict() == "resume from model_100.pt; corruption starts at model_150.pt"
    assert exit_code(report) == 1
    doc = to_json(report)
    assert (doc["kind"], doc["last_clean"], doc["first_corrupt"]) == (
        "run_dir",
        str(tmp_path / "model_100.pt"),
        str(tmp_path / "model_150.pt"),
    )


def test_unreadable_file_is_neither_clean_nor_corrupt(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    # The newest file was cut short (a crash during a non-atomic save): resume from the one before.
    _write_run(tmp_path, rsl_checkpoint, {10: "clean", 20: "clean", 30: "truncated"})
    report = inspect_run_dir(tmp_path)
    assert [c.status for c in report.checkpoints] == [Status.CLEAN, Status.CLEAN, Status.UNREADABLE]
    assert report.checkpoints[2].error.startswith("truncated")  # type: ignore[union-attr]
    assert (report.last_clean.path.name, report.first_corrupt) == ("model_20.pt", None)  # type: ignore[union-attr]
    assert exit_code(report) == 2
    _write_run(tmp_path, rsl_checkpoint, {40: "corrupt"})
    assert exit_code(inspect_run_dir(tmp_path)) == 1


def test_run_that_recovered(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    # A corrupt file followed by clean ones (a rollback recovered the run): resume from the newest clean one; no
    # corrupt file lies past it.
    _write_run(tmp_path, rsl_checkpoint, {1: "clean", 2: "corrupt", 3: "clean"})
    report = inspect_run_dir(tmp_path)
    assert (report.last_clean.path.name, report.first_corrupt) == ("model_3.pt", None)  # type: ignore[union-attr]
    assert report.verdict() == "resume from model_3.pt; no corrupt checkpoint after it"


def test_nothing_clean(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    _write_run(tmp_path, rsl_checkpoint, {5: "corrupt", 6: "corrupt"})
    report = inspect_run_dir(tmp_path)
    assert (report.last_clean, report.first_corrupt.path.name) == (None, "model_5.pt")  # type: ignore[union-attr]
    assert report.verdict() == "no clean checkpoint; corruption starts at model_5.pt"


def test_directory_without_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "events.out.tfevents").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"no checkpoints: a run directory holds files named model_<iter>\.pt"):
        list_checkpoints(tmp_path)
