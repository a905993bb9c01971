"""A run directory: every path of a run, and the reading and writing of its files.

Training writes through :class:`RunDir` (the runner gets one as its ``files``; ``SafeRunner`` only knows the small
protocol it needs), and the tools read through it: the checkpoint inspector's listing, diagnose's evidence, play,
the policy loader and the benchmarks. The names are in :mod:`robo_safe_rl.rundir.layout`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from robo_safe_rl.bridge.incidents import JSONL_NAME
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.fileio import atomic_write_text
from robo_safe_rl.rundir import layout

SUMMARY_SCHEMA_VERSION = 1
"""``schema_version`` of ``summary.json``; it changes when a field changes meaning."""
TRAIN_CFG_SCHEMA_VERSION = 1
"""``schema_version`` of the saved train dict."""
TRAIN_CFG_MAX_BYTES = 1 << 20
"""A saved train dict is a few kilobytes; a larger file is not read (it is data from disk, perhaps hostile)."""


@dataclass(frozen=True)
class SavedTrainCfg:
    """What rebuilds a run's policy without its env.

    Attributes:
        train_cfg: rsl-rl's train dict as the runner resolved it (``obs_groups`` filled in).
        obs_shapes: Shape of one env's observation per observation group (``{"policy": [28]}``).
        num_actions: Size of the action.
    """

    train_cfg: dict[str, Any]
    obs_shapes: dict[str, list[int]]
    num_actions: int


class RunDir:
    """The files of one run (names in :mod:`~robo_safe_rl.rundir.layout`).

    Args:
        root: The run directory (need not exist yet).

    Attributes:
        root: The run directory.
        config_path: The resolved configuration.
        train_cfg_path: The saved train dict that rebuilds the policy.
        summary_path: What the run did.
        events_path: The runner's safety events.
        train_log_path: The run's log (what training showed, and its log records).
        repro_dir: Where diagnose writes reproduction scripts.
        vet_incidents_dir: Where vetting a checkpoint of this folder records its incidents.
        videos_dir: The clips recorded during training.
        export_dir: Where ``tools/export.py`` writes a policy of this folder by default.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.config_path = self.root / layout.CONFIG_FILE
        self.train_cfg_path = self.root / layout.TRAIN_CFG_FILE
        self.summary_path = self.root / layout.SUMMARY_FILE
        self.events_path = self.root / layout.EVENTS_FILE
        self.train_log_path = self.root / layout.TRAIN_LOG
        self.repro_dir = self.root / layout.REPRO_DIR
        self.vet_incidents_dir = self.root / layout.VET_INCIDENTS_DIR
        self.videos_dir = self.root / layout.VIDEOS_DIR
        self.export_dir = self.root / layout.EXPORT_DIR

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # ------------------------------------------------------------------ paths

    def incidents_dir(self, rank: int = 0) -> Path:
        """The incidents folder of ``rank``."""
        return self.root / layout.incidents_dir_name(rank)

    def incident_dirs(self) -> list[Path]:
        """The run's incidents folders (every rank's), sorted by name."""
        return sorted(p for p in self.root.iterdir() if p.is_dir() and layout.INCIDENTS_DIR_NAME.fullmatch(p.name))

    def checkpoint(self, iteration: int) -> Path:
        """The checkpoint of ``iteration``."""
        return self.root / layout.checkpoint_name(iteration)

    def video(self, iteration: int) -> Path:
        """The clip recorded after ``iteration``."""
        return self.videos_dir / layout.video_name(iteration)

    def checkpoints(self) -> list[Path]:
        """The ``model_<iter>.pt`` files, in iteration order (numerically: ``model_9`` before ``model_10``); empty
        when there is none or the directory does not exist.

        Raises:
            OSError: If the directory exists but cannot be listed.
        """
        if not self.root.is_dir():
            return []
        found = [(it, p) for p in self.root.iterdir() if (it := layout.checkpoint_iteration(p)) is not None]
        return [p for _, p in sorted(found)]

    def checkpoint_at_or_before(self, iteration: int) -> Path | None:
        """The newest checkpoint of an iteration ``<= iteration``; ``None`` when there is none."""
        older = [p for p in self.checkpoints() if (layout.checkpoint_iteration(p) or 0) <= iteration]
        return older[-1] if older else None

    # ------------------------------------------------------------------ one run per directory

    def run_evidence(self) -> list[str]:
        """Names of what shows that a run was started here: checkpoints, the run files, TensorBoard events, rsl-rl's
        code record, incident records. Hydra's record and empty folders are not evidence."""
        if not self.root.is_dir():
            return []
        found = [p.name for p in self.checkpoints()]
        found += [name for name in layout.RUN_FILES if (self.root / name).exists()]
        found += sorted(p.name for p in self.root.glob(layout.TENSORBOARD_EVENTS))
        found += [layout.GIT_DIR] if (self.root / layout.GIT_DIR).exists() else []
        found += [p.name for p in self.incident_dirs() if (p / JSONL_NAME).exists()]
        return found

    def check_unused(self, resume: str | os.PathLike[str] | None = None) -> None:
        """Refuse to start a new run in a directory that holds one, unless it is resumed into.

        Args:
            resume: The ``resume=`` path (a checkpoint or a run directory): a resume of a checkpoint of this very
                directory may write into it.

        Raises:
            ConfigError: Naming ``run_dir``, what it holds, and the two ways on.
        """
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"invalid config value run_dir={str(self.root)!r}: it is a file, expected a directory")
        found = self.run_evidence()
        if not found or (resume is not None and _same_run(Path(resume), self.root)):
            return
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise ConfigError(
            f"invalid config value run_dir={str(self.root)!r}: it already holds a run ({shown}); continue that run "
            f"with `resume={self.root} run_dir={self.root}`, or choose another run_dir"
        )

    def remove_unstarted(self) -> bool:
        """Remove the directory of a run that never started: what a configuration rejected after the directory was
        made leaves behind (the run's log, Hydra's record, empty incident folders), so that no empty timestamped
        folder is mistaken for a run. A directory holding run evidence, or anything else, stays.

        Returns:
            Whether the directory is gone.
        """
        if not self.root.is_dir() or self.run_evidence():
            return False
        self.train_log_path.unlink(missing_ok=True)
        shutil.rmtree(self.root / layout.HYDRA_DIR, ignore_errors=True)
        for folder in [*self.incident_dirs(), self.root]:
            with contextlib.suppress(OSError):  # only when empty: whatever else is there is not ours to delete
                folder.rmdir()
        return not self.root.exists()

    # ------------------------------------------------------------------ config.yaml and the train dict

    def write_config(self, resolved: dict[str, Any]) -> None:
        """Write the resolved configuration as ``config.yaml`` (atomically)."""
        self._write(self.config_path, self.config_text(resolved))

    @staticmethod
    def config_text(resolved: dict[str, Any]) -> str:
        """``config.yaml``'s text for a resolved configuration: what a bench compares a saved run's file with."""
        return OmegaConf.to_yaml(resolved)

    def read_config(self) -> dict[str, Any] | None:
        """The resolved configuration as plain data; ``None`` when absent or unreadable."""
        if not self.config_path.is_file():
            return None
        try:
            data = OmegaConf.to_container(OmegaConf.load(self.config_path), resolve=True)
        except (OSError, OmegaConfBaseException, ValueError, yaml.YAMLError):
            return None
        return data if isinstance(data, dict) else None

    def task_env_id(self) -> str | None:
        """``task.env_id`` of the run's configuration; ``None`` when it names none."""
        task = (self.read_config() or {}).get("task")
        env_id = task.get("env_id") if isinstance(task, dict) else None
        return str(env_id) if env_id else None

    def write_train_cfg(self, train_cfg: dict[str, Any], obs_shapes: dict[str, list[int]], num_actions: int) -> None:
        """Save what rebuilds the policy (see :class:`SavedTrainCfg`), as Isaac Lab saves ``params/agent.yaml``."""
        doc = {
            "schema_version": TRAIN_CFG_SCHEMA_VERSION,
            "train_cfg": train_cfg,
            "obs_shapes": {k: [int(n) for n in v] for k, v in obs_shapes.items()},
            "num_actions": int(num_actions),
        }
        # JSON, not YAML: a hostile file cannot hide an alias bomb in it. A NaN (an unused fault value) is written as
        # Python's json writes and reads it.
        self._write(self.train_cfg_path, json.dumps(doc, indent=2) + "\n")

    def read_train_cfg(self) -> SavedTrainCfg | None:
        """The saved train dict; ``None`` when the run has none (a run of an older version).

        Raises:
            ConfigError: If the file is unreadable or not what :meth:`write_train_cfg` writes.
        """
        path = self.train_cfg_path
        if not path.exists():
            return None
        try:
            size = path.stat().st_size
            if size > TRAIN_CFG_MAX_BYTES:
                raise ConfigError(f"{path}: {size} bytes, more than a saved train dict's {TRAIN_CFG_MAX_BYTES}")
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
            raise ConfigError(f"{path}: cannot read it ({type(err).__name__}: {err})") from err
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if version != TRAIN_CFG_SCHEMA_VERSION:
            raise ConfigError(f"{path}: expected schema_version {TRAIN_CFG_SCHEMA_VERSION}, got {version!r}")
        train_cfg, shapes, actions = doc.get("train_cfg"), doc.get("obs_shapes"), doc.get("num_actions")
        if not isinstance(train_cfg, dict) or not isinstance(train_cfg.get("actor"), dict):
            raise ConfigError(f"{path}: train_cfg must be rsl-rl's train dict, with an actor entry")
        if not isinstance(train_cfg.get("obs_groups"), dict):
            raise ConfigError(f"{path}: train_cfg must name its obs_groups")
        if not isinstance(shapes, dict) or not all(
            isinstance(v, list) and all(_is_size(n) for n in v) for v in shapes.values()
        ):
            raise ConfigError(f"{path}: obs_shapes must map each observation group to a list of sizes >= 1")
        if not _is_size(actions):
            raise ConfigError(f"{path}: num_actions must be an integer >= 1, got {actions!r}")
        return SavedTrainCfg(train_cfg, shapes, actions)

    def read_overrides(self) -> list[str] | None:
        """The command-line overrides Hydra recorded for the run (``hydra/overrides.yaml``), as given; ``None`` when
        the run has no such record or it is not a list of strings (a crafted file is read as YAML data only)."""
        path = self.root / layout.HYDRA_DIR / layout.HYDRA_OVERRIDES_FILE
        try:
            data = yaml.safe_load(_read_bounded(path, MAX_OVERRIDES_BYTES))
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError):
            return None
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            return None
        return data

    # ------------------------------------------------------------------ summary.json

    def write_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Save ``summary.json`` atomically, with its ``schema_version``; returns what was written."""
        doc = {"schema_version": SUMMARY_SCHEMA_VERSION, **summary}
        self._write(self.summary_path, json.dumps(doc, indent=2) + "\n")
        return doc

    def read_summary(self) -> dict[str, Any]:
        """``summary.json`` as written.

        Raises:
            ConfigError: If it is missing, unreadable or not a JSON object.
        """
        try:
            doc = json.loads(_read_bounded(self.summary_path, MAX_SUMMARY_BYTES))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise ConfigError(f"{self.summary_path}: cannot read the run's summary ({err})") from err
        if not isinstance(doc, dict):
            raise ConfigError(f"{self.summary_path}: expected a JSON object, got {type(doc).__name__}")
        return doc

    # ------------------------------------------------------------------ safety events

    def append_event(self, event: dict[str, Any]) -> None:
        """Append one safety event (a ``time`` stamp first) to the events file."""
        line = json.dumps({"time": round(time.time(), 3), **event}) + "\n"
        with open(self.events_path, "a", encoding="utf-8") as f:
            f.write(line)

    def read_events(self) -> tuple[list[dict[str, Any]] | None, list[str]]:
        """The run's safety events, and notes about lines that were skipped.

        The events are corroborating evidence, not the input a tool was asked about: a line that cannot be read is
        skipped with a note.

        Returns:
            ``(None, [])`` when the run has no events file; else the events with an integer ``iteration`` and a
            string ``kind``, and the notes.
        """
        path = self.events_path
        if not path.is_file():
            return None, []
        try:
            lines = _read_bounded(path, MAX_EVENTS_BYTES).splitlines()
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return None, [f"{path}: cannot read it ({err}); safety events not consulted"]
        notes: list[str] = []
        events: list[dict[str, Any]] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                notes.append(f"{path}:{number}: not a JSON event, skipped")
                continue
            if (
                isinstance(event, dict)
                and isinstance(event.get("iteration"), int)
                and isinstance(event.get("kind"), str)
            ):
                events.append(event)
            else:
                notes.append(f"{path}:{number}: not a safety event (no iteration or kind), skipped")
        return events, notes

    @staticmethod
    def _write(path: Path, text: str) -> None:
        """Write ``text`` atomically and durably, making the run directory first if needed."""
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


def _same_run(resume: Path, root: Path) -> bool:
    """Whether ``resume`` (a checkpoint or a run directory) belongs to the run directory ``root``."""
    directory = resume if resume.is_dir() else resume.parent
    try:
        return directory.resolve() == root.resolve()
    except OSError:
        return False


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


#: Bounds on what the tools read of a run's own records (a crafted or runaway file must not exhaust memory): a run
#: appends a few hundred bytes per safety event and writes summary.json once (a few KiB).
MAX_EVENTS_BYTES = 64 * 2**20
MAX_SUMMARY_BYTES = 1 * 2**20
#: Hydra's overrides record holds the command line's overrides: a few hundred bytes.
MAX_OVERRIDES_BYTES = 1 * 2**20


def _read_bounded(path: Path, limit: int) -> str:
    """``path`` as UTF-8 text, refusing a file larger than ``limit`` bytes before reading it.

    Raises:
        ValueError: The file is larger than ``limit``.
        OSError, UnicodeDecodeError: As reading does.
    """
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than the {limit >> 20} MiB a run writes at most")
    return data.decode("utf-8")
