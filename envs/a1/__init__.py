"""The Unitree A1 velocity-tracking task (Isaac Lab's ``Isaac-Velocity-Flat-Unitree-A1-v0`` on PyBullet).

Registered as ``RoboSafe/A1Flat-v0`` by :mod:`robosafe_tasks`; see :mod:`robosafe_tasks.a1.env`.
"""

from __future__ import annotations

from robosafe_tasks.a1.env import A1FlatEnv

__all__ = ["A1FlatEnv"]
