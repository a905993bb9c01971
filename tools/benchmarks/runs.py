"""Training runs for the benchmarks: a real ``tools/train.py`` subprocess each, and what its run directory says.

Shared by the presets comparison, the learning curves and the sweeps' documentation runs, so that every figure comes
from the same kind of run and is judged by the one evaluation protocol (:func:`robo_safe_rl.apps.evaluate.evaluate`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.timing import machine_description
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.fileio import atomic_write_text
from robo_safe_rl.rundir import RunDir

#: One torch thread and one BLAS thread per run: runs may go two at a time on 2 cores (DESIGN.md: torch's threads
#: compete with the envs for the cores).
RUN_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class CurvePoint:
    """One iteration of a learning curve.

    Attributes:
        env_steps: Env steps done by the end of the iteration.
        wall_s: Seconds since the first logged iteration (TensorBoard's wall time).
        value: The logged value (``Episode/return``: mean return of the episodes that ended in the iteration).
    """

    env_steps: int
    wall_s: float
    value: float


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float, float]]:
    """``(iteration, wall time, value)`` of a TensorBoard scalar of the run; empty when the tag is absent."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return []
    return [(e.step, e.wall_time, e.value) for e in events.Scalars(tag)]


#: What must be the same for a bench to take a run another bench made (:func:`finished_run`): the machine's CPU model
#: and cores and the library versions; not the date or the kernel build, which change between machines of one model.
MACHINE_KEYS = ("cpu", "cores", "python", "torch", "numpy", "pybullet_api", "cuda")
MACHINE_RECORD_MAX_CHARS = 65_536
CONFIG_RECORD_MAX_CHARS = 1 << 20


@functools.cache
def _machine() -> tuple[tuple[str, str], ...]:
    machine = machine_description()  # reads /proc/cpuinfo and asks torch for its device: once per process
    return tuple((key, machine[key]) for key in MACHINE_KEYS)


def this_machine() -> dict[str, str]:
    """The :data:`MACHINE_KEYS` of this machine, as BENCHMARKS.md's tables name them."""
    return dict(_machine())


def machine_record(run_dir: Path) -> Path:
    """Where :func:`train` records the machine a run trained on: beside the run directory, as its log."""
    return run_dir.parent / f"{run_dir.name}.machine.json"


def train(repo: Path, run_dir: Path, overrides: list[str], log: Path, reuse: bool = False) -> dict[str, Any]:
    """Train with ``tools/train.py`` into ``run_dir`` (a previous benchmark's run there is replaced) and return the
    run's summary; the machine it trained on is recorded beside it (:func:`machine_record`).

    With ``reuse``, a run already in ``run_dir`` that completed the same command and configuration on this machine
    (:func:`finished_run`) is taken as it is instead: a bench of hours that stopped part way goes on from the runs it
    finished.

    Raises:
        RuntimeError: If training refused the configuration (exit 2), naming the log.
    """
    cmd = [sys.executable, "tools/train.py", *overrides, f"run_dir={run_dir}"]
    if reuse and (summary := finished_run(run_dir, cmd[2:])) is not None:
        return summary
    shutil.rmtree(run_dir, ignore_errors=True)
    machine_record(run_dir).unlink(missing_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run(cmd, cwd=repo, stdout=f, stderr=f, env={**os.environ, **RUN_ENV}, check=False)
    if done.returncode == 2:
        raise RuntimeError(f"{' '.join(cmd)}: invalid configuration (exit 2); see {log}")
    atomic_write_text(machine_record(run_dir), json.dumps(this_machine(), indent=2) + "\n")
    return RunDir(run_dir).read_summary()


def finished_run(run_dir: Path, overrides: list[str]) -> dict[str, Any] | None:
    """The summary of the run in ``run_dir`` if it completed, Hydra recorded exactly ``overrides`` for it (in order:
    the command a bench would run again), the configuration it saved is the one those overrides compose now
    (:func:`composed_config`), and it trained on this machine (:func:`machine_record`); else ``None``. A run that
    stopped, ran another command or another configuration, trained elsewhere or has no machine record does not count:
    the bench trains it again.

    The configuration matters beside the command: the same overrides over an edited agent file (a value under test)
    are another run, and a bench that took it would put rows of two configurations in one table.
    """
    files = RunDir(run_dir)
    if files.read_overrides() != list(overrides):
        return None
    try:
        summary = files.read_summary()
        with open(machine_record(run_dir), encoding="utf-8") as f:
            recorded = json.loads(f.read(MACHINE_RECORD_MAX_CHARS))  # a few hundred; a longer file fails to parse
        with open(files.config_path, encoding="utf-8") as f:
            saved_config = f.read(CONFIG_RECORD_MAX_CHARS)  # a few kB; a longer one is no run of the command
    except (ConfigError, OSError, UnicodeDecodeError, ValueError):
        return None
    if recorded != this_machine() or summary.get("status") != "completed":
        return None
    return summary if saved_config == composed_config(overrides) else None


def composed_config(overrides: list[str]) -> str | None:
    """The ``config.yaml`` that ``tools/train.py`` would write for ``overrides`` today (the composed configuration,
    resolved, in :meth:`RunDir.config_text`); ``None`` if they no longer compose. Composed in this process,
    which reads the configs that a ``tools/train.py`` started from it reads (``robo_safe_rl.config.compose``)."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from robo_safe_rl.config.compose import compose

    try:
        return RunDir.config_text(OmegaConf.to_container(compose(list(overrides)), resolve=True))
    except (HydraException, OmegaConfBaseException, ConfigError):
        return None


def curve(run_dir: Path, summary: dict[str, Any], tag: str = "Episode/return") -> list[CurvePoint]:
    """The run's learning curve from its TensorBoard events, against env steps and wall time."""
    steps_per_iteration = summary["env_steps"] / max(summary["iterations"], 1)
    points = scalars(run_dir, tag)
    start = points[0][1] if points else 0.0
    return [CurvePoint(int((it + 1) * steps_per_iteration), wall - start, value) for it, wall, value in points]
