"""A standalone reproduction script per replayed incident: ``<run_dir>/repro/incident_<id>.py``.

The script imports only gymnasium, numpy and the task package ``robosafe_tasks``; it loads the record's npz by a
path relative to itself (so the run directory can be copied elsewhere whole), restores the recorded state, steps the
recorded actions that followed the snapshot, applies the raw action straight to the task, prints the state before
and after and whether it is finite and plausible, and exits 1 when the fault reproduces (0 when it does not).

Whatever comes from the incidents folder (its name, the record's fields, the npz path) may be crafted, and the
script is code someone will run: such values enter it only as Python literals made by ``repr`` and checked to read
back as the same value (:func:`literal`), never inside its docstring or as code; the script's own file name keeps
only letters, digits, ``_`` and ``-`` of the folder's name.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import re
from pathlib import Path

from robo_safe_rl.diagnose.inputs import LoadedIncident
from robo_safe_rl.rundir import RunDir, incidents_tag

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Characters of a folder's name kept in a script's name (file names stop at 255 bytes).
_TAG_CHARS = 64

_HEADER = '''"""Reproduce an incident of a training run: restore the state, apply the raw action, see what happens.

Written by `python tools/diagnose.py`. It restores the last legal simulator state the incident recorded, steps the
recorded actions that followed that snapshot, then sends the raw action the policy emitted straight to the task
(no safety wrapper) and says whether the state stays finite and plausible.

Run it with python, from any directory.
Exit status: 1 when the fault reproduces, 0 when it does not. Needs only gymnasium, numpy and the task package
robosafe_tasks.
"""

import sys
from pathlib import Path

import gymnasium
import numpy as np

import robosafe_tasks  # noqa: F401  (importing it registers the task ids)

INCIDENT = {ref}
KIND = {kind}
REASON = {reason}
WHEN = {when}
ENV_ID = {env_id}
ACTION_NAMES = {names}
SNAPSHOT_AGE = {age}
ARRAYS = Path(__file__).resolve().parent / {npz}
'''

_BODY = """

def shown(text):
    # Text from the record may hold control characters (terminal escapes): print their escapes instead.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def show(label, state):
    print(f"{label}:")
    for key, value in state.items():
        text = np.array2string(np.atleast_1d(value), precision=5, separator=", ", max_line_width=200)
        print(f"  {key:17s} {text}")


def nonfinite_keys(state):
    return [key for key, value in state.items() if not np.isfinite(value).all()]


def main():
    with np.load(ARRAYS, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    state = {key[len("state."):]: value for key, value in arrays.items() if key.startswith("state.")}
    history = arrays.get("history_actions", np.zeros((0, len(ACTION_NAMES))))
    before_actions = history[len(history) - SNAPSHOT_AGE - 1 : len(history) - 1] if SNAPSHOT_AGE else history[:0]
    raw = np.asarray(arrays["raw_action"])  # in its own dtype: a float64 1e300 must not become inf

    print(shown(f"incident {INCIDENT} ({WHEN}): {KIND}: {REASON}"))
    env = gymnasium.make(ENV_ID, disable_env_checker=True)
    env.reset(seed=0)
    task = env.unwrapped
    task.set_sim_state(state)
    for action in before_actions:
        task.step(action)
    print(f"restored the recorded state of {shown(ENV_ID)}, then stepped {len(before_actions)} recorded action(s)")
    show("state before", task.get_sim_state())
    print("raw action: " + ", ".join(f"{shown(name)}={value}" for name, value in zip(ACTION_NAMES, raw.tolist())))
    try:
        obs, reward, _, _, _ = task.step(raw)
        after = task.get_sim_state()
    except task.physics_error_types as err:
        print(f"FAULT REPRODUCED: the physics engine raised {type(err).__name__}: {err}")
        return 1
    show("state after", after)
    bad = nonfinite_keys(after)
    reason = task.check_state()
    print(f"state finite: {not bad}; plausible: {reason is None}; observation finite: {bool(np.isfinite(obs).all())}; "
          f"reward: {reward}")
    problems = []
    if bad:
        problems.append("non-finite state in " + ", ".join(bad))
    elif reason is not None:
        problems.append("implausible state: " + reason)
    if not np.isfinite(obs).all():
        problems.append("non-finite observation")
    if not np.isfinite(reward):
        problems.append(f"non-finite reward {reward}")
    env.close()
    if problems:
        print("FAULT REPRODUCED: " + "; ".join(problems))
        return 1
    print("no fault: the raw action leaves the state finite and plausible")
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""


def literal(value: str | int | list[str]) -> str:
    """``value`` as Python source that evaluates to it and to nothing else: a string, an integer or a list of
    strings, whatever characters the strings hold (quotes, triple quotes, newlines, backslashes).

    Raises:
        ValueError: If ``value`` is of another type, or its ``repr`` does not read back as itself.
    """
    plain = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if not plain and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"cannot write a {type(value).__name__} into a reproduction script")
    text = repr(value)
    # repr of str, int and list[str] is a literal by the language's definition; reading it back proves it here.
    if "\n" in text or ast.literal_eval(text) != value:
        raise ValueError(f"repr of {type(value).__name__} is not a one-line literal")
    return text


def script_path(incident: LoadedIncident, run_dir: Path | None) -> Path:
    """Where the script of ``incident`` goes: ``<run_dir>/repro/incident_<id>.py``, with the folder's suffix for
    ``incidents_rank<r>`` and other folders (``incident_rank1_<id>.py``). Characters of the folder's name other than
    letters, digits, ``_`` and ``-`` become ``_``, and a name so changed gets 8 hex digits of its hash, so that two
    folders do not share a script."""
    base = run_dir if run_dir is not None else incident.directory.parent
    tag = incidents_tag(incident.directory.name)
    safe = _UNSAFE.sub("_", tag)[:_TAG_CHARS]
    if safe != tag:
        safe = f"{safe}_{hashlib.sha256(tag.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
    name = f"incident_{safe}_{incident.id}.py" if tag else f"incident_{incident.id}.py"
    return RunDir(base).repro_dir / name


def script_text(incident: LoadedIncident, path: Path) -> str:
    """The source of the reproduction script for ``incident``, to be written at ``path``."""
    record = incident.record
    npz = os.path.relpath(incident.directory.resolve() / str(record["arrays"]), path.parent.resolve())
    raw = incident.arrays.get("raw_action")
    size = 0 if raw is None else len(raw)
    names = record.get("action_names") if isinstance(record.get("action_names"), list) else None
    when = ", ".join(
        f"{label} {record.get(key)}"
        for label, key in (("iteration", "iteration"), ("env", "env_index"), ("env step", "env_step"))
        if record.get(key) is not None
    )
    header = _HEADER.format(
        ref=literal(incident.ref),
        kind=literal(str(record.get("kind"))),
        reason=literal(str(record.get("reason"))),
        when=literal(when),
        env_id=literal(str(record.get("env_id"))),
        names=literal([str(n) for n in names] if names and len(names) == size else [f"a[{i}]" for i in range(size)]),
        age=literal(int(record.get("sim_state_age") or 0)),
        npz=literal(Path(npz).as_posix()),
    )
    return header + _BODY


def write_script(incident: LoadedIncident, run_dir: Path | None) -> Path:
    """Write the reproduction script of ``incident`` (module docstring) and return its path.

    Raises:
        OSError: If the folder or the file cannot be written.
    """
    path = script_path(incident, run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script_text(incident, path), encoding="utf-8")
    logger.info("wrote %s", path)
    return path
