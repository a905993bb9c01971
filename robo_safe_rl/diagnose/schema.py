"""The incident record schema (version 1, written by :mod:`robo_safe_rl.bridge.incidents`) as checks, in one place.

A diagnosis treats records as data from disk that may be damaged or crafted. Before anything else uses a record,
:func:`check_record` checks every field the schema lists (type, range, vocabulary), :func:`task_id_problem` the task
it names, and :func:`check_array_headers` the arrays its npz declares (names, dtypes, shapes, consistent with the JSON
line), so that nothing downstream meets a string step, a list env index, a 2-D action or a complex array. A check
raises :class:`~robo_safe_rl.errors.IncidentError` naming the record and the field; fields the schema does not list
are ignored. Pure functions: nothing here reads a file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.incidents import SCHEMA_VERSION
from robo_safe_rl.diagnose.limits import Limits
from robo_safe_rl.errors import IncidentError
from robo_safe_rl.safety.incident_kinds import IncidentKind

PHASES: tuple[str, ...] = ("step", "reset", "observe")
SOURCES: tuple[str, ...] = ("safe_step", "tensor_guard", "env_worker")  # env_worker: a worker crash (bridge.workers)
#: The lists of json floats that describe the action; each holds one value per component when present.
ACTION_FIELDS: tuple[str, ...] = ("raw_action", "action", "action_low", "action_high")
_NONFINITE_STRINGS = frozenset({"nan", "inf", "-inf"})
#: An observation group or a simulator-state key: it becomes part of an npz member name (``state.<key>``).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
_ARRAYS_NAME = re.compile(r"[^/\\\x00]{1,200}\.npz")
#: Array dtypes by role: actions and their history are floats; observations and simulator state may be any real
#: number type (a task may keep an integer counter or a boolean contact in its state).
_FLOAT = "f"
_REAL = "fiub"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _json_float(value: Any) -> bool:
    """A float as the recorder writes it: a finite number, or ``"nan"``, ``"inf"``, ``"-inf"``."""
    if isinstance(value, str):
        return value in _NONFINITE_STRINGS
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _or_none(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and all(check(v) for v in value)


_KINDS = frozenset(kind.value for kind in IncidentKind)


def _is_kind(value: Any) -> bool:
    return isinstance(value, str) and value in _KINDS


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_name(value: Any) -> bool:
    """A group or state key: it becomes part of an npz member name."""
    return isinstance(value, str) and bool(_PLAIN_NAME.fullmatch(value))


def _floats(value: Any) -> bool:
    return bool(value) and _list_of(_json_float)(value)


#: Every field of a version-1 record: what it must hold (for the message) and the check.
FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "schema": (f"the integer {SCHEMA_VERSION}", lambda v: _is_int(v) and v == SCHEMA_VERSION),
    "id": ("an integer >= 0", _count),
    "time": ("a finite number of seconds", lambda v: _json_float(v) and not isinstance(v, str)),
    "time_iso": ("a string", _is_str),
    "iteration": ("an integer >= 0 or null", _or_none(_count)),
    "global_step": ("an integer >= 0 or null", _or_none(_count)),
    "source": (f"one of {', '.join(SOURCES)}", lambda v: v in SOURCES),
    "env_index": ("an integer >= 0", _count),
    "env_id": ("a string or null", _or_none(_is_str)),
    "kind": (f"an incident kind ({', '.join(sorted(_KINDS))})", _is_kind),
    "kinds": ("a non-empty list of incident kinds", lambda v: bool(v) and _list_of(_is_kind)(v)),
    "phase": (f"one of {', '.join(PHASES)}", lambda v: v in PHASES),
    "reason": ("a string", _is_str),
    "exception_type": ("a string or null", _or_none(_is_str)),
    "exception": ("a string or null", _or_none(_is_str)),
    "env_step": ("an integer >= 0", _count),
    "episode_step": ("an integer >= 0", _count),
    "terminated": ("true or false", lambda v: isinstance(v, bool)),
    "rebuilt": ("true or false", lambda v: isinstance(v, bool)),
    "penalty": ('a number, "nan", "inf", "-inf" or null', _or_none(_json_float)),
    "simulated": ("true or false", lambda v: isinstance(v, bool)),
    "action_names": ("a list of strings or null", _or_none(_list_of(_is_str))),
    **{
        key: ('a non-empty list of numbers, "nan", "inf" or "-inf", or null', _or_none(_floats))
        for key in ACTION_FIELDS
    },
    "nonfinite_action_elements": ("an integer >= 0", _count),
    "clipped_action_elements": ("an integer >= 0", _count),
    "reward": ('a number, "nan", "inf", "-inf" or null', _or_none(_json_float)),
    "obs_groups": ("a list of names or null", _or_none(_list_of(_is_name))),
    "sim_state_keys": ("a list of names", _list_of(_is_name)),
    "sim_state_age": ("an integer >= 0 or null", _or_none(_count)),
    "history_len": ("an integer >= 0", _count),
    "arrays": ("the name of an .npz file in the incidents folder", lambda v: isinstance(v, str) and _arrays_name(v)),
    "extra": ("an object", lambda v: isinstance(v, dict)),
}


def _arrays_name(name: str) -> bool:
    """A plain file name ending in ``.npz``: no folder part (``/``, ``\\``), so no ``..`` and no absolute path."""
    return bool(_ARRAYS_NAME.fullmatch(name))


def show(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters: printable on one line, whatever a file held."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_record(record: Any, where: str, limits: Limits) -> dict[str, Any]:
    """Check one parsed JSON line against the schema.

    Args:
        record: What ``json.loads`` made of the line.
        where: ``<file>:<line>``, for messages.
        limits: Bounds (the action size).

    Returns:
        ``record``, unchanged.

    Raises:
        IncidentError: ``"<file>:<line>: record <id>: field 'env_step': expected an integer >= 0, got '7'"``.
    """
    if not isinstance(record, dict):
        raise IncidentError(f"{where}: not an incident record (a JSON {type(record).__name__}, expected an object)")
    label = f"{where}: record {record['id']}" if _count(record.get("id")) else where
    missing = [key for key in FIELDS if key not in record]
    if missing:
        raise IncidentError(f"{label}: lacks the field(s) {', '.join(missing)} of an incident record")
    for key, (expected, check) in FIELDS.items():
        if not check(record[key]):
            raise IncidentError(f"{label}: field {key!r}: expected {expected}, got {show(record[key])}")
    if record["kind"] not in record["kinds"]:
        raise IncidentError(
            f"{label}: field 'kinds': {show(record['kinds'])} lacks the primary kind {record['kind']!r}"
        )
    sizes = {key: len(record[key]) for key in ACTION_FIELDS if record[key] is not None}
    if len(set(sizes.values())) > 1:
        raise IncidentError(f"{label}: the action fields have different lengths ({_sizes(sizes)})")
    if any(size > limits.action_dim for size in sizes.values()):
        raise IncidentError(f"{label}: field 'raw_action': {_sizes(sizes)} components, more than {limits.action_dim}")
    if len(set(record["sim_state_keys"])) != len(record["sim_state_keys"]):
        raise IncidentError(f"{label}: field 'sim_state_keys': a name appears twice")
    # A module part would make gymnasium import it: refused outright. A well-formed id that is not registered here
    # (an Isaac Lab task recorded by the tensor guard, say) is still diagnosed from its record; its replay says why
    # it cannot run.
    if record["env_id"] is not None and ":" in record["env_id"]:
        raise IncidentError(f"{label}: field 'env_id': {task_id_problem(record['env_id'])}")
    return record


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{key} {size}" for key, size in sizes.items())


def task_id_problem(env_id: str) -> str | None:
    """Why ``env_id`` may not be made, or ``None`` for a task id registered with gymnasium.

    ``gymnasium.make("pkg.mod:Env-v0")`` imports ``pkg.mod`` first, whatever it is; a record is data, so it may only
    name a task that is registered already (``tools/diagnose.py`` imports the task package, which registers the
    RoboSafe tasks).
    """
    if ":" in env_id:
        return (
            f"{show(env_id)} names a module to import (gymnasium imports the part before ':'); a record may only "
            "name a registered task id"
        )
    if env_id not in gym.registry:
        return (
            f"{show(env_id)} is not a registered task id (tools/diagnose.py registers the RoboSafe tasks; another "
            "task's package must be imported to diagnose its incidents)"
        )
    return None


def check_array_headers(
    record: dict[str, Any], headers: dict[str, tuple[tuple[int, ...], np.dtype]], where: str
) -> None:
    """Check the arrays an npz declares (before any is read) against the schema and the record.

    Args:
        record: The checked JSON line (:func:`check_record`).
        headers: Member name (without ``.npy``) -> (shape, dtype), from the npy headers.
        where: The npz file, for messages.

    Raises:
        IncidentError: ``"<npz>: array 'raw_action': expected shape (8,) ..., got (2, 4)"``.
    """
    groups = record["obs_groups"]
    state_keys = set(record["sim_state_keys"])
    history = record["history_len"]
    for key, (_, dtype) in headers.items():
        role = _role(key, groups, state_keys)
        if role is None:
            raise IncidentError(f"{where}: array {show(key)} is not part of an incident record")
        if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in role or dtype.itemsize > 8:
            kinds = "floating-point" if role == _FLOAT else "real numbers (float, int, uint, bool)"
            raise IncidentError(f"{where}: array {key!r}: expected {kinds} of at most 8 bytes, got dtype {dtype.str}")
    size = next((len(record[key]) for key in ACTION_FIELDS if record[key] is not None), None)
    for key in ACTION_FIELDS:
        if (key in headers) != (record[key] is not None):
            have = "holds" if key in headers else "lacks"
            raise IncidentError(
                f"{where}: the npz {have} the array {key!r} but the record's {key!r} is {show(record[key])}"
            )
        if key in headers:
            _expect(where, key, headers[key][0], (size,))
    if history and "history_actions" not in headers:
        raise IncidentError(f"{where}: the record's history_len is {history} but the npz has no 'history_actions'")
    if "history_actions" in headers:
        shape = headers["history_actions"][0]
        width = size if size is not None or len(shape) != 2 else shape[1]
        _expect(where, "history_actions", shape, (history, width))
    missing = sorted(f"state.{k}" for k in state_keys if f"state.{k}" not in headers)
    if missing:
        raise IncidentError(f"{where}: the record's sim_state_keys name arrays the npz lacks: {', '.join(missing)}")
    for name in [None] if groups is None else groups:
        _check_observation(headers, where, history, "obs" if name is None else f"obs.{name}")
    for key, (shape, _) in headers.items():
        if key.startswith("state.") and len(shape) > 4:
            raise IncidentError(f"{where}: array {key!r}: expected at most 4 dimensions, got shape {shape}")


def _role(key: str, groups: list[str] | None, state_keys: set[str]) -> str | None:
    """The dtype kinds allowed for npz member ``key``, or ``None`` when the schema has no such array."""
    if key in ACTION_FIELDS or key == "history_actions":
        return _FLOAT
    if key.startswith("state."):
        return _REAL if key.removeprefix("state.") in state_keys else None
    if groups is None:
        return _REAL if key in ("obs", "history_obs") else None
    for prefix in ("obs.", "history_obs."):
        if key.startswith(prefix) and key.removeprefix(prefix) in groups:
            return _REAL
    return None


def _check_observation(
    headers: dict[str, tuple[tuple[int, ...], np.dtype]], where: str, history: int, key: str
) -> None:
    """``obs`` has at most 4 dimensions (a group of the vector guard may be one number per env) and no empty one;
    ``history_obs`` is (H, *obs)."""
    obs = headers.get(key)
    past = headers.get(f"history_{key}")
    if obs is not None and not (len(obs[0]) <= 4 and 0 not in obs[0]):
        raise IncidentError(f"{where}: array {key!r}: expected at most 4 dimensions of size >= 1, got shape {obs[0]}")
    if past is None:
        return
    shape = past[0]
    if not 1 <= len(shape) <= 5 or shape[0] != history or 0 in shape[1:]:
        raise IncidentError(
            f"{where}: array 'history_{key}': expected shape ({history}, *observation) (history_len {history}), got "
            f"{shape}"
        )
    if obs is not None and shape[1:] != obs[0]:
        raise IncidentError(f"{where}: array 'history_{key}': rows of shape {shape[1:]}, but {key!r} has {obs[0]}")


def _expect(where: str, key: str, shape: tuple[int, ...], expected: tuple[int | None, ...]) -> None:
    if shape != expected:
        text = "(" + ", ".join("A" if n is None else str(n) for n in expected) + (",)" if len(expected) == 1 else ")")
        raise IncidentError(f"{where}: array {key!r}: expected shape {text} (from the record), got {shape}")
