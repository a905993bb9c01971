"""Find the incidents a PATH names and read them strictly: every record and every array file, or an error.

``PATH`` (the first argument of ``tools/diagnose.py``) may be:

- a run directory: its ``incidents/`` and ``incidents_rank<r>/`` folders (a run directory without records is read
  as "no incidents" when it holds any of a run's files, :func:`robo_safe_rl.rundir.is_run_file`);
- an incidents directory (any folder holding ``incidents.jsonl``; an empty folder named ``incidents...`` holds no
  incidents), or that ``incidents.jsonl`` itself;
- one record: any of the above followed by ``#<id>`` (``run/incidents/incidents.jsonl#3``, ``run#3`` for the run's
  ``incidents/``), or the record's ``.npz`` file.

Unlike :func:`~robo_safe_rl.bridge.incidents.read_incidents`, which skips a truncated last line (what a crash
mid-write leaves), a diagnosis refuses any line it cannot read, a missing or damaged array file, or an unknown
record format: it says which file and why (:class:`~robo_safe_rl.errors.IncidentError`), and the command exits 2.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robo_safe_rl.bridge.incidents import JSONL_NAME, load_incident_arrays, read_incidents
from robo_safe_rl.errors import IncidentError
from robo_safe_rl.rundir import CHECKPOINT_FILES, INCIDENTS_DIR, RUN_FILES, RunDir, is_run_file

#: Fields a record must have for a diagnosis (the others are read where present).
REQUIRED_FIELDS: tuple[str, ...] = ("id", "kind", "phase", "arrays", "env_index")
_RECORD_SUFFIX = re.compile(r"(.*)#(\d+)")


@dataclass(frozen=True)
class LoadedIncident:
    """One incident record with its arrays.

    Attributes:
        directory: The incidents directory holding it.
        record: The JSON line (schema in :mod:`robo_safe_rl.bridge.incidents`).
        arrays: The arrays of its npz file, keyed as that schema says.
    """

    directory: Path
    record: dict[str, Any]
    arrays: dict[str, np.ndarray]

    @property
    def id(self) -> int:
        """The record's id in its directory."""
        return int(self.record["id"])

    @property
    def ref(self) -> str:
        """A short name, ``<directory name>#<id>`` (``incidents#3``)."""
        return f"{self.directory.name}#{self.id}"

    @property
    def iteration(self) -> int | None:
        """The training iteration of the record, ``None`` outside training."""
        value = self.record.get("iteration")
        return int(value) if isinstance(value, int) else None


@dataclass
class IncidentSource:
    """What a PATH named.

    Attributes:
        path: The PATH as given (without ``#<id>``).
        run_dir: The run directory the incidents belong to (checkpoints, ``safety_events.jsonl``); ``None`` when
            unknown.
        directories: The incidents directories read.
        incidents: The records, ordered by directory then id.
        selected_id: The id of the one record asked for, else ``None``.
    """

    path: Path
    run_dir: Path | None
    directories: list[Path] = field(default_factory=list)
    incidents: list[LoadedIncident] = field(default_factory=list)
    selected_id: int | None = None


def resolve(path_text: str) -> IncidentSource:
    """Read the incidents a PATH names (forms in the module docstring).

    Raises:
        IncidentError: If the path is missing, of an unknown kind, or any record or array file in it is unusable.
    """
    selected: int | None = None
    match = _RECORD_SUFFIX.fullmatch(path_text)
    if match and not Path(path_text).exists():
        path_text, selected = match.group(1), int(match.group(2))
    path = Path(path_text)
    if not path.exists():
        raise IncidentError(f"{path}: no such file or directory")
    if path.is_file() and path.suffix == ".npz":
        if selected is not None:
            raise IncidentError(f"{path}#{selected}: an .npz file is one record already; drop the #{selected}")
        return _from_npz(path)
    if path.is_file():
        if path.name != JSONL_NAME:
            raise IncidentError(
                f"{path}: unknown input: expected a run directory, an incidents directory, {JSONL_NAME} or an "
                "incident's .npz file"
            )
        directories = [path.parent]
    elif (path / JSONL_NAME).is_file():
        directories = [path]
    elif path.name.startswith(INCIDENTS_DIR) and selected is None:
        # A recorder makes its folder before its first record: an empty incidents folder is "no incidents".
        return IncidentSource(path=path, run_dir=path.parent)
    else:
        directories = [d for d in RunDir(path).incident_dirs() if (d / JSONL_NAME).is_file()]
        if not directories and not _looks_like_run_dir(path):
            raise IncidentError(
                f"{path}: not a run directory (no {INCIDENTS_DIR}/, {', '.join(RUN_FILES)} or {CHECKPOINT_FILES}) and "
                f"no {JSONL_NAME} in it"
            )
        source = IncidentSource(path=path, run_dir=path, directories=directories, selected_id=selected)
        if selected is not None:
            if not directories or directories[0].name != INCIDENTS_DIR:
                raise IncidentError(
                    f"{path}#{selected}: the run has no {INCIDENTS_DIR}/ folder to take record {selected} from"
                )
            source.directories = directories[:1]
        source.incidents = _read_all(source.directories, selected)
        return source
    source = IncidentSource(path=path, run_dir=directories[0].parent, directories=directories, selected_id=selected)
    source.incidents = _read_all(directories, selected)
    return source


def _looks_like_run_dir(path: Path) -> bool:
    try:
        return any(is_run_file(p.name) for p in path.iterdir())
    except OSError:
        return False


def _from_npz(path: Path) -> IncidentSource:
    directory = path.parent
    records = read_strict(directory)
    found = [r for r in records if r.get("arrays") == path.name]
    if not found:
        raise IncidentError(f"{path}: no record of {directory / JSONL_NAME} names this file")
    record = found[0]
    incident = LoadedIncident(directory, record, load_arrays(directory, record))
    return IncidentSource(
        path=path, run_dir=directory.parent, directories=[directory], incidents=[incident], selected_id=incident.id
    )


def _read_all(directories: list[Path], selected: int | None) -> list[LoadedIncident]:
    incidents: list[LoadedIncident] = []
    for directory in directories:
        records = read_strict(directory)
        if selected is not None:
            records = [r for r in records if r["id"] == selected]
            if not records:
                raise IncidentError(f"{directory / JSONL_NAME}: no record with id {selected}")
        incidents.extend(LoadedIncident(directory, r, load_arrays(directory, r)) for r in records)
    return incidents


def read_strict(directory: Path) -> list[dict[str, Any]]:
    """Every record of ``directory/incidents.jsonl``, refusing a truncated line and records lacking a field.

    Raises:
        IncidentError: Naming the file, the line and what is wrong with it.
    """
    path = directory / JSONL_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise IncidentError(f"{path}: cannot read it ({err})") from err
    last = text.rsplit("\n", 1)[-1]
    if last.strip():
        try:
            json.loads(last)
        except json.JSONDecodeError as err:
            number = text.count("\n") + 1
            raise IncidentError(
                f"{path}:{number}: truncated record (no newline at the end, the writer stopped mid-line); remove "
                "that line to diagnose the others"
            ) from err
    records = read_incidents(directory)
    for number, record in enumerate(records, start=1):
        missing = [key for key in REQUIRED_FIELDS if key not in record]
        if missing:
            raise IncidentError(f"{path}: record {number} lacks the field(s) {', '.join(missing)}")
        if not isinstance(record["id"], int) or not isinstance(record["arrays"], str):
            raise IncidentError(f"{path}: record {number} has a malformed id or arrays field")
    return records


def load_arrays(directory: Path, record: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of one record.

    Raises:
        IncidentError: If the npz file is missing, truncated or not an npz file.
    """
    try:
        return load_incident_arrays(directory, record)
    except (zipfile.BadZipFile, EOFError, KeyError) as err:
        # load_incident_arrays lets zipfile's error through: a truncated npz is not an OSError.
        raise IncidentError(f"cannot read incident arrays {directory / str(record['arrays'])}: {err}") from err
