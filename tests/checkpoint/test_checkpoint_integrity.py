"""Changed bytes and files that change under the inspector: CRC-32 mismatches, truncation while reading.

Torch checks neither: a checkpoint with a flipped bit loads as if it were good, and a memory-mapped file truncated
while it is read kills the process with SIGBUS and no message.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from crafted import REPO, TOOL, flip_bit, record_data_offset

from robo_safe_rl.checkpoint import Status, inspect_file, inspect_run_dir
from robo_safe_rl.checkpoint.cli import main
from robo_safe_rl.checkpoint.loading import open_checkpoint
from robo_safe_rl.errors import CheckpointError, RoboSafeRLError

CRC_REASON = r"corrupt: {name} fails its CRC-32 check \(declared [0-9a-f]{{8}}, computed [0-9a-f]{{8}}\)"


def _save(path: Path, ckpt: dict[str, Any], it: int) -> Path:
    torch.save(copy.deepcopy(ckpt) | {"iter": it}, path)
    return path


def _flip_weight(path: Path) -> str:
    """Flip the lowest mantissa bit of the first float of storage 0 (the actor normaliser's mean): still finite."""
    name = f"{path.stem}/data/0"
    flip_bit(path, record_data_offset(path, name))
    return name


def test_flipped_bit_in_tensor_data_is_corrupt_not_clean(
    tmp_path: Path, rsl_checkpoint: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path / "model_20.pt", rsl_checkpoint, 20)
    name = _flip_weight(path)
    # Control: torch loads the changed file without complaint, and every tensor is still finite.
    loaded = torch.load(path, weights_only=True)
    assert all(bool(t.isfinite().all()) for t in loaded["actor_state_dict"].values() if t.is_floating_point())
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(CRC_REASON.format(name=name), err), err
    # diagnose's loader refuses it too.
    with pytest.raises(CheckpointError, match=CRC_REASON.format(name=name)), open_checkpoint(path):
        pass
    done = subprocess.run(
        [sys.executable, str(TOOL), str(path), "--json"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 2
    assert json.loads(done.stdout)["checkpoints"][0]["status"] == "unreadable"


def test_flipped_bit_in_data_pkl(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    path = _save(tmp_path / "model_3.pt", rsl_checkpoint, 3)
    # The first key, "actor_state_dict", becomes "bctor_state_dict": the pickle still loads, under another name.
    start = record_data_offset(path, "model_3/data.pkl")
    offset = start + path.read_bytes()[start:].index(b"actor_state_dict")
    assert path.read_bytes()[offset : offset + 5] == b"actor"
    flip_bit(path, offset, 0)
    with pytest.raises(CheckpointError, match=CRC_REASON.format(name="model_3/data.pkl")):
        inspect_file(path)


def test_corrupt_newest_file_is_not_a_resume_candidate(tmp_path: Path, rsl_checkpoint: dict[str, Any]) -> None:
    for it in (10, 20):
        _save(tmp_path / f"model_{it}.pt", rsl_checkpoint, it)
    _flip_weight(tmp_path / "model_20.pt")
    report = inspect_run_dir(tmp_path)
    assert [c.status for c in report.checkpoints] == [Status.CLEAN, Status.UNREADABLE]
    assert report.last_clean.path.name == "model_10.pt"  # type: ignore[union-attr]
    assert main([str(tmp_path)]) == 2
    # train.py's resume= of the changed file itself is a config error, not a resume from flipped bits.
    from robo_safe_rl.apps.train import resolve_resume

    assert resolve_resume(str(tmp_path)) == tmp_path / "model_10.pt"
    with pytest.raises(RoboSafeRLError, match=r"fails its CRC-32 check"):
        resolve_resume(str(tmp_path / "model_20.pt"))


def _reading_data(pid: int, path: Path, size: int) -> bool:
    """Whether process ``pid`` is reading the tensor data of ``path``: its read position (/proc/<pid>/fdinfo) lies in
    the second quarter of the file, or the file is memory-mapped (/proc/<pid>/maps), as torch.load(mmap=True) does."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            if any(line.rstrip().endswith(str(path)) for line in maps):
                return True
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    position = int(info.readline().split()[1])
                if size // 4 < position < size // 2:
                    return True
    except (OSError, ValueError):
        pass  # the process opened, closed or exited meanwhile
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the reader's position")
def test_file_truncated_while_it_is_inspected(tmp_path: Path) -> None:
    # A real inspector process is stopped (SIGSTOP) while it reads tensor data, the file is cut to a quarter, and the
    # process continued (SIGCONT). Through a memory map the next read was SIGBUS, a silent death; read through the
    # file, it is a short read and a message.
    path = tmp_path / "model_1.pt"
    torch.save({f"w{k}": torch.zeros(4 << 20) for k in range(16)}, path)  # 16 storages of 16 MiB: 256 MiB
    size = path.stat().st_size
    for _attempt in range(3):
        child = subprocess.Popen(
            [sys.executable, str(TOOL), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
        deadline, stopped = time.monotonic() + 60, False
        while time.monotonic() < deadline and child.poll() is None:
            if _reading_data(child.pid, path, size):
                child.send_signal(signal.SIGSTOP)
                stopped = True
                break
        if not stopped:
            child.communicate(timeout=120)
            continue
        with path.open("r+b") as f:
            f.truncate(size // 4)
        child.send_signal(signal.SIGCONT)
        _, err = child.communicate(timeout=120)
        assert child.returncode == 2, (child.returncode, err)
        # Where the next read falls depends on where the process was stopped: a storage's bytes, or the header of
        # the archive member after it. The message names whichever it was.
        shrank = f"the file shrank from {size} to {size // 4} bytes while it was being read"
        pattern = rf"inspect_checkpoint: {re.escape(str(path))}: {shrank} \(at .+\): it was truncated or rewritten"
        assert re.fullmatch(pattern + r" during inspection\n", err), err
        return
    pytest.skip("the inspector read the file faster than it could be caught reading it")
