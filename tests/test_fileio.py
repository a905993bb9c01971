"""Atomic writes: a failed write leaves the target alone, a SIGKILL at any moment leaves a complete file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from robo_safe_rl.checkpoint import Status, inspect_run_dir
from robo_safe_rl.fileio import atomic_open, atomic_write_text


@pytest.mark.parametrize("durable", [True, False])
def test_write_replaces_the_target_and_leaves_no_temporary_file(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old\n")
    with atomic_open(path, durable=durable) as f:
        f.write("néw\n".encode())
    assert path.read_text(encoding="utf-8") == "néw\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_failed_write_leaves_target_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "model_1.pt"
    with atomic_open(path) as f:
        torch.save({"w": torch.ones(2)}, f)
    before = path.read_bytes()
    with pytest.raises(Exception, match="pickle"), atomic_open(path) as f:
        torch.save({"w": torch.ones(1), "not_picklable": lambda: None}, f)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_1.pt"]


_SAVER = """
import sys, torch
from robo_safe_rl.fileio import atomic_open
path, n = sys.argv[1], int(sys.argv[2])
version = 0
while True:
    # Every element of every tensor equals the version, so a mix of two versions or a torn write shows.
    with atomic_open(path) as f:
        torch.save({"big": torch.full((n,), float(version)), "iter": version}, f)
    print(version)
    version += 1
"""


def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path: Path) -> None:
    path = tmp_path / "model_1.pt"
    n = 4 << 20  # 16 MiB of float32 per save: long enough to be caught mid-write
    for _attempt in range(3):
        saver = subprocess.Popen(  # -u: each version's line arrives as soon as it is printed
            [sys.executable, "-u", "-c", _SAVER, str(path), str(n)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
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
