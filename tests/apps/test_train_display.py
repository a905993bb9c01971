"""What a real training shows: plain lines into a pipe (a safety event included), rsl-rl's block on request, and the
compact live view on a terminal (a pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robo_safe_rl.apps.train import main
from robo_safe_rl.rundir import TRAIN_LOG

REPO = Path(__file__).resolve().parents[2]
TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=3"]
#: A NaN actor weight after the update of iteration 1: the post-update check rolls it back and iteration 1 is repeated.
ROLLBACK = "faults.policy.nonfinite_weights_after_update=[1]"
PLAIN = re.compile(r"^iteration (\d+)/3 \| [\d,]+ steps/s \| ETA [\d:]+ \| return .* \| (safety.*)$", re.MULTILINE)


def test_a_piped_run_prints_plain_lines_and_its_safety_event(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "tools/train.py", *TINY, f"run_dir={run_dir}", ROLLBACK, "display_interval=10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FORCE_COLOR": "1"},  # as CI sets it: still no control code into a pipe
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stdout and "\x1b" not in done.stderr
    # The first and the last iteration, and iteration 2, the first after the rollback (interval 10 shows no other).
    lines = PLAIN.findall(done.stdout)
    after = "safety: rollbacks 1, nonfinite_updates 1"
    assert lines == [("1", "safety ok"), ("2", after), ("3", after)]
    assert "Learning iteration" not in done.stdout
    assert PLAIN.findall((run_dir / TRAIN_LOG).read_text(encoding="utf-8")) == lines


def test_display_rsl_prints_rsl_rls_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "runner.max_iterations=2", f"run_dir={tmp_path / 'run'}", "display=rsl"]) == 0
    out = capsys.readouterr().out
    assert out.count("Learning iteration") == 2 and "Learning iteration 1/2" in out
    assert out.count("Mean value loss:") == 2 and not PLAIN.search(out)


def read_terminal(master: int, proc: subprocess.Popen, timeout: float) -> bytes:
    """Everything the process writes to its terminal until it exits."""
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # Linux: EIO once the last writer of the terminal has gone
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out


@pytest.mark.slow  # a short training on a pseudo-terminal: ~10 s alone
def test_on_a_terminal_the_compact_view_shows_the_counters_and_train_log_the_plain_lines(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "tools/train.py", *TINY, f"run_dir={run_dir}", ROLLBACK],
        cwd=REPO,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    try:
        shown = read_terminal(master, proc, timeout=300).decode("utf-8", "replace")
    finally:
        os.close(master)
        proc.wait(timeout=60)
    assert proc.returncode == 0, shown[-2000:]
    # rich's bar and the view's lines, redrawn in place; the rollback's counter in bold red once it happened.
    assert "━" in shown and "3/3" in shown and "learning rate" in shown and "episode length" in shown
    assert "\x1b[32mrollbacks 0" in shown and "\x1b[1;31mrollbacks 1" in shown
    assert "\x1b[1A" in shown  # the cursor goes up to redraw: a live view, not lines
    # The recovery's warning is printed above the view, once; the view's frames stay out of train.log.
    assert shown.count("rolled back to the snapshot") == 1
    log = (run_dir / TRAIN_LOG).read_text(encoding="utf-8")
    assert [n for n, _ in PLAIN.findall(log)] == ["1", "2", "3"] and "━" not in log
