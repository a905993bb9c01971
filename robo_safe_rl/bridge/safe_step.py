"""SafeStep: the gymnasium wrapper between a policy's actions and a physics engine.

Per step, in this order:

0. **Caller's bugs.** An action that is not an array of real numbers of the action space's shape (complex, strings,
   ``None``, a wrong shape) raises ``TypeError`` / ``ValueError`` naming its dtype or shape and the Box; ``step()``
   or ``reset()`` after ``close()`` raises ``gymnasium.error.ClosedEnvironmentError`` (it would otherwise build a
   new simulation behind the caller's back). These are not faults to survive.
1. **Action.** A finite action inside the Box goes through untouched and uncopied (the clean path). Otherwise it is
   sanitised (:func:`~robo_safe_rl.safety.sanitize.sanitize_action`: NaN to 0, +-Inf to the bounds, then clamped)
   into a buffer of the wrapper, the caller's array is left alone, ``actions_sanitised`` counts the components, and
   a non-finite action is recorded as a ``nonfinite_action`` incident. The episode goes on: nothing bad reached the
   engine.
2. **Step.** Physics errors raised by the env are caught: :class:`~robo_safe_rl.errors.PhysicsError`, the types
   the task declares (``physics_error_types``: ``pybullet.error`` for the PyBullet tasks) and those named in
   ``safety.step.physics_errors`` (:mod:`~robo_safe_rl.bridge.env_traits`). Any other exception propagates: a
   ``pybullet.error`` from a bug in an env that declares no PyBullet is a bug, not a physics error.
3. **Checks.** Reward finite and within the task's plausible bound (``reward_bound``, if any), observation finite,
   and, for a task implementing the simulator protocol
   (:func:`~robo_safe_rl.bridge.protocol.is_simulated`), ``check_state()`` (skipped with ``check_state=False``). A
   failed check is classified with the simulator state: ``nonfinite_state``, ``implausible_state``,
   ``nonfinite_obs``, ``nonfinite_reward``, ``implausible_reward``.
4. **Recovery** of a physics error or failed check: the incident is recorded, the simulation is rebuilt when it may
   be poisoned (physics error, non-finite or implausible state: after a NaN reached PyBullet only a new world
   recovers) or else only reset, and the transition is returned as ``terminated`` with reward ``penalty`` and the
   first observation of the new episode. The env is already reset: stepping on continues the new episode, and a
   caller's own ``reset()`` is harmless. ``info["safe_step"]`` says what happened. A reset that fails again
   (exception, non-finite observation, implausible state) is retried with a rebuild, ``max_rebuild_attempts``
   times, then :class:`~robo_safe_rl.errors.RecoveryError` is raised: an env that cannot come back stops the run
   with a clear message rather than looping. So is an env that SafeStep had to end ``max_consecutive_failures``
   steps in a row (it returns NaN forever, say): a broken env stops the run, naming itself and the incident kinds,
   rather than feeding the policy penalties for the rest of it.

A plain gymnasium env (no simulator protocol) gets steps 1 to 3 without the state check and a reset for recovery.

Cost on the clean path: an exact bounds test of the action (on a Python list for short actions), a copy of the
previous observation and the action into preallocated history rings, the finiteness of observation (one dot
product) and reward, the task's ``check_state()``, and every ``state_interval`` steps one ``get_sim_state()``. For
the Ant (160 us per step) that is about 2 us of SafeStep's own, ~1 us of ``check_state`` and 8 us / 16 of
snapshots: ``benchmarks.safe_step`` measures the ratio.

Counters (``safe_step.counters``, plain ints, named as the ``Safety/`` tags): ``actions_sanitised`` (components),
``nonfinite_actions``, ``physics_errors``, ``nonfinite_states``, ``implausible_states``, ``nonfinite_obs``,
``nonfinite_rewards``, ``implausible_rewards`` (events), ``recoveries`` (transitions ended by SafeStep),
``env_rebuilds``, ``incidents_dropped`` (records the recorder refused).

Pickling keeps the counters and the history; a wrapper with an incident recorder refuses (the recorder is the one
writer of its directory).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from robo_safe_rl.bridge.env_traits import physics_error_types, reward_bound
from robo_safe_rl.bridge.faults import wrapper_chain
from robo_safe_rl.bridge.history import HistoryRing
from robo_safe_rl.bridge.incidents import Incident, IncidentRecorder, RateLimitedLog, exception_name
from robo_safe_rl.bridge.protocol import SimulatedEnv, is_simulated
from robo_safe_rl.config.safe_step import SafeStepConfig
from robo_safe_rl.errors import ConfigError, RecoveryError
from robo_safe_rl.safety.finite import all_finite, describe_nonfinite, nonfinite_state_keys
from robo_safe_rl.safety.incident_kinds import COUNTER_OF_KIND, IncidentKind, classify_step, needs_rebuild
from robo_safe_rl.safety.sanitize import SanitizedAction, make_action_test, sanitize_action

logger = logging.getLogger(__name__)
# Shared by all envs of the process: a fault storm across 16 envs logs a handful of lines per kind, then one a minute.
_WARN = RateLimitedLog(logger)

#: dtype kinds of an action SafeStep accepts: bool, signed and unsigned integers, floats (complex, strings, objects
#: and ``None`` are a caller's bug: comparing them with the bounds raises, or means nothing).
_REAL_KINDS = "biuf"

#: Every counter of :attr:`SafeStep.counters`, in the order the adapter logs them.
COUNTER_NAMES: tuple[str, ...] = (
    "actions_sanitised",
    *(name for kind, name in COUNTER_OF_KIND.items() if kind is not IncidentKind.worker_crash),  # the workers count it
    "recoveries",
    "env_rebuilds",
    "incidents_dropped",
)


def sum_counters(envs: Iterable[gym.Env]) -> dict[str, int]:
    """SafeStep's counters summed over envs (each env's wrapper chain is searched for its SafeStep), every name of
    :data:`COUNTER_NAMES` present; the ``Safety/`` scalars and ``summary.json``'s ``safety`` entries of the env side.
    """
    total = dict.fromkeys(COUNTER_NAMES, 0)
    for safe in filter(None, map(find_safe_step, envs)):
        for name, value in safe.counters.items():
            total[name] += value
    return total


def find_safe_step(env: gym.Env) -> SafeStep | None:
    """The SafeStep layer of an env's wrapper chain, if any."""
    return next((layer for layer in wrapper_chain(env) if isinstance(layer, SafeStep)), None)


def _exception_text(err: BaseException) -> str:
    """``"pybullet.error: Not connected to physics server."``: the exception's type, then its message."""
    return f"{exception_name(err)}: {err}"


class SafeStep(gym.Wrapper):
    """Sanitises actions, survives physics-engine errors and blow-ups, and records incidents (module docstring).

    Args:
        env: Any gymnasium env with a Box action space and a Box observation space.
        cfg: Settings; the defaults of :class:`~robo_safe_rl.config.safe_step.SafeStepConfig` when ``None``.
        env_index: Index of this env in its vector, written into incident records.
        recorder: Where incidents are written (shared by the envs of a run); ``None`` counts without writing.

    Raises:
        ConfigError: If the action or observation space is not a Box.
    """

    def __init__(
        self,
        env: gym.Env,
        cfg: SafeStepConfig | None = None,
        *,
        env_index: int = 0,
        recorder: IncidentRecorder | None = None,
    ) -> None:
        super().__init__(env)
        self.cfg = cfg if cfg is not None else SafeStepConfig()
        self.env_index = int(env_index)
        self.recorder = recorder
        self.env_id: str | None = env.spec.id if env.spec is not None else None
        where = f"env {self.env_index} ({self.env_id or type(env.unwrapped).__name__})"
        act_space, obs_space = env.action_space, env.observation_space
        if not isinstance(act_space, gym.spaces.Box):
            raise ConfigError(f"SafeStep requires a Box action space, got {act_space} in {where}")
        if not isinstance(obs_space, gym.spaces.Box):
            raise ConfigError(
                f"SafeStep requires a Box observation space, got {obs_space} in {where}; flatten it first "
                "(gymnasium.wrappers.FlattenObservation)"
            )
        self._where = where
        self._act_shape = act_space.shape
        self._low = np.asarray(act_space.low)
        self._high = np.asarray(act_space.high)
        self._action_ok = make_action_test(self._low, self._high)
        self._clean_buf = np.zeros(act_space.shape, dtype=act_space.dtype)

        unwrapped = env.unwrapped
        self._sim: SimulatedEnv | None = cast(SimulatedEnv, unwrapped) if is_simulated(unwrapped) else None
        self._physics_errors = physics_error_types(unwrapped, self.cfg.physics_errors)
        #: Bound on |reward| of one step (``None``: none, only non-finite rewards are incidents).
        self.reward_bound: float | None = reward_bound(unwrapped, self.cfg.reward_bound)
        # The clean path tests the reward with one chained comparison: NaN fails it, and so does +-Inf, also without
        # a bound (the largest float then).
        self._reward_high = self.reward_bound if self.reward_bound is not None else sys.float_info.max
        self._reward_low = -self._reward_high
        self._failures = 0  # steps in a row that SafeStep ended, and their kinds
        self._failure_kinds: Counter[str] = Counter()
        self._closed = False
        self._check_state = self.cfg.check_state and self._sim is not None
        self.action_names: list[str] | None = list(self._sim.action_names) if self._sim is not None else None

        obs_dtype = obs_space.dtype if np.issubdtype(obs_space.dtype, np.floating) else np.float64
        k = self.cfg.history_len
        self._state_interval = self.cfg.state_interval
        self._history = HistoryRing(
            k, np.zeros((k, *obs_space.shape), dtype=obs_dtype), np.zeros((k, *act_space.shape), act_space.dtype)
        )
        self._last_obs: np.ndarray = np.zeros(obs_space.shape, dtype=obs_dtype)
        self._snapshot: dict[str, np.ndarray] | None = None
        self._snapshot_step = 0
        self._env_step = 0
        self._episode_step = 0

        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)

    @property
    def simulated(self) -> bool:
        """Whether the task implements the simulator protocol (rebuilds, state checks, state records)."""
        return self._sim is not None

    def close(self) -> None:
        """Close the env; a later ``step()`` or ``reset()`` raises instead of silently building a new simulation."""
        self._closed = True
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle support: everything but the action test (a closure), rebuilt from the bounds when unpickled.

        The wrapped env pickles by its own rules (the PyBullet tasks rebuild their world from their constructor
        arguments: reset the copy before stepping it).

        Raises:
            TypeError: If the wrapper has an incident recorder: it is the one writer of its directory, shared by the
                envs of a run; pickle without one (``recorder=None``) and give the copy its own.
        """
        if self.recorder is not None:
            raise TypeError(
                f"{self._where}: a SafeStep with an incident recorder cannot be pickled: the recorder is the one "
                f"writer of {self.recorder.directory}; pickle it with recorder=None and give the copy its own"
            )
        state = self.__dict__.copy()
        del state["_action_ok"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled wrapper (see :meth:`__getstate__`)."""
        self.__dict__.update(state)
        self._action_ok = make_action_test(self._low, self._high)

    # ----------------------------------------------------------------------------------------------- reset
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Reset the env; a reset that fails (physics error, non-finite observation, implausible state) is recorded
        and retried after a rebuild.

        Raises:
            RecoveryError: If the env is still broken after ``max_rebuild_attempts`` rebuilds.
            gymnasium.error.ClosedEnvironmentError: After :meth:`close`.
        """
        if self._closed:
            raise gym.error.ClosedEnvironmentError(f"{self._where}: reset() after close(); make a new env")
        return self._reset_with_recovery(seed=seed, options=options, rebuild=False)

    def _reset_with_recovery(
        self, *, seed: int | None, options: dict[str, Any] | None, rebuild: bool
    ) -> tuple[np.ndarray, dict]:
        # Records of a failed reset carry no history or snapshot: both belonged to the episode that ended.
        self._history.clear()
        self._episode_step = 0
        self._snapshot = None
        last_error: BaseException | None = None
        reason = ""
        for _ in range(1 + self.cfg.max_rebuild_attempts):
            try:
                if rebuild and self._sim is not None:
                    self._sim.rebuild_simulation()
                    self.counters["env_rebuilds"] += 1
                obs, info = self.env.reset(seed=seed, options=options)
                kinds, reason = self._check_reset(obs)
            except self._physics_errors as err:
                last_error = err
                reason = _exception_text(err)
                self._count_and_record(
                    [IncidentKind.physics_error], reason, phase="reset", exception=err, rebuilt=self.simulated
                )
            else:
                if not kinds:
                    self._start_episode(obs)
                    return obs, info
                self._count_and_record(kinds, reason, phase="reset", obs=obs, rebuilt=self.simulated)
            rebuild = True
        raise RecoveryError(
            f"{self._where}: still broken after {self.cfg.max_rebuild_attempts} rebuild-and-reset attempts "
            f"(last: {reason}); the task cannot be recovered, check its reset and rebuild_simulation"
        ) from last_error

    def _check_reset(self, obs: np.ndarray) -> tuple[list[IncidentKind], str]:
        reason = self._sim.check_state() if self._check_state and self._sim is not None else None
        if reason is None and all_finite(obs):
            return [], ""
        return self._classify(obs, 0.0, reason)

    def _start_episode(self, obs: np.ndarray) -> None:
        # History, episode step and snapshot were cleared when the reset began.
        self._last_obs = obs
        self._snapshot_step = 0
        if self._sim is not None:
            try:
                self._snapshot = self._sim.get_sim_state()
            except self._physics_errors:
                self._snapshot = None

    # ------------------------------------------------------------------------------------------------ step
    def step(self, action: np.ndarray) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env with the sanitised action; recover from physics errors and non-finite or implausible results.

        Args:
            action: Shape: the action space's. Never modified.

        Returns:
            The gymnasium step tuple; after an incident: the new episode's first observation, ``penalty``,
            ``terminated=True``, ``truncated=False`` and ``info["safe_step"]``.

        Raises:
            TypeError: If the action is not an array of real numbers (complex, strings, ``None``, objects).
            ValueError: If the action does not have the action space's shape (a caller's bug, not a fault).
            RecoveryError: If the env cannot be brought back (see :meth:`reset`), or ended
                ``max_consecutive_failures`` steps in a row (a broken env).
            gymnasium.error.ClosedEnvironmentError: After :meth:`close`.
        """
        if self._closed:
            raise gym.error.ClosedEnvironmentError(f"{self._where}: step() after close(); make a new env")
        raw = action if type(action) is np.ndarray else self._as_array(action)
        if raw.dtype.kind not in _REAL_KINDS or raw.shape != self._act_shape:
            self._reject_action(action, raw)
        self._env_step += 1
        self._episode_step += 1
        sanitized: SanitizedAction | None = None
        applied = raw
        if not self._action_ok(raw):
            sanitized = sanitize_action(raw, self._low, self._high, out=self._clean_buf)
            applied = sanitized.values
            self.counters["actions_sanitised"] += sanitized.nonfinite + sanitized.clipped
        self._history.push(self._last_obs, applied)
        if sanitized is not None and sanitized.nonfinite:
            self._record_action_incident(raw, sanitized)

        sim = self._sim
        try:
            if sim is not None and self._episode_step - 1 - self._snapshot_step >= self._state_interval:
                self._snapshot = sim.get_sim_state()
                self._snapshot_step = self._episode_step - 1
            obs, reward, terminated, truncated, info = self.env.step(applied)
            reason = sim.check_state() if self._check_state and sim is not None else None
        except self._physics_errors as err:
            return self._recover([IncidentKind.physics_error], _exception_text(err), raw, sanitized, err)
        if reason is None and self._reward_low <= reward <= self._reward_high and all_finite(obs):
            self._last_obs = obs
            if self._failures:
                self._end_failure_streak()
            if sanitized is not None:
                info["safe_step"] = self._info(sanitized, None, reset=False, reason=self._action_reason(raw, sanitized))
            return obs, reward, terminated, truncated, info
        try:
            kinds, why = self._classify(obs, reward, reason)
        except self._physics_errors as err:
            return self._recover([IncidentKind.physics_error], _exception_text(err), raw, sanitized, err)
        if not kinds:  # unreachable while the fast tests are exact; a false alarm must not end an episode
            self._last_obs = obs
            if self._failures:
                self._end_failure_streak()
            return obs, reward, terminated, truncated, info
        return self._recover(kinds, why, raw, sanitized, None, obs=obs, reward=reward)

    @staticmethod
    def _as_array(action: object) -> np.ndarray:
        try:
            return np.asarray(action)
        except (TypeError, ValueError):  # ragged nestings and objects numpy cannot make an array of
            return np.asarray(None)  # dtype object: rejected with the caller's value named

    def _reject_action(self, action: object, raw: np.ndarray) -> None:
        """Raise the error for an action that is not a real array of the action space's shape (a caller's bug)."""
        space = self.action_space
        if raw.dtype.kind not in _REAL_KINDS:
            what = f"{type(action).__name__} {action!r}"[:120]
            raise TypeError(
                f"{self._where}: action of dtype {raw.dtype} ({what}), expected real numbers of shape "
                f"{self._act_shape} for the action space {space}"
            )
        raise ValueError(f"{self._where}: action of shape {raw.shape}, expected the action space's {self._act_shape}")

    def _count_failure(self, kinds: list[IncidentKind], reason: str) -> None:
        """Count one more step in a row that SafeStep ended; stop a broken env (``max_consecutive_failures``).

        Raises:
            RecoveryError: Naming the env, the incident kinds of the streak and the last reason.
        """
        self._failures += 1
        self._failure_kinds.update(kind.value for kind in kinds)
        limit = self.cfg.max_consecutive_failures
        if self._failures < limit:
            return
        seen = ", ".join(f"{kind} x{n}" for kind, n in self._failure_kinds.most_common())
        records = f"; its incidents are in {self.recorder.directory}" if self.recorder is not None else ""
        raise RecoveryError(
            f"{self._where} is broken: {limit} steps in a row ended by SafeStep ({seen}; the last: "
            f"{kinds[0].value}: {reason}); stopping rather than training on its penalties "
            f"(safety.step.max_consecutive_failures={limit}){records}"
        )

    def _end_failure_streak(self) -> None:
        self._failures = 0
        self._failure_kinds.clear()

    def _classify(self, obs: np.ndarray, reward: SupportsFloat, reason: str | None) -> tuple[list[IncidentKind], str]:
        """Kinds and a one-line reason for a result that failed the fast checks (may raise a physics error)."""
        state = self._sim.get_sim_state() if self._sim is not None else None
        bad_keys = nonfinite_state_keys(state) if state is not None else []
        obs_finite = all_finite(obs)
        reward_finite = math.isfinite(float(reward))
        reward_plausible = abs(float(reward)) <= self._reward_high
        kinds = classify_step(
            obs_finite=obs_finite,
            reward_finite=reward_finite,
            state_finite=None if state is None else not bad_keys,
            state_reason=reason,
            reward_plausible=reward_plausible,
        )
        parts = []
        if bad_keys:
            parts.append(f"non-finite simulator state in {', '.join(bad_keys)}")
        if reason is not None:
            parts.append(reason)
        if not obs_finite:
            parts.append(f"observation: {describe_nonfinite(obs)}")
        if not reward_finite:
            parts.append(f"reward {float(reward)}")
        elif not reward_plausible:
            parts.append(f"reward {float(reward):.6g} beyond the plausible bound +-{self._reward_high:g}")
        return kinds, "; ".join(parts)

    def _recover(
        self,
        kinds: list[IncidentKind],
        reason: str,
        raw: np.ndarray,
        sanitized: SanitizedAction | None,
        exception: BaseException | None,
        *,
        obs: np.ndarray | None = None,
        reward: SupportsFloat | None = None,
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        rebuild = self._sim is not None and needs_rebuild(kinds)
        applied = raw if sanitized is None else sanitized.values
        self._count_and_record(
            kinds,
            reason,
            phase="step",
            exception=exception,
            raw=raw,
            applied=applied,
            sanitized=sanitized,
            obs=obs,
            reward=reward,
            terminated=True,
            rebuilt=rebuild,
        )
        self.counters["recoveries"] += 1
        self._count_failure(kinds, reason)
        new_obs, info = self._reset_with_recovery(seed=None, options=None, rebuild=rebuild)
        info = dict(info)
        info["safe_step"] = self._info(sanitized, kinds, reset=True, reason=reason, rebuilt=rebuild)
        return new_obs, float(self.cfg.penalty), True, False, info

    def _info(
        self,
        sanitized: SanitizedAction | None,
        kinds: list[IncidentKind] | None,
        *,
        reset: bool,
        reason: str = "",
        rebuilt: bool = False,
    ) -> dict[str, Any]:
        if kinds is None and sanitized is not None and sanitized.nonfinite:
            kinds = [IncidentKind.nonfinite_action]
        return {
            "incident": kinds[0].value if kinds else None,
            "kinds": [k.value for k in kinds or []],
            "reason": reason,
            "actions_sanitised": 0 if sanitized is None else sanitized.nonfinite + sanitized.clipped,
            "reset": reset,
            "rebuilt": rebuilt,
        }

    @staticmethod
    def _action_reason(raw: np.ndarray, sanitized: SanitizedAction) -> str:
        if sanitized.nonfinite:
            return f"action: {describe_nonfinite(raw)}"
        return f"action: {sanitized.clipped} components outside the bounds, clamped"

    # ------------------------------------------------------------------------------------------- incidents
    def _record_action_incident(self, raw: np.ndarray, sanitized: SanitizedAction) -> None:
        state, age = self._snapshot, self._episode_step - 1 - self._snapshot_step
        if self._sim is not None:
            # The state before this step is still legal: record it exactly.
            with contextlib.suppress(self._physics_errors):
                state, age = self._sim.get_sim_state(), 0
        self._count_and_record(
            [IncidentKind.nonfinite_action],
            self._action_reason(raw, sanitized),
            phase="step",
            raw=raw,
            applied=sanitized.values,
            sanitized=sanitized,
            state=(state, age),
        )

    def _count_and_record(
        self,
        kinds: list[IncidentKind],
        reason: str,
        *,
        phase: str,
        exception: BaseException | None = None,
        raw: np.ndarray | None = None,
        applied: np.ndarray | None = None,
        sanitized: SanitizedAction | None = None,
        obs: np.ndarray | None = None,
        reward: SupportsFloat | None = None,
        terminated: bool = False,
        rebuilt: bool = False,
        state: tuple[dict[str, np.ndarray] | None, int] | None = None,
    ) -> None:
        for kind in kinds:
            self.counters[COUNTER_OF_KIND[kind]] += 1
        if phase == "reset":
            what = "retrying the reset" + (" after a rebuild" if rebuilt else "")
        else:
            what = "rebuilt the simulation and reset" if rebuilt else ("reset" if terminated else "")
        _WARN.warning(
            kinds[0].value,
            "%s: %s at env step %d (%s)%s",
            self._where,
            "+".join(k.value for k in kinds),
            self._env_step,
            reason,
            f"; {what}" if what else "",
        )
        if self.recorder is None:
            return
        snapshot, age = state if state is not None else (self._snapshot, self._episode_step - 1 - self._snapshot_step)
        history_obs, history_act = self._history.read()
        incident = Incident(
            kind=kinds[0],
            kinds=list(kinds),
            env_index=self.env_index,
            reason=reason,
            env_id=self.env_id,
            phase=phase,
            exception=exception,
            env_step=self._env_step,
            episode_step=self._episode_step,
            terminated=terminated,
            rebuilt=rebuilt,
            penalty=float(self.cfg.penalty) if terminated else None,
            simulated=self._sim is not None,
            action_names=self.action_names,
            action_low=self._low,
            action_high=self._high,
            raw_action=None if raw is None else np.array(raw, copy=True),
            action=None if applied is None else np.array(applied, copy=True),
            nonfinite_action_elements=0 if sanitized is None else sanitized.nonfinite,
            clipped_action_elements=0 if sanitized is None else sanitized.clipped,
            reward=None if reward is None else float(reward),
            obs=None if obs is None else np.array(obs, copy=True),
            sim_state=snapshot,
            sim_state_age=max(age, 0) if snapshot is not None else None,
            history_obs=history_obs,
            history_actions=history_act,
        )
        if not self.recorder.record(incident):
            self.counters["incidents_dropped"] += 1
