"""PyBullet locomotion tasks as gymnasium envs; importing this package registers them.

Registered ids (each with ``max_episode_steps=1000``, so gymnasium's ``TimeLimit`` truncates):

- ``RoboSafe/Ant-v0``: :class:`robosafe_tasks.ant.AntEnv`, pybullet_envs' ``AntBulletEnv-v0``.
- ``RoboSafe/HalfCheetah-v0``: :class:`robosafe_tasks.half_cheetah.HalfCheetahEnv`, ``HalfCheetahBulletEnv-v0``.
- ``RoboSafe/Hopper-v0``: :class:`robosafe_tasks.hopper.HopperEnv`, ``HopperBulletEnv-v0``.
- ``RoboSafe/Walker2D-v0``: :class:`robosafe_tasks.walker2d.Walker2DEnv`, ``Walker2DBulletEnv-v0``.
- ``RoboSafe/A1Flat-v0``: :class:`robosafe_tasks.a1.A1FlatEnv`, Isaac Lab's flat velocity task for the Unitree A1
  (1000 steps of 20 ms: its 20 s episodes).
- ``RoboSafe/A1Rough-v0``: :class:`robosafe_tasks.a1.A1RoughEnv`, the same on Isaac Lab's rough terrain, with its
  height scan and terrain curriculum.

This package imports neither rsl-rl nor ``robo_safe_rl``.
"""

from __future__ import annotations

import gymnasium

#: Task ids registered by this package, mapped to their entry points.
TASKS: dict[str, str] = {
    "RoboSafe/Ant-v0": "robosafe_tasks.ant:AntEnv",
    "RoboSafe/HalfCheetah-v0": "robosafe_tasks.half_cheetah:HalfCheetahEnv",
    "RoboSafe/Hopper-v0": "robosafe_tasks.hopper:HopperEnv",
    "RoboSafe/Walker2D-v0": "robosafe_tasks.walker2d:Walker2DEnv",
    "RoboSafe/A1Flat-v0": "robosafe_tasks.a1:A1FlatEnv",
    "RoboSafe/A1Rough-v0": "robosafe_tasks.a1:A1RoughEnv",
}

#: Episode length of every task, in env steps (the pybullet_envs registrations use 1000).
MAX_EPISODE_STEPS = 1000

for _task_id, _entry_point in TASKS.items():
    if _task_id not in gymnasium.registry:
        gymnasium.register(id=_task_id, entry_point=_entry_point, max_episode_steps=MAX_EPISODE_STEPS)

__all__ = ["MAX_EPISODE_STEPS", "TASKS"]
