"""Fire-drill fault injection for the env bridge, where real faults arise (``faults.env``).

Two wrappers, placed around :class:`~robo_safe_rl.bridge.safe_step.SafeStep` as a real fault would meet it::

    ActionFaultInjector( SafeStep( EnvFaultInjector( task ) ) )

- :class:`ActionFaultInjector` (outside): replaces one action component by a non-finite value, as a policy with
  NaN weights would emit. The caller's array is copied, never modified.
- :class:`EnvFaultInjector` (inside): before the step, kills the physics client (``break_simulation``, so the
  task's own step raises the engine's error) or throws the base (``perturb_state``); after the step, replaces one
  observation element or the reward by a non-finite value. A task without the simulator protocol gets a
  :class:`~robo_safe_rl.errors.PhysicsError` raised from inside the env chain instead, and no state blow-ups.

Each injector draws from its own ``numpy`` Generator seeded with ``(cfg.seed, env_index, side)``, so a drill
replays exactly, and counts what it injected in ``injector.injected`` (one counter per kind, named as the config
fields). Each injected fault is one incident of the kind in
:data:`~robo_safe_rl.safety.incident_kinds.KIND_OF_FAULT` when it reaches SafeStep, so a test can check
``recorded + dropped == injected``. A physics error ends the step: the other env-side faults drawn for it are not
injected (nor counted). Resets are never faulted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.protocol import SimulatedEnv, is_simulated
from robo_safe_rl.config.safe_step import EnvFaultConfig, NonFiniteValue
from robo_safe_rl.errors import PhysicsError

logger = logging.getLogger(__name__)

_VALUES = (np.nan, np.inf, -np.inf)
_SIDE_ACTION, _SIDE_ENV = 0, 1


def nonfinite_value(kind: NonFiniteValue, rng: np.random.Generator) -> float:
    """The value a fault writes: NaN, +Inf, -Inf, or (``any``) one of them drawn from ``rng``."""
    if kind is NonFiniteValue.nan:
        return float("nan")
    if kind is NonFiniteValue.posinf:
        return float("inf")
    if kind is NonFiniteValue.neginf:
        return float("-inf")
    return float(_VALUES[int(rng.integers(3))])


def wrapper_chain(env: gym.Env) -> Iterator[gym.Env]:
    """``env`` and every env it wraps, outermost first."""
    layer: gym.Env | None = env
    while layer is not None:
        yield layer
        layer = layer.env if isinstance(layer, gym.Wrapper) else None


def sum_injected(envs: Iterable[gym.Env]) -> dict[str, int]:
    """Faults injected into these envs (their wrapper chains are searched for injectors), per kind.

    Only kinds an injector was armed for (probability > 0) appear, so the result is empty when no drill ran:
    ``summary.json``'s ``faults_injected``.
    """
    total: dict[str, int] = {}
    for env in envs:
        for layer in wrapper_chain(env):
            if isinstance(layer, (ActionFaultInjector, EnvFaultInjector)):
                for kind, count in layer.injected.items():
                    if getattr(layer.cfg, kind) > 0:
                        total[kind] = total.get(kind, 0) + count
    return total


class ActionFaultInjector(gym.Wrapper):
    """Replaces one action component by a non-finite value with probability ``cfg.action_nonfinite`` per step.

    Args:
        env: The env to wrap (SafeStep, so the fault meets it as a bad policy's action would).
        cfg: The drill; only ``action_nonfinite``, ``value`` and ``seed`` are used here.
        env_index: Index of the env in its vector (part of the seed).
    """

    def __init__(self, env: gym.Env, cfg: EnvFaultConfig, *, env_index: int = 0) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.rng = np.random.default_rng([cfg.seed, int(env_index), _SIDE_ACTION])
        self.injected: dict[str, int] = {"action_nonfinite": 0}

    def step(self, action: np.ndarray) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, after corrupting one component of a copy of ``action`` when the draw says so."""
        if self.cfg.action_nonfinite > 0 and self.rng.random() < self.cfg.action_nonfinite:
            action = np.array(action, dtype=np.float64 if np.asarray(action).dtype.kind != "f" else None, copy=True)
            if action.size:
                action.flat[int(self.rng.integers(action.size))] = nonfinite_value(self.cfg.value, self.rng)
                self.injected["action_nonfinite"] += 1
        return self.env.step(action)


class EnvFaultInjector(gym.Wrapper):
    """Injects physics errors, state blow-ups and non-finite observations and rewards between SafeStep and the task.

    Args:
        env: The task (any wrapping of it that keeps ``unwrapped``).
        cfg: The drill.
        env_index: Index of the env in its vector (part of the seed).
    """

    def __init__(self, env: gym.Env, cfg: EnvFaultConfig, *, env_index: int = 0) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.rng = np.random.default_rng([cfg.seed, int(env_index), _SIDE_ENV])
        self.injected: dict[str, int] = {
            "physics_error": 0,
            "state_blowup": 0,
            "obs_nonfinite": 0,
            "reward_nonfinite": 0,
        }
        self._simulated = is_simulated(env.unwrapped)
        if cfg.state_blowup > 0 and not self._simulated:
            logger.warning(
                "faults.env.state_blowup=%s ignored for %s: it needs the simulator protocol (perturb_state)",
                cfg.state_blowup,
                type(env.unwrapped).__name__,
            )
        self._probs = np.array([cfg.physics_error, cfg.state_blowup, cfg.obs_nonfinite, cfg.reward_nonfinite])
        self._active = bool((self._probs > 0).any())

    def step(self, action: np.ndarray) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the task with the faults drawn for this step.

        Raises:
            The task's physics error (after ``break_simulation``) or :class:`~robo_safe_rl.errors.PhysicsError`.
        """
        if not self._active:
            return self.env.step(action)
        physics, blowup, bad_obs, bad_reward = self.rng.random(4) < self._probs
        if physics:
            self.injected["physics_error"] += 1
            if not self._simulated:
                raise PhysicsError("injected physics error (fire drill, faults.env.physics_error)")
            cast(SimulatedEnv, self.env.unwrapped).break_simulation()
            # The task's own step now fails as a crashed engine would.
            return self.env.step(action)
        if blowup and self._simulated:
            cast(SimulatedEnv, self.env.unwrapped).perturb_state(self.cfg.blowup_scale)
            self.injected["state_blowup"] += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        if bad_obs:
            obs = np.array(obs, dtype=np.float64 if np.asarray(obs).dtype.kind != "f" else None, copy=True)
            obs.flat[int(self.rng.integers(obs.size))] = nonfinite_value(self.cfg.value, self.rng)
            self.injected["obs_nonfinite"] += 1
        if bad_reward:
            reward = nonfinite_value(self.cfg.value, self.rng)
            self.injected["reward_nonfinite"] += 1
        return obs, reward, terminated, truncated, info
