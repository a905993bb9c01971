"""Checkpoint inspection: NaN/Inf per tensor, the last clean checkpoint of a run."""

from __future__ import annotations

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
from robo_safe_rl.checkpoint.stats import Part, TensorRow, classify_part, tensor_stats

__all__ = [
    "CheckpointReport",
    "Format",
    "LoadedCheckpoint",
    "Part",
    "RunReport",
    "Status",
    "TensorRow",
    "classify_part",
    "exit_code",
    "inspect_file",
    "inspect_run_dir",
    "list_checkpoints",
    "open_checkpoint",
    "tensor_stats",
    "to_json",
]
