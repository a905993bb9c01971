"""Checkpoint inspection (NaN/Inf per tensor, last clean checkpoint of a run) and finite-only, atomic saving."""

from __future__ import annotations

from robo_safe_rl.checkpoint.io import SaveResult, atomic_torch_save, find_nonfinite, save_checkpoint_if_finite
from robo_safe_rl.checkpoint.loading import Format, LoadedCheckpoint, open_checkpoint
from robo_safe_rl.checkpoint.report import (
    CheckpointReport,
    RunReport,
    Status,
    exit_code,
    inspect_file,
    inspect_run_dir,
    list_checkpoints,
    to_json,
)
from robo_safe_rl.checkpoint.stats import Part, TensorRow, all_finite_flag, classify_part, tensor_stats, walk_tensors

__all__ = [
    "CheckpointReport",
    "Format",
    "LoadedCheckpoint",
    "Part",
    "RunReport",
    "SaveResult",
    "Status",
    "TensorRow",
    "all_finite_flag",
    "atomic_torch_save",
    "classify_part",
    "exit_code",
    "find_nonfinite",
    "inspect_file",
    "inspect_run_dir",
    "list_checkpoints",
    "open_checkpoint",
    "save_checkpoint_if_finite",
    "tensor_stats",
    "to_json",
    "walk_tensors",
]
