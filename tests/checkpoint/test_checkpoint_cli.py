"""``inspect_checkpoint``'s command line, in-process through ``main(argv)`` and once as a real subprocess."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_factory import ACTOR_TENSORS, ALL_TENSORS, CRITIC_TENSORS

from robo_safe_rl.checkpoint.cli import main
from robo_safe_rl.checkpoint.report import JSON_SCHEMA

REPO = Path(__file__).resolve().parents[2]
NAN, INF = float("nan"), float("inf")


def _save(path: Path, ckpt: dict[str, Any], it: int, bad: float | None = None) -> Path:
    saved = copy.deepcopy(ckpt) | {"iter": it}
    if bad is not None:
        # The actor's output bias (3,) := [1.0, bad, -2.0] -> one bad element, finite range [-2.0, 1.0].
        saved["actor_state_dict"]["mlp.4.bias"].copy_(torch.tensor([1.0, bad, -2.0]))
    torch.save(saved, path)
    return path


def test_clean_file(tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "model_2.pt", rsl_checkpoint, 2)
    assert main([str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"{path}: clean; iteration 2; format torch_zip" in out
    assert f"tensors: {ALL_TENSORS} in all, 0 with non-finite values" in out
    assert "actor_state_dict/" not in out  # only non-finite tensors are listed without --all


@pytest.mark.parametrize(("value", "column"), [(NAN, 0), (INF, 1), (-INF, 2)], ids=["nan", "posinf", "neginf"])
def test_corrupt_file_table(
    tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str], value: float, column: int
) -> None:
    path = _save(tmp_path / "model_4050.pt", rsl_checkpoint, 4050, bad=value)
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    # Piped output: a Markdown table, no colour codes, one line per tensor.
    assert "\x1b[" not in out
    counts = ["0", "0", "0"]
    counts[column] = "1"
    cells = ["actor_state_dict/mlp.4.bias", "float32", "(3,)", "3", *counts, "-2", "1", "2"]
    table_row = next(line for line in out.splitlines() if "mlp.4.bias" in line)
    assert [cell.strip() for cell in table_row.strip().strip("|").split("|")] == cells
    assert f"tensors: {ALL_TENSORS} in all, 1 with non-finite values" in out
    assert f"by part (non-finite/tensors): actor 1/{ACTOR_TENSORS}, critic 0/{CRITIC_TENSORS}, optimizer 0/39" in out


def test_json_file_all_rows_and_no_optimizer(
    tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path / "model_7.pt", rsl_checkpoint, 7, bad=NAN)
    assert main([str(path), "--json", "--all", "--no-optimizer"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {k: doc[k] for k in ("schema", "kind", "path", "exit_code", "error", "rows", "include_optimizer")} == {
        "schema": JSON_SCHEMA,
        "kind": "file",
        "path": str(path),
        "exit_code": 1,
        "error": None,
        "rows": "all",
        "include_optimizer": False,
    }
    (ckpt,) = doc["checkpoints"]
    assert set(ckpt) == {
        "path",
        "iteration",
        "status",
        "error",
        "format",
        "size_bytes",
        "tensors",
        "nonfinite_tensors",
        "nan",
        "posinf",
        "neginf",
        "parts",
        "not_scanned_tensors",
        "rows",
    }
    assert (ckpt["iteration"], ckpt["status"], ckpt["format"]) == (7, "corrupt", "torch_zip")
    assert (ckpt["tensors"], ckpt["nonfinite_tensors"], ckpt["nan"]) == (ACTOR_TENSORS + CRITIC_TENSORS, 1, 1)
    assert ckpt["size_bytes"] == path.stat().st_size
    assert ckpt["parts"]["optimizer"] == {"tensors": 0, "nonfinite_tensors": 0}
    assert len(ckpt["rows"]) == ACTOR_TENSORS + CRITIC_TENSORS
    bias = next(r for r in ckpt["rows"] if r["name"] == "actor_state_dict/mlp.4.bias")
    assert bias == {
        "name": "actor_state_dict/mlp.4.bias",
        "part": "actor",
        "dtype": "float32",
        "shape": [3],
        "numel": 3,
        "nan": 1,
        "posinf": 0,
        "neginf": 0,
        "min": -2.0,
        "max": 1.0,
        "max_abs": 2.0,
        "scope": "tensor",
        "note": None,
    }


def test_unusable_file_json_still_a_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model_1.pt"
    path.write_bytes(b"")
    assert main([str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert err == f"inspect_checkpoint: {path}: empty file (0 bytes)\n"
    (ckpt,) = json.loads(out)["checkpoints"]
    assert (ckpt["status"], ckpt["error"], ckpt["tensors"], ckpt["rows"]) == (
        "unreadable",
        "empty file (0 bytes)",
        0,
        [],
    )


def test_run_dir_human(tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    for it in (3950, 4000):
        _save(tmp_path / f"model_{it}.pt", rsl_checkpoint, it)
    _save(tmp_path / "model_4050.pt", rsl_checkpoint, 4050, bad=NAN)
    (tmp_path / "model_4100.pt").write_bytes(b"PK\x03\x04 cut")
    assert main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"inspect_checkpoint: {tmp_path / 'model_4100.pt'}: truncated") and err.count("\n") == 1
    statuses = [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| model_")]
    assert statuses == ["clean", "clean", "corrupt", "unreadable"]
    assert out.rstrip().endswith("resume from model_4000.pt; corruption starts at model_4050.pt")


def test_tool_runs_as_a_subprocess(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    _save(tmp_path / "model_100.pt", rsl_checkpoint, 100)
    _save(tmp_path / "model_150.pt", rsl_checkpoint, 150, bad=INF)
    tool = REPO / "tools" / "inspect_checkpoint.py"
    done = subprocess.run(
        [sys.executable, str(tool), str(tmp_path), "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (1, "")
    doc = json.loads(done.stdout)
    assert (doc["kind"], doc["exit_code"]) == ("run_dir", 1)
    assert doc["last_clean"] == str(tmp_path / "model_100.pt")
    assert doc["first_corrupt"] == str(tmp_path / "model_150.pt")
    assert [c["status"] for c in doc["checkpoints"]] == ["clean", "corrupt"]
    assert [(r["name"], r["posinf"]) for r in doc["checkpoints"][1]["rows"]] == [("actor_state_dict/mlp.4.bias", 1)]
