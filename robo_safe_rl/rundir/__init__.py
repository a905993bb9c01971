"""The run directory: the one owner of its layout, every file name, and the reading and writing of its files.

Above the core (config, safety, bridge, training), below the apps (play, diagnose, the tools). The core never
imports it: ``SafeRunner`` is handed a :class:`RunDir` as its ``files``.
"""

from __future__ import annotations

from robo_safe_rl.rundir.layout import (
    CHECKPOINT_FILES,
    CHECKPOINT_NAME,
    CONFIG_FILE,
    EVENTS_FILE,
    EXPORT_DIR,
    GIT_DIR,
    HYDRA_DIR,
    INCIDENTS_DIR,
    INCIDENTS_DIR_NAME,
    LOGS_DIR,
    POLICY_JIT_FILE,
    POLICY_ONNX_FILE,
    REPRO_DIR,
    RUN_FILES,
    SUMMARY_FILE,
    TENSORBOARD_EVENTS,
    TRAIN_CFG_FILE,
    TRAIN_LOG,
    VET_INCIDENTS_DIR,
    VIDEOS_DIR,
    checkpoint_iteration,
    checkpoint_name,
    incidents_dir_name,
    incidents_tag,
    is_run_file,
    video_name,
)
from robo_safe_rl.rundir.run_dir import SUMMARY_SCHEMA_VERSION, TRAIN_CFG_SCHEMA_VERSION, RunDir, SavedTrainCfg

__all__ = [
    "CHECKPOINT_FILES",
    "CHECKPOINT_NAME",
    "CONFIG_FILE",
    "EVENTS_FILE",
    "EXPORT_DIR",
    "GIT_DIR",
    "HYDRA_DIR",
    "INCIDENTS_DIR",
    "INCIDENTS_DIR_NAME",
    "LOGS_DIR",
    "POLICY_JIT_FILE",
    "POLICY_ONNX_FILE",
    "REPRO_DIR",
    "RUN_FILES",
    "SUMMARY_FILE",
    "SUMMARY_SCHEMA_VERSION",
    "TENSORBOARD_EVENTS",
    "TRAIN_CFG_FILE",
    "TRAIN_CFG_SCHEMA_VERSION",
    "TRAIN_LOG",
    "VET_INCIDENTS_DIR",
    "VIDEOS_DIR",
    "RunDir",
    "SavedTrainCfg",
    "checkpoint_iteration",
    "checkpoint_name",
    "incidents_dir_name",
    "incidents_tag",
    "is_run_file",
    "video_name",
]
