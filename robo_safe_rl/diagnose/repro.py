"""A standalone reproduction script per replayed incident: ``<run_dir>/repro/incident_<id>.py``.

The script imports only gymnasium, numpy and the task package ``envs``; it loads the record's npz by a path relative
to itself (so the run directory can be copied elsewhere whole), restores the recorded state, steps the recorded
actions that followed the snapshot, applies the raw action straight to the task, prints the state before and after
and whether it is finite and plausible, and exits 1 when the fault reproduces (0 when it does not).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from robo_safe_rl.diagnose.inputs import LoadedIncident
from robo_safe_rl.rundir import RunDir, incidents_tag

logger = logging.getLogger(__name__)

_HEADER = '''"""Reproduce an incident of a training run: restore the state, apply the raw action, see what happens.

Written by `python tools/diagnose.py`. It restores the last legal simulator state the incident recorded, steps the
recorded actions that followed that snapshot, then sends the raw action the policy emitted straight to the task
(no safety wrapper) and says whether the state stays finite and plausible.

Run: python {script}
Exit status: 1 when the fault reproduces, 0 when it does not. Needs only gymnasium, numpy and the task package envs.
"""

import sys
from pathlib import Path

import gymnasium
import numpy as np

import robosafe_tasks  # noqa: F401  (importing it registers the task ids)

INCIDENT = {ref!r}
KIND = {kind!r}
REASON = {reason!r}
WHEN = {when!r}
ENV_ID = {env_id!r}
ACTION_NAMES = {names!r}
SNAPSHOT_AGE = {age!r}
ARRAYS = Path(__file__).resolve().parent / {npz!r}
'''

_BODY = """

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
    raw = np.asarray(arrays["raw_action"], dtype=np.float32)

    print(f"incident {INCIDENT} ({WHEN}): {KIND}: {REASON}")
    env = gymnasium.make(ENV_ID, disable_env_checker=True)
    env.reset(seed=0)
    task = env.unwrapped
    task.set_sim_state(state)
    for action in before_actions:
        task.step(action)
    print(f"restored the recorded state of {ENV_ID}, then stepped {len(before_actions)} recorded action(s)")
    show("state before", task.get_sim_state())
    print("raw action: " + ", ".join(f"{name}={value}" for name, value in zip(ACTION_NAMES, raw.tolist())))
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


def script_path(incident: LoadedIncident, run_dir: Path | None) -> Path:
    """Where the script of ``incident`` goes: ``<run_dir>/repro/incident_<id>.py``, with the folder's suffix for
    ``incidents_rank<r>`` and other folders (``incident_rank1_<id>.py``)."""
    base = run_dir if run_dir is not None else incident.directory.parent
    tag = incidents_tag(incident.directory.name)
    name = f"incident_{tag}_{incident.id}.py" if tag else f"incident_{incident.id}.py"
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
        script=path.name,
        ref=incident.ref,
        kind=str(record.get("kind")),
        reason=str(record.get("reason")),
        when=when,
        env_id=str(record.get("env_id")),
        names=[str(n) for n in names] if names and len(names) == size else [f"a[{i}]" for i in range(size)],
        age=int(record.get("sim_state_age") or 0),
        npz=Path(npz).as_posix(),
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
