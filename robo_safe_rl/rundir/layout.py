"""The names of a run directory's files and folders, and which of them show that a run was there.

One run directory holds one run (DESIGN.md): training writes into it through :class:`~robo_safe_rl.rundir.RunDir`,
the tools read it through the same class, and no other module spells a name listed here.
"""

from __future__ import annotations

import re
from pathlib import Path

LOGS_DIR = "logs"
"""Where ``configs/train.yaml``'s default ``run_dir`` puts runs: ``logs/<experiment_name>/<timestamp>``."""
CHECKPOINT_NAME = re.compile(r"model_(\d+)\.pt")
"""rsl-rl's checkpoint files, ``model_<iter>.pt``; the number is the iteration."""
CHECKPOINT_FILES = "model_<iter>.pt"
"""How messages name the checkpoint files."""
CONFIG_FILE = "config.yaml"
"""The resolved configuration of the run (every key of ``configs/train.yaml``)."""
TRAIN_CFG_FILE = "train_cfg.json"
"""What rebuilds the policy: rsl-rl's resolved train dict, the observation groups' sizes and the action count."""
SUMMARY_FILE = "summary.json"
"""What the run did (``robo_safe_rl.apps.summary``), written at its end."""
EVENTS_FILE = "safety_events.jsonl"
"""The runner's safety events (rollbacks, refused checkpoints, gradient-guard events), one JSON object a line."""
INCIDENTS_DIR = "incidents"
"""SafeStep's incident records of rank 0; rank ``r > 0`` writes ``incidents_rank<r>``."""
INCIDENTS_DIR_NAME = re.compile(r"incidents(_rank\d+)?(_worker\d+)?")
"""The incident folders a run writes: one per rank, and with env workers one per worker beside it
(``incidents_worker<k>``, ``incidents_rank<r>_worker<k>``: :class:`robo_safe_rl.bridge.worker_loop.Caps`)."""
VET_INCIDENTS_DIR = "incidents_vet"
"""Incidents recorded while ``tools/diagnose.py --policy`` vets a checkpoint, beside that checkpoint."""
REPRO_DIR = "repro"
"""``tools/diagnose.py``'s reproduction scripts."""
HYDRA_DIR = "hydra"
"""Hydra's record of the composition (``hydra.output_subdir`` in ``configs/train.yaml``)."""
HYDRA_OVERRIDES_FILE = "overrides.yaml"
"""Hydra's record of the command-line overrides, in :data:`HYDRA_DIR`."""
TRAIN_LOG = "train.log"
"""The run's log: what training showed (its start banner, rsl-rl's iteration blocks, its final line) and its log
records, written by ``robo_safe_rl.apps.run_log`` in both ``tools/train.py`` and ``apps.train.main``."""
GIT_DIR = "git"
"""rsl-rl's record of the code state (its logger writes it when learning starts)."""
TENSORBOARD_EVENTS = "events.out.tfevents.*"
"""TensorBoard's event files (rsl-rl's logger writes them into the run directory)."""
VIDEOS_DIR = "videos"
"""Clips recorded during training (``video.interval``), ``video_<iter>.mp4``."""
EXPORT_DIR = "exported"
"""Where ``tools/export.py`` writes by default, beside the checkpoint it exports (Isaac Lab's play does the same)."""
POLICY_JIT_FILE = "policy.pt"
"""The exported policy as TorchScript (rsl-rl's ``export_policy_to_jit`` name)."""
POLICY_ONNX_FILE = "policy.onnx"
"""The exported policy as ONNX (rsl-rl's ``export_policy_to_onnx`` name)."""

#: Files whose presence means a run was started here (Hydra's record and an empty incidents folder do not: a
#: configuration rejected before training leaves them).
RUN_FILES: tuple[str, ...] = (CONFIG_FILE, TRAIN_CFG_FILE, SUMMARY_FILE, EVENTS_FILE)


def checkpoint_name(iteration: int) -> str:
    """``model_<iteration>.pt``."""
    return f"model_{int(iteration)}.pt"


def video_name(iteration: int) -> str:
    """``video_<iteration>.mp4``: the clip recorded after that training iteration, in :data:`VIDEOS_DIR`."""
    return f"video_{int(iteration)}.mp4"


def checkpoint_iteration(path: str | Path) -> int | None:
    """The iteration in a checkpoint's file name; ``None`` when the name is not ``model_<iter>.pt``."""
    match = CHECKPOINT_NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def incidents_dir_name(rank: int = 0) -> str:
    """``incidents`` for rank 0, ``incidents_rank<r>`` for the others."""
    return INCIDENTS_DIR if rank == 0 else f"{INCIDENTS_DIR}_rank{rank}"


def incidents_tag(folder: str) -> str:
    """What tells an incidents folder from rank 0's: ``rank1`` for ``incidents_rank1``, ``""`` for ``incidents``,
    the folder's own suffix for others (``incidents_vet`` gives ``vet``)."""
    return folder.removeprefix(INCIDENTS_DIR).lstrip("_")


def is_run_file(name: str) -> bool:
    """Whether a file name (not a path) is one of those a run writes: a checkpoint, a run file, TensorBoard's events,
    or an incidents folder."""
    return (
        name in RUN_FILES
        or CHECKPOINT_NAME.fullmatch(name) is not None
        or INCIDENTS_DIR_NAME.fullmatch(name) is not None
        or Path(name).match(TENSORBOARD_EVENTS)
    )
