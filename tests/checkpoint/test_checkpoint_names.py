"""Names and paths from disk: control characters in tensor names, symlink loops, file names that disagree with iter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from crafted import REPO, TOOL

from robo_safe_rl.checkpoint import inspect_run_dir
from robo_safe_rl.checkpoint.cli import main
from robo_safe_rl.terminal import printable

NAN = float("nan")
# ESC [2J clears the screen, ESC ]0;...BEL retitles the terminal, U+202E reverses the text after it, CR returns to
# the line's start so that what follows overwrites what came before.
HOSTILE = "w\x1b[2J\x1b]0;owned\x07\u202eevil\rclean"


def test_control_characters_are_escaped_in_text_and_exact_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model_1.pt"
    torch.save({HOSTILE: torch.tensor([NAN, 1.0])}, path)
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\u202e\r")
    assert "w\\x1b[2J\\x1b]0;owned\\x07\\u202eevil\\rclean" in out
    assert main([str(path), "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)["checkpoints"][0]["rows"]
    assert row["name"] == HOSTILE


def test_control_characters_in_an_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model_\x1b[31m1.pt"
    path.write_bytes(b"")
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == f"inspect_checkpoint: {tmp_path}/model_\\x1b[31m1.pt: empty file (0 bytes)\n"


def test_printable_leaves_ordinary_text_alone() -> None:
    assert printable("actor_state_dict/mlp.0.weight · Größe ✓") == "actor_state_dict/mlp.0.weight · Größe ✓"
    assert printable("tab\there\x00\x7f") == "tab\\there\\x00\\x7f"


def test_symlink_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.pt").symlink_to("b.pt")
    (tmp_path / "b.pt").symlink_to("a.pt")
    assert main([str(tmp_path / "a.pt")]) == 2
    assert capsys.readouterr().err == (
        f"inspect_checkpoint: {tmp_path / 'a.pt'}: symlink loop: following its links never reaches a file\n"
    )
    # In a run directory: that file is unreadable and says why; the clean one is still the one to resume from.
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"w": torch.ones(2), "iter": 1}, run / "model_1.pt")
    (run / "model_2.pt").symlink_to("model_2.pt")
    done = subprocess.run(
        [sys.executable, str(TOOL), str(run), "--json"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == f"inspect_checkpoint: {run / 'model_2.pt'}: symlink loop: following its links never reaches a file\n"
    )
    doc = json.loads(done.stdout)
    assert (doc["last_clean"], [c["status"] for c in doc["checkpoints"]]) == (
        str(run / "model_1.pt"),
        ["clean", "unreadable"],
    )


def test_file_name_that_disagrees_with_the_stored_iteration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # model_5000.pt holds iter 5 (a copy renamed by hand), model_10.pt holds iter 10. Training resumes from the
    # stored iteration, so model_10.pt is the newer one, whatever the names say.
    torch.save({"w": torch.ones(2), "iter": 5}, tmp_path / "model_5000.pt")
    torch.save({"w": torch.ones(2), "iter": 10}, tmp_path / "model_10.pt")
    report = inspect_run_dir(tmp_path)
    assert [c.path.name for c in report.checkpoints] == ["model_5000.pt", "model_10.pt"]
    assert report.last_clean.path.name == "model_10.pt"  # type: ignore[union-attr]
    warning = "model_5000.pt holds iter 5, not 5000: ordered by the stored iteration (a renamed or copied checkpoint?)"
    assert report.warnings == [warning]
    assert main([str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == f"inspect_checkpoint: warning: {tmp_path}: {warning}\n"
    assert json.loads(out)["warnings"] == [warning]
    os.remove(tmp_path / "model_10.pt")
    assert inspect_run_dir(tmp_path).last_clean.path.name == "model_5000.pt"  # type: ignore[union-attr]
