"""Incident records: what went wrong in which env, at which step, with which action, from which state.

One :class:`IncidentRecorder` is shared by all envs of a run and writes into ``<run_dir>/incidents/``:

- ``incidents.jsonl``: one JSON object per line (strict JSON: no NaN literals), appended and flushed per record;
- one ``<id:06d>_env<env_index:03d>_<kind>.npz`` per record with its arrays, written (to a temporary name, then
  renamed) *before* the JSON line that names it, so a line never points at a missing or half-written file.

Disk use is bounded by a record count and a byte cap (records already in the directory count towards both, so a
resumed run does not grow past them); a record past either cap is not written and is counted as dropped.

Record schema (version 1). Floats that may be non-finite are written as JSON numbers when finite and as the strings
``"nan"``, ``"inf"``, ``"-inf"`` otherwise ("json float" below).

============================  ============================  ==================================================
field                         type                          meaning
============================  ============================  ==================================================
``schema``                    int                           record format version, 1
``id``                        int                           sequence number in this directory, from 0
``time``                      float                         Unix time of the record, seconds
``time_iso``                  str                           the same, ISO 8601 UTC
``iteration``                 int or null                   training iteration (recorder context), null outside
                                                            training
``global_step``               int or null                   env steps of the run so far (recorder context)
``source``                    str                           ``"safe_step"`` (per-env wrapper), ``"tensor_guard"``
                                                            (vector guard) or ``"env_worker"`` (a worker's crash)
``env_index``                 int                           index of the env in its vector (row for the guard)
``env_id``                    str or null                   gymnasium id of the task (``env.spec.id``)
``kind``                      str                           primary kind: ``nonfinite_action``, ``physics_error``,
                                                            ``nonfinite_state``, ``implausible_state``,
                                                            ``nonfinite_obs``, ``nonfinite_reward``
``kinds``                     list[str]                     every kind the step showed, most severe first
``phase``                     str                           ``"step"``, ``"reset"`` (fault during a reset) or
                                                            ``"observe"`` (the guard's ``get_observations``)
``reason``                    str                           one line: the exception, the task's ``check_state``
                                                            reason, or where the non-finite elements are
``exception_type``            str or null                   qualified type of the exception (``pybullet.error``;
                                                            builtins unqualified: ``KeyError``)
``exception``                 str or null                   its message
``env_step``                  int                           steps this env had taken (this one included)
``episode_step``              int                           steps into the episode (this one included)
``terminated``                bool                          the transition was ended by the guard (penalty, reset)
``rebuilt``                   bool                          the simulation was rebuilt to recover
``penalty``                   json float or null            reward returned for the ended transition
``simulated``                 bool                          the task implements the simulator protocol
``action_names``              list[str] or null             one name per action component
``action_low``                list[json float] or null      action-space bounds (SafeStep) or the guard's bounds
``action_high``               list[json float] or null
``raw_action``                list[json float] or null      the action as the policy sent it
``action``                    list[json float] or null      the action that reached the env (sanitised)
``nonfinite_action_elements`` int                           NaN/Inf components of ``raw_action``
``clipped_action_elements``   int                           finite components outside the bounds
``reward``                    json float or null            the offending reward (null if the step raised)
``obs_groups``                list[str] or null             observation groups (guard over TensorDicts), else null
``sim_state_keys``            list[str]                     names of the simulator-state arrays in the npz
``sim_state_age``             int or null                   env steps between the snapshot and the start of this
                                                            step (0: the exact state before it); null: none
``history_len``               int                           H, number of (obs, action) pairs in the npz
``arrays``                    str                           npz file name, relative to the incidents directory
``extra``                     object                        anything else the caller attached
============================  ============================  ==================================================

Arrays in the npz (absent when unknown): ``raw_action`` (A,), ``action`` (A,), ``action_low`` (A,), ``action_high``
(A,), ``obs`` (O,) the offending observation, ``state.<key>`` one per simulator-state array (``get_sim_state``
keys, e.g. ``state.base_pos`` (3,), ``state.joint_vel`` (n,)), ``history_obs`` (H, O) and ``history_actions``
(H, A): the last H pairs of the episode, oldest first, the last pair being this step's (observation seen, action
applied); with TensorDict observations ``obs.<group>`` and ``history_obs.<group>`` instead.
To replay a fault: build the task, ``reset()``, ``set_sim_state`` from the ``state.*`` arrays, then step the last
``sim_state_age + 1`` rows of ``history_actions``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from robo_safe_rl.errors import IncidentError
from robo_safe_rl.fileio import atomic_open
from robo_safe_rl.safety.finite import json_float, json_floats
from robo_safe_rl.safety.incident_kinds import IncidentKind

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
JSONL_NAME = "incidents.jsonl"
_MIB = 1024 * 1024


class RateLimitedLog:
    """Logs a warning that could repeat every step: the first ``first`` per key, then at most one per ``interval_s``
    seconds, saying how many were suppressed in between."""

    def __init__(self, log: logging.Logger, first: int = 5, interval_s: float = 60.0) -> None:
        self._log = log
        self._first = first
        self._interval_s = interval_s
        self._seen: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> None:
        """Log ``msg % args`` at WARNING unless rate-limited for ``key``."""
        seen = self._seen.get(key, 0) + 1
        self._seen[key] = seen
        now = time.monotonic()
        if seen > self._first and now - self._last.get(key, -math.inf) < self._interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        suppressed = self._suppressed.pop(key, 0)
        self._last[key] = now
        if suppressed:
            msg = f"{msg} ({suppressed} similar warnings suppressed)"
        elif seen == self._first:
            msg = f"{msg} (further ones rate-limited to one per {self._interval_s:.0f} s)"
        self._log.warning(msg, *args)


def exception_name(err: BaseException) -> str:
    """The qualified name of an exception's type: ``pybullet.error``, ``robo_safe_rl.errors.PhysicsError``;
    builtins without their module (``RuntimeError``)."""
    kind = type(err)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


@dataclass
class Incident:
    """One incident, as the guards describe it; the recorder adds id, time, context and the file name.

    The fields are those of the record (module docstring): the scalars and short lists go into the JSON line, the
    arrays (actions, observations, ``sim_state``, history) into the npz; ``exception`` is written as its type and
    message.
    """

    kind: IncidentKind
    env_index: int
    reason: str
    kinds: list[IncidentKind] = field(default_factory=list)
    source: str = "safe_step"
    env_id: str | None = None
    phase: str = "step"
    exception: BaseException | None = None
    env_step: int = 0
    episode_step: int = 0
    terminated: bool = False
    rebuilt: bool = False
    penalty: float | None = None
    simulated: bool = False
    action_names: list[str] | None = None
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    raw_action: np.ndarray | None = None
    action: np.ndarray | None = None
    nonfinite_action_elements: int = 0
    clipped_action_elements: int = 0
    reward: float | None = None
    obs: np.ndarray | dict[str, np.ndarray] | None = None
    sim_state: dict[str, np.ndarray] | None = None
    sim_state_age: int | None = None
    history_obs: np.ndarray | dict[str, np.ndarray] | None = None
    history_actions: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of the npz file, keyed as the module docstring lists them."""
        out: dict[str, np.ndarray] = {}
        for key in ("raw_action", "action", "action_low", "action_high", "history_actions"):
            value = getattr(self, key)
            if value is not None:
                out[key] = np.asarray(value)
        for key in ("obs", "history_obs"):
            value = getattr(self, key)
            if isinstance(value, dict):
                out.update({f"{key}.{group}": np.asarray(v) for group, v in value.items()})
            elif value is not None:
                out[key] = np.asarray(value)
        for key, value in (self.sim_state or {}).items():
            out[f"state.{key}"] = np.asarray(value)
        return out

    def to_json(self) -> dict[str, Any]:
        """The fields of the JSON line that this incident determines (see the module docstring)."""
        exc = self.exception
        return {
            "source": self.source,
            "env_index": int(self.env_index),
            "env_id": self.env_id,
            "kind": IncidentKind(self.kind).value,
            "kinds": [IncidentKind(k).value for k in (self.kinds or [self.kind])],
            "phase": self.phase,
            "reason": self.reason,
            "exception_type": None if exc is None else exception_name(exc),
            "exception": None if exc is None else str(exc),
            "env_step": int(self.env_step),
            "episode_step": int(self.episode_step),
            "terminated": bool(self.terminated),
            "rebuilt": bool(self.rebuilt),
            "penalty": None if self.penalty is None else json_float(self.penalty),
            "simulated": bool(self.simulated),
            "action_names": None if self.action_names is None else list(self.action_names),
            "action_low": json_floats(self.action_low),
            "action_high": json_floats(self.action_high),
            "raw_action": json_floats(self.raw_action),
            "action": json_floats(self.action),
            "nonfinite_action_elements": int(self.nonfinite_action_elements),
            "clipped_action_elements": int(self.clipped_action_elements),
            "reward": None if self.reward is None else json_float(self.reward),
            "obs_groups": sorted(self.obs) if isinstance(self.obs, dict) else None,
            "sim_state_keys": list(self.sim_state or {}),
            "sim_state_age": None if self.sim_state is None else self.sim_state_age,
            "history_len": 0 if self.history_actions is None else len(self.history_actions),
            "extra": self.extra,
        }


class IncidentRecorder:
    """Writes incident records of all envs of a run into one directory, within a record and a byte cap.

    Thread-safe. Context (training iteration, global step) is set by whoever knows it: the runner calls
    :meth:`set_context` per iteration, the vector adapter :meth:`advance` per vector step.

    Args:
        directory: ``<run_dir>/incidents``; created if missing. Existing records are kept and counted.
        max_records: Records kept in the directory at most (0 records nothing).
        max_bytes: Bytes the directory may hold at most (JSON lines plus arrays).

    Raises:
        IncidentError: If an existing ``incidents.jsonl`` cannot be read (not a record file).
    """

    def __init__(self, directory: str | os.PathLike[str], max_records: int = 1000, max_bytes: int = 200 * _MIB) -> None:
        self.directory = Path(directory)
        self.max_records = int(max_records)
        self.max_bytes = int(max_bytes)
        self.iteration: int | None = None
        self.global_step: int | None = None
        self.written = 0
        self.dropped = 0
        #: Records written / dropped per kind; a record counts under every kind of its ``kinds``.
        self.written_by_kind: Counter[str] = Counter()
        self.dropped_by_kind: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._warn = RateLimitedLog(logger)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._jsonl = self.directory / JSONL_NAME
        self._next_id, self._bytes = self._scan_existing()

    @classmethod
    def from_config(cls, directory: str | os.PathLike[str], cfg: Any) -> IncidentRecorder:
        """Build from a :class:`~robo_safe_rl.config.safe_step.SafeStepConfig` (``max_incidents``,
        ``max_incident_mb``)."""
        return cls(directory, max_records=cfg.max_incidents, max_bytes=int(cfg.max_incident_mb * _MIB))

    def _scan_existing(self) -> tuple[int, int]:
        if not self._jsonl.exists():
            return 0, 0
        try:
            with self._jsonl.open("rb") as f:
                lines = sum(1 for line in f if line.strip())
        except OSError as err:
            raise IncidentError(f"cannot read existing incident file {self._jsonl}: {err}") from err
        used = sum(p.stat().st_size for p in self.directory.iterdir() if p.is_file())
        return lines, used

    def set_context(self, *, iteration: int | None = None, global_step: int | None = None) -> None:
        """Set the training iteration and/or the global env-step count written into later records."""
        if iteration is not None:
            self.iteration = int(iteration)
        if global_step is not None:
            self.global_step = int(global_step)

    def advance(self, steps: int = 1) -> None:
        """Add ``steps`` env steps to the global step count (starting from 0 if none was set)."""
        self.global_step = (self.global_step or 0) + int(steps)

    def record(self, incident: Incident) -> bool:
        """Write one incident, or count it as dropped when a cap is reached.

        Returns:
            ``True`` if written, ``False`` if dropped (cap reached, or the disk refused the write).
        """
        kind = IncidentKind(incident.kind).value
        kinds = [IncidentKind(k).value for k in (incident.kinds or [incident.kind])]
        arrays = incident.arrays()
        with self._lock:
            if self._next_id >= self.max_records:
                return self._drop(kinds, f"the cap of {self.max_records} records is reached")
            rid = self._next_id
            name = f"{rid:06d}_env{int(incident.env_index):03d}_{kind}.npz"
            now = time.time()
            line = {
                "schema": SCHEMA_VERSION,
                "id": rid,
                "time": now,
                "time_iso": datetime.fromtimestamp(now, timezone.utc).isoformat(),
                "iteration": self.iteration,
                "global_step": self.global_step,
                **incident.to_json(),
                "arrays": name,
            }
            try:
                text = (json.dumps(line, allow_nan=False, default=_json_default) + "\n").encode()
            except (ValueError, TypeError) as err:
                return self._drop(kinds, f"it cannot be written as JSON: {err}")
            if self._bytes + _npz_size_bound(arrays) + len(text) > self.max_bytes:
                return self._drop(kinds, f"the cap of {self.max_bytes / _MIB:.1f} MiB is reached")
            path = self.directory / name
            try:
                # Not fsync'd: records come in storms on the envs' step path; a kill still never leaves a half file.
                with atomic_open(path, durable=False) as f:
                    np.savez(f, **arrays)
                size = path.stat().st_size
                self._append_line(text)
            except OSError as err:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
                return self._drop(kinds, f"writing it failed: {err}")
            self._next_id += 1
            self._bytes += size + len(text)
            self.written += 1
            self.written_by_kind.update(kinds)
            return True

    def _append_line(self, text: bytes) -> None:
        """Append one line and flush it; a failed write is cut off again, so no half line stays in the file."""
        with self._jsonl.open("ab") as f:
            end = f.tell()
            try:
                f.write(text)
                f.flush()
            except OSError:
                with contextlib.suppress(OSError):
                    f.truncate(end)
                raise

    def _drop(self, kinds: list[str], why: str) -> bool:
        self.dropped += 1
        self.dropped_by_kind.update(kinds)
        self._warn.warning("drop", "incident record (%s) not written to %s: %s", "+".join(kinds), self.directory, why)
        return False


def _npz_size_bound(arrays: dict[str, np.ndarray]) -> int:
    """An upper bound of the size of ``np.savez(arrays)``: the data, plus per array a .npy header (128 bytes) and the
    zip entries (local and central headers with zip64 extras, ~150 bytes plus twice the name), rounded up."""
    return 512 + sum(a.nbytes + 512 + 2 * len(key) for key, a in arrays.items())


def _json_default(value: Any) -> Any:
    # The ``extra`` field may carry numpy scalars and arrays.
    if isinstance(value, np.ndarray):
        return json_floats(value)
    if isinstance(value, np.generic):
        item = value.item()
        return json_float(item) if isinstance(item, float) else item
    raise TypeError(f"cannot write {type(value).__name__} into an incident record")


def read_incidents(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read every record of ``directory/incidents.jsonl`` (a truncated last line, from a crash, is skipped).

    Raises:
        IncidentError: If the file is missing, or a complete line is not a record.
    """
    path = Path(directory) / JSONL_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise IncidentError(f"cannot read incident records {path}: {err}") from err
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline yet: the writer died mid-line
                logger.warning("skipping the truncated last line of %s", path)
                continue
            raise IncidentError(f"{path}:{number}: not a JSON incident record ({err})") from err
        schema = record.get("schema") if isinstance(record, dict) else None
        if schema != SCHEMA_VERSION:
            raise IncidentError(
                f"{path}:{number}: unknown incident record format (schema={schema!r}), expected schema {SCHEMA_VERSION}"
            )
        records.append(record)
    return records


def load_incident_arrays(directory: str | os.PathLike[str], record: dict[str, Any]) -> dict[str, np.ndarray]:
    """Load the npz arrays named by ``record["arrays"]``.

    Raises:
        IncidentError: If the file is missing or unreadable.
    """
    path = Path(directory) / str(record.get("arrays"))
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise IncidentError(f"cannot read incident arrays {path}: {err}") from err
