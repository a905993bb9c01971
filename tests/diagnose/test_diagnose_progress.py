"""tools/diagnose.py shows the progress of reading, analysing and replaying incidents (and of vetting a policy) on a
terminal, and nothing of it on a pipe."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOOL = str(ROOT / "tools" / "diagnose.py")
STAGES = ("diagnose: reading incidents", "diagnose: analysing incidents", "diagnose: replaying incidents")


def test_a_terminal_shows_each_stage_of_a_diagnosis(
    bad_actions_run: Path, copy_run: Callable, on_terminal: Callable[..., Any]
) -> None:
    run = copy_run(bad_actions_run)
    done = on_terminal([sys.executable, TOOL, str(run), "--replay", "all", "--steps", "5"], cwd=ROOT)
    assert done.returncode == 1, done.terminal[-2000:]
    assert all(stage in done.terminal for stage in STAGES), done.terminal[-2000:]
    assert "0/3" in done.terminal  # the three incidents of the run, counted as they are done
    assert "3 incident(s)" in done.stdout and "\x1b" not in done.stdout


def test_a_pipe_gets_the_report_and_no_bar(bad_actions_run: Path, copy_run: Callable) -> None:
    run = copy_run(bad_actions_run)
    done = subprocess.run(
        [sys.executable, TOOL, str(run), "--replay", "all", "--steps", "5"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert not any(stage in done.stderr for stage in STAGES)
    assert "\x1b" not in done.stderr + done.stdout


def test_vetting_a_policy_shows_its_steps_on_a_terminal(policy_run: Path, on_terminal: Callable[..., Any]) -> None:
    done = on_terminal([sys.executable, TOOL, "--policy", str(policy_run / "model_5.pt"), "--steps", "40"], cwd=ROOT)
    assert "diagnose: vetting model_5.pt" in done.terminal and "/40" in done.terminal, done.terminal[-2000:]
