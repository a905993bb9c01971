"""Shared settings of the A1 tests: a quiet A1 (no randomisation, no observation noise) whose numbers are exact."""

from __future__ import annotations

from typing import Any

import numpy as np
import pybullet

from benchmarks.a1_rewards import QUIET_EVENTS
from robosafe_tasks.a1 import A1FlatEnv

A1_ID = "RoboSafe/A1Flat-v0"

#: Every randomisation event and the observation noise off (the events as the A1 reward bench switches them off).
QUIET: dict[str, Any] = {"events": QUIET_EVENTS, "obs_noise": False}


def quiet_a1(**overrides: Any) -> A1FlatEnv:
    """An A1 without randomisation or noise; ``overrides`` replace whole sections of :data:`QUIET`."""
    return A1FlatEnv(**{**QUIET, **overrides})


def place(env: A1FlatEnv, z: float, roll: float) -> None:
    """Put the trunk at height z with the given roll, at rest, as an episode's state."""
    state = env.get_sim_state()
    state["base_pos"] = np.array([0.0, 0.0, z])
    state["base_orn"] = np.array(pybullet.getQuaternionFromEuler((roll, 0.0, 0.0)))
    env.set_sim_state(state)
