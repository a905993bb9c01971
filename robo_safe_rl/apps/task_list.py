"""``python tools/train.py --list-tasks``: each task of ``configs/task/`` with its gymnasium id, its sizes and whether
it declares a left-right mirror (what ``algorithm.symmetry_cfg`` needs).

Each task's config is composed as a run would compose it (``task=<name>``) and its env made once (``gymnasium.make``
with the task's ``env_kwargs``) to read the observation and action sizes and the mirror; nothing else is built or
written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import gymnasium

from robo_safe_rl.bridge.env_batch import EnvInfo
from robo_safe_rl.config.compose import compose, config_source
from robo_safe_rl.errors import ConfigError


@dataclass(frozen=True)
class TaskRow:
    """One line of the list.

    Attributes:
        name: The option of the ``task`` config group (``task=<name>``).
        env_id: Its gymnasium id.
        observation: Size of the (flattened) observation, or None when the env could not be made.
        action: Size of the (flattened) action, or None when the env could not be made.
        mirror: Whether its env declares a left-right mirror (``observation_mirror`` and ``action_mirror``), or None
            when the env could not be made or its mirror is refused.
        problem: Why the env could not be made or its mirror is refused, or None.
    """

    name: str
    env_id: str
    observation: int | None
    action: int | None
    mirror: bool | None = None
    problem: str | None = None


def task_names() -> list[str]:
    """The options of the ``task`` config group, sorted."""
    return sorted(path.stem for path in (Path(config_source()) / "task").glob("*.yaml"))


def task_row(name: str) -> TaskRow:
    """Compose ``task=<name>`` and make its env once to read its sizes and its mirror."""
    task = compose([f"task={name}"]).task
    env_id = str(task.env_id)
    try:
        env = gymnasium.make(env_id, disable_env_checker=True, **dict(task.get("env_kwargs") or {}))
    except gymnasium.error.Error as err:
        problem = f"not registered ({err}); `import robosafe_tasks` registers it"
        return TaskRow(name, env_id, None, None, problem=problem)
    try:
        return env_row(name, env)
    finally:
        env.close()


def env_row(name: str, env: gymnasium.Env) -> TaskRow:
    """The row of task ``name`` from its made env: its sizes, and its mirror as the trainer reads it."""
    env_id = env.spec.id if env.spec is not None else "?"
    sizes = gymnasium.spaces.flatdim(env.observation_space), gymnasium.spaces.flatdim(env.action_space)
    try:
        mirror = EnvInfo.of(env).mirror is not None
    except ConfigError as err:
        return TaskRow(name, env_id, *sizes, problem=str(err))
    return TaskRow(name, env_id, *sizes, mirror=mirror)


def format_rows(rows: list[TaskRow]) -> str:
    """The rows as an aligned plain-text table with a header."""
    yes_no = {True: "yes", False: "no", None: "?"}
    table = [("task", "gymnasium id", "observation", "action", "mirror")]
    table += [(r.name, r.env_id, str(r.observation or "?"), str(r.action or "?"), yes_no[r.mirror]) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    lines = [
        f"{line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]:>{widths[2]}}  {line[3]:>{widths[3]}}  "
        f"{line[4]:<{widths[4]}}".rstrip()
        for line in table
    ]
    lines += [f"{r.name}: {r.problem}" for r in rows if r.problem]
    return "\n".join(lines)


def list_tasks(out: TextIO | None = None) -> int:
    """Print the task table; returns the exit code (0)."""
    print(format_rows([task_row(name) for name in task_names()]), file=out or sys.stdout)
    return 0
