"""The Unitree A1 velocity-tracking tasks (Isaac Lab's ``Isaac-Velocity-Flat-Unitree-A1-v0`` and
``Isaac-Velocity-Rough-Unitree-A1-v0`` on PyBullet).

Registered as ``RoboSafe/A1Flat-v0`` and ``RoboSafe/A1Rough-v0`` by :mod:`robosafe_tasks`; see
:mod:`robosafe_tasks.a1.env` and :mod:`robosafe_tasks.a1.rough`.
"""

from __future__ import annotations

from robosafe_tasks.a1.env import A1FlatEnv
from robosafe_tasks.a1.rough import A1RoughEnv

__all__ = ["A1FlatEnv", "A1RoughEnv"]
