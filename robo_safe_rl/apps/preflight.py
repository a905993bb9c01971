"""Checks the training entry makes before it builds or writes anything: the run directory and the resume checkpoint.

Each failure is a :class:`~robo_safe_rl.errors.ConfigError` naming the key and the path (exit 2), never a traceback
from deep inside a run. The memory the envs need is checked with the task (``training/env_builder.py``).

Under ``tools/train.py`` Hydra makes the run directory itself (``hydra.run.dir: ${run_dir}``) before the training
function runs, and reports a failure there with a traceback: its callback
(:class:`~robo_safe_rl.apps.hydra_callback.CheckConfigFirst`) checks the same path first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from robo_safe_rl.errors import ConfigError

#: Bytes written (and fsync'd) to prove the run directory takes data: a full disk fails here, before the run.
PROBE_BYTES = 4096


def check_run_dir(path: str | Path) -> Path:
    """Make the run directory if needed and prove that a file can be written, synced and removed in it.

    Args:
        path: ``run_dir``.

    Returns:
        The path.

    Raises:
        ConfigError: ``run_dir`` names a file or device, lies under a file, or cannot be written (read-only file
            system, permissions, a full disk); the folders this check made are removed again.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():  # as RunDir.check_unused says it
        raise ConfigError(f"invalid config value run_dir={str(path)!r}: it is a file, expected a directory")
    missing = [p for p in (path, *path.parents) if not p.exists()]
    probe = path / f".write_check.{os.getpid()}.tmp"
    try:
        path.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as err:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
        for folder in missing:  # innermost first: leave nothing behind for a run that never started
            with contextlib.suppress(OSError):
                folder.rmdir()
        where = f" ({err.filename})" if err.filename and Path(err.filename) != path else ""
        raise ConfigError(
            f"invalid config value run_dir={str(path)!r}: cannot write there: {err.strerror or err}{where}; "
            "expected a writable directory with free space"
        ) from err
    return path


#: What rsl-rl's ``OnPolicyRunner.load`` reads from a checkpoint: name -> what it must be.
_RSL_RL_ENTRIES: dict[str, str] = {
    "actor_state_dict": "a dict of tensors",
    "critic_state_dict": "a dict of tensors",
    "optimizer_state_dict": "a dict",
    "iter": "an integer",
}


def checkpoint_layout_problem(loaded: object) -> str | None:
    """Say why a loaded checkpoint is not one rsl-rl can resume from, or ``None`` when its layout fits.

    Args:
        loaded: What ``torch.load`` returned.

    Returns:
        ``None``, or a one-line reason naming the entry and what it holds.
    """
    if not isinstance(loaded, Mapping):
        return f"it holds a {type(loaded).__name__}, not a dict"
    missing = [key for key in _RSL_RL_ENTRIES if key not in loaded]
    if missing:
        return f"it lacks {', '.join(missing)}"
    for key in ("actor_state_dict", "critic_state_dict"):
        value = loaded[key]
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()
        ):
            return f"{key} holds a {type(value).__name__}, expected a dict of tensors"
    if not isinstance(loaded["optimizer_state_dict"], Mapping):
        return f"optimizer_state_dict holds a {type(loaded['optimizer_state_dict']).__name__}, expected a dict"
    iteration = loaded["iter"]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        return f"iter holds {type(iteration).__name__} {str(iteration)[:40]!r}, expected an integer >= 0"
    return None


def check_resume_layout(value: str, checkpoint: Path) -> int:
    """Fail before the run directory is made if ``checkpoint`` is not laid out as rsl-rl's ``save`` writes.

    Returns:
        The checkpoint's iteration (``iter``).

    Raises:
        ConfigError: Naming ``resume``, the file and the entry that does not fit.
    """
    try:
        loaded = torch.load(checkpoint, weights_only=True, map_location="cpu")
    except Exception as err:  # the inspector read it; whatever torch says now, it is unusable
        raise ConfigError(f"invalid config value resume={value!r}: cannot load {checkpoint}: {err}") from err
    problem = checkpoint_layout_problem(loaded)
    if problem is not None:
        entries = ", ".join(f"{k} ({v})" for k, v in _RSL_RL_ENTRIES.items())
        raise ConfigError(
            f"invalid config value resume={value!r}: {checkpoint} is not an rsl-rl checkpoint: {problem}; "
            f"expected a dict with {entries}, as tools/train.py saves"
        )
    return int(loaded["iter"])
