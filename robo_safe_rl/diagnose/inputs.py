"""Find the incidents a PATH names and read them strictly: every record and every array file, or an error.

``PATH`` (the first argument of ``tools/diagnose.py``) may be:

- a run directory: its ``incidents/`` and ``incidents_rank<r>/`` folders (a run directory without records is read
  as "no incidents" when it holds any of a run's files, :func:`robo_safe_rl.rundir.is_run_file`);
- an incidents directory (any folder holding ``incidents.jsonl``; an empty folder named ``incidents...`` holds no
  incidents), or that ``incidents.jsonl`` itself;
- one record: any of the above followed by ``#<id>`` (``run/incidents/incidents.jsonl#3``, ``run#3`` for a run with
  one incidents folder, ``run/incidents_worker0#3`` for a worker's: each folder numbers its records from 0), or the
  record's ``.npz`` file.

Records are data from disk, possibly damaged or crafted. Reading is strict and bounded
(:mod:`~robo_safe_rl.diagnose.records`, :mod:`~robo_safe_rl.diagnose.arrays`, :mod:`~robo_safe_rl.diagnose.limits`):
every line must be a schema-1 record whose every field checks out (:mod:`~robo_safe_rl.diagnose.schema`), naming
only a registered task id and, in ``arrays``, only a file inside its incidents folder (symlinks resolved); every
array file must declare the arrays its record describes, within the size limits, before its data is read. Anything
else raises :class:`~robo_safe_rl.errors.IncidentError` saying which file, record and field, and the command exits 2
(a bad record is never skipped: a diagnosis of the others would read as complete).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robo_safe_rl.bridge.incidents import JSONL_NAME
from robo_safe_rl.diagnose.arrays import ArrayBudget, read_npz
from robo_safe_rl.diagnose.limits import DEFAULT_LIMITS, Limits
from robo_safe_rl.diagnose.records import read_records
from robo_safe_rl.diagnose.schema import check_array_headers, show
from robo_safe_rl.errors import IncidentError
from robo_safe_rl.progress import track
from robo_safe_rl.rundir import CHECKPOINT_FILES, INCIDENTS_DIR, RUN_FILES, RunDir, is_run_file

#: ``PATH#<id>``; more than 18 digits is no record id (and ``int()`` refuses more than 4,300).
_RECORD_SUFFIX = re.compile(r"(.*)#(\d{1,18})")


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


def resolve(path_text: str, limits: Limits = DEFAULT_LIMITS, *, progress: bool = False) -> IncidentSource:
    """Read the incidents a PATH names (forms in the module docstring), within ``limits``; with ``progress``, a bar on
    a terminal counts the records read.

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
    # Not "is_file": a FIFO or a device named like an incident file is refused when read, not taken for a folder.
    if not path.is_dir() and path.suffix == ".npz":
        if selected is not None:
            raise IncidentError(f"{path}#{selected}: an .npz file is one record already; drop the #{selected}")
        return _from_npz(path, limits)
    if not path.is_dir():
        if path.name != JSONL_NAME:
            raise IncidentError(
                f"{path}: unknown input: expected a run directory, an incidents directory, {JSONL_NAME} or an "
                "incident's .npz file"
            )
        directories = [path.parent]
    elif _has_records(path):
        directories = [path]
    elif path.name.startswith(INCIDENTS_DIR) and selected is None:
        # A recorder makes its folder before its first record: an empty incidents folder is "no incidents".
        return IncidentSource(path=path, run_dir=path.parent)
    else:
        directories = [d for d in RunDir(path).incident_dirs() if _has_records(d)]
        if not directories and not _looks_like_run_dir(path):
            raise IncidentError(
                f"{path}: not a run directory (no {INCIDENTS_DIR}/, {', '.join(RUN_FILES)} or {CHECKPOINT_FILES}) and "
                f"no {JSONL_NAME} in it"
            )
        source = IncidentSource(path=path, run_dir=path, directories=directories, selected_id=selected)
        # Record ids count within one folder: ranks and env workers each write their own part.
        if selected is not None and len(directories) != 1:
            names = ", ".join(d.name for d in directories) or f"no {INCIDENTS_DIR}* folder with records"
            raise IncidentError(
                f"{path}#{selected}: record ids count within one incidents folder and this run has "
                f"{len(directories)} ({names}); name the record as the report does: {path}/<folder>#{selected}"
            )
        source.incidents = _read_all(source.directories, selected, limits, progress)
        return source
    source = IncidentSource(path=path, run_dir=directories[0].parent, directories=directories, selected_id=selected)
    source.incidents = _read_all(directories, selected, limits, progress)
    return source


def _has_records(directory: Path) -> bool:
    """Whether ``directory`` holds an ``incidents.jsonl`` of any kind: one that is not a regular file, or a dangling
    symlink, is then refused with a reason rather than read as "no incidents"."""
    return os.path.lexists(directory / JSONL_NAME)


def _looks_like_run_dir(path: Path) -> bool:
    try:
        return any(is_run_file(p.name) for p in path.iterdir())
    except OSError:
        return False


def _from_npz(path: Path, limits: Limits) -> IncidentSource:
    directory = path.parent
    records = read_records(directory, limits)
    found = [r for r in records if r["arrays"] == path.name]
    if not found:
        raise IncidentError(f"{path}: no record of {directory / JSONL_NAME} names this file")
    record = found[0]
    incident = LoadedIncident(directory, record, load_arrays(directory, record, limits))
    return IncidentSource(
        path=path, run_dir=directory.parent, directories=[directory], incidents=[incident], selected_id=incident.id
    )


def _read_all(
    directories: list[Path], selected: int | None, limits: Limits, progress: bool = False
) -> list[LoadedIncident]:
    incidents: list[LoadedIncident] = []
    budget = ArrayBudget(limits.total_array_bytes)
    for directory in directories:
        records = read_records(directory, limits)
        if selected is not None:
            records = [r for r in records if r["id"] == selected]
            if not records:
                raise IncidentError(f"{directory / JSONL_NAME}: no record with id {selected}")
        reading = track(records, f"diagnose: reading {directory.name}", enabled=progress)
        incidents.extend(LoadedIncident(directory, r, load_arrays(directory, r, limits, budget)) for r in reading)
    return incidents


def array_file(directory: Path, record: dict[str, Any]) -> Path:
    """The npz file a checked record names, refused when it leads outside ``directory`` (through a symlink).

    Raises:
        IncidentError: Naming the record, the field and where the file leads.
    """
    path = directory / record["arrays"]
    where = f"{directory / JSONL_NAME}: record {record['id']}: field 'arrays': {show(record['arrays'])}"
    try:
        root, target = directory.resolve(), path.resolve()
    except (OSError, RuntimeError) as err:  # RuntimeError: a symlink loop
        raise IncidentError(f"{where} cannot be resolved ({err})") from err
    if not target.is_relative_to(root):
        raise IncidentError(
            f"{where} leads outside the incidents folder (to {target}); a record may only name a file inside it"
        )
    return path


def load_arrays(
    directory: Path, record: dict[str, Any], limits: Limits = DEFAULT_LIMITS, budget: ArrayBudget | None = None
) -> dict[str, np.ndarray]:
    """The arrays of one checked record, read within ``limits`` and ``budget`` (:mod:`~robo_safe_rl.diagnose.arrays`).

    Raises:
        IncidentError: If the npz file is outside the folder, missing, truncated, not an npz file, or declares arrays
            that do not fit the record or the limits.
    """
    path = array_file(directory, record)
    budget = budget if budget is not None else ArrayBudget(limits.total_array_bytes)
    where = f"{path}: record {record['id']}"
    return read_npz(path, lambda headers: check_array_headers(record, headers, where), limits, budget, where)
