"""A tensor-level guard around any rsl-rl ``VecEnv`` (an Isaac Lab user's env, whose envs cannot be reset one by one).

:class:`GuardedVecEnv` cannot rebuild or reset a single env, so it does what is possible at the tensor level, on the
env's device (CPU or CUDA):

- **actions**: non-finite components are replaced (NaN by 0, +-Inf by the bound of their sign; 0 for both when no
  bounds are configured), then clamped to the bounds; the env never sees a NaN;
- **observations**: a row (env) with any non-finite element in any group is set to zeros in every group;
- **rewards**: a non-finite reward is replaced by ``penalty``.

Dones and extras pass through untouched: the env's own terminations (height, orientation) must end a blown-up
episode; a zeroed observation only keeps the NaN out of the policy and its normaliser meanwhile.

Per step the clean path costs a few elementwise kernels and exactly one host synchronisation (the counts of bad
action components and rows are stacked into one tensor and read together). Only when something was bad are the
rows located and copied to the host, counted and recorded: one incident record per bad row (``source`` =
``"tensor_guard"``, ``env_index`` = the row, ``kinds`` = what was wrong with it), at most ``max_records_per_step``
per step (the rest counted in ``incidents_dropped``), with the last ``history_len`` (observation, action) pairs of
the row (they may span an episode boundary: the guard does not see the env's resets).

Counters (``guard.counters``): ``actions_sanitised`` (components changed), ``nonfinite_actions``,
``nonfinite_obs``, ``nonfinite_rewards`` (rows), ``incidents_dropped``. Trained through
:class:`~robo_safe_rl.training.runner.SafeRunner`, they reach ``Safety/*`` and ``summary.json`` like SafeStep's
(:meth:`GuardedVecEnv.safety_counters`), and incident records carry the training iteration (README, "Any rsl-rl
VecEnv").
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from robo_safe_rl.bridge.history import HistoryRing
from robo_safe_rl.bridge.incidents import Incident, IncidentRecorder, RateLimitedLog
from robo_safe_rl.config.safe_step import TensorGuardConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.safety.finite import all_finite, describe_nonfinite
from robo_safe_rl.safety.incident_kinds import COUNTER_OF_KIND, IncidentKind

logger = logging.getLogger(__name__)

#: Every counter of :attr:`GuardedVecEnv.counters`.
GUARD_COUNTER_NAMES: tuple[str, ...] = (
    "actions_sanitised",
    "nonfinite_actions",
    "nonfinite_obs",
    "nonfinite_rewards",
    "incidents_dropped",
)


def sanitize_action_tensor(
    actions: torch.Tensor, low: torch.Tensor | None, high: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace non-finite components and clamp; no host synchronisation.

    Args:
        actions: Shape: (num_envs, num_actions). Not modified.
        low: Finite lower bounds, shape (num_actions,), or ``None`` (then ``high`` is ``None`` too).
        high: Finite upper bounds, shape (num_actions,).

    Returns:
        The clean actions (new tensor) and the mask of components that changed (non-finite or clamped), both of
        the input's shape.
    """
    finite = torch.isfinite(actions)
    if low is None or high is None:
        clean = torch.where(finite, actions, torch.zeros((), dtype=actions.dtype, device=actions.device))
    else:
        low, high = low.to(actions.dtype), high.to(actions.dtype)
        zero = torch.zeros((), dtype=actions.dtype, device=actions.device).clamp(low, high)
        # NaN compares false both ways, so it takes the zero; +Inf takes high, -Inf low.
        replacement = torch.where(actions > 0, high, torch.where(actions < 0, low, zero))
        clean = torch.where(finite, actions, replacement).clamp(low, high)
    return clean, clean != actions  # NaN != anything, so replaced NaNs count as changed


def _rows_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` (shape (num_envs, ...)) holding any NaN or Inf. Shape: (num_envs,), bool."""
    if not torch.is_floating_point(x):
        return torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    return ~torch.isfinite(x).reshape(x.shape[0], -1).all(dim=1)


def _leaves(obs: TensorDict) -> list[tuple[str, torch.Tensor]]:
    """The observation tensors of a (possibly nested) TensorDict, named ``group`` or ``group.sub``."""
    return [
        (key if isinstance(key, str) else ".".join(key), value)
        for key, value in obs.items(include_nested=True, leaves_only=True)
    ]


def _zero_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x`` (shape (num_envs, ...)) with the rows where ``rows`` is true set to 0 (NaN * 0 is NaN: select)."""
    mask = rows.reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(mask, torch.zeros((), dtype=x.dtype, device=x.device), x)


class GuardedVecEnv(VecEnv):
    """Wraps an rsl-rl ``VecEnv``: sanitises actions, observation rows and rewards, counts and records them.

    Args:
        env: The vectorised env.
        cfg: Guard settings; defaults of :class:`~robo_safe_rl.config.safe_step.TensorGuardConfig` when ``None``.
        recorder: Where incidents are written; ``None`` counts without writing.
        action_low: Per-component lower bounds (num_actions,), overriding ``cfg.action_bound``.
        action_high: Per-component upper bounds (num_actions,), given together with ``action_low``.
        env_id: Task name written into incident records.
        max_records_per_step: Incident records written per step at most; further bad rows are counted as dropped.

    Raises:
        ConfigError: If only one of the bounds is given, a bound has the wrong shape or is not finite, or low > high.
    """

    def __init__(
        self,
        env: VecEnv,
        cfg: TensorGuardConfig | None = None,
        *,
        recorder: IncidentRecorder | None = None,
        action_low: torch.Tensor | np.ndarray | None = None,
        action_high: torch.Tensor | np.ndarray | None = None,
        env_id: str | None = None,
        max_records_per_step: int = 16,
    ) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg = env.cfg  # VecEnv's name for the env's configuration; the guard's own is guard_cfg
        self.guard_cfg = cfg if cfg is not None else TensorGuardConfig()
        self.recorder = recorder
        self.env_id = env_id
        self.max_records_per_step = int(max_records_per_step)
        self.counters: dict[str, int] = dict.fromkeys(GUARD_COUNTER_NAMES, 0)
        self.step_count = 0
        self._warn = RateLimitedLog(logger)
        self._low, self._high = self._resolve_bounds(action_low, action_high)
        self._history = HistoryRing(self.guard_cfg.history_len)  # buffers allocated at the first push
        self._last_obs: TensorDict | None = None

    def _resolve_bounds(
        self, low: torch.Tensor | np.ndarray | None, high: torch.Tensor | np.ndarray | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        n, device = self.env.num_actions, self.env.device
        if (low is None) != (high is None):
            raise ConfigError("GuardedVecEnv needs both action_low and action_high, or neither")
        if low is None:
            bound = self.guard_cfg.action_bound
            if bound is None:
                return None, None
            return (torch.full((n,), -float(bound), device=device), torch.full((n,), float(bound), device=device))
        lo = torch.as_tensor(low, dtype=torch.float32, device=device).reshape(-1)
        hi = torch.as_tensor(high, dtype=torch.float32, device=device).reshape(-1)
        for name, b in (("action_low", lo), ("action_high", hi)):
            if b.shape != (n,) or not bool(torch.isfinite(b).all()):
                raise ConfigError(f"GuardedVecEnv {name} must be {n} finite values (num_actions), got {b.tolist()}")
        if bool((lo > hi).any()):
            raise ConfigError(f"GuardedVecEnv action_low {lo.tolist()} exceeds action_high {hi.tolist()}")
        return lo, hi

    # ---------------------------------------------------------------------------------- VecEnv attributes
    @property
    def episode_length_buf(self) -> torch.Tensor:
        """The env's own buffer (rsl-rl's runner assigns random episode lengths to it at the start of learning)."""
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the guard: forward them (close, render, unwrapped, ...).
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    # ---------------------------------------------------------------------- what SafeRunner asks an env for
    def safety_counters(self) -> dict[str, int]:
        """The guard's counters, plus the wrapped env's own ``safety_counters()`` when it has them (summed by name:
        a value its SafeStep already cleaned never reaches the guard, so no event is counted twice). SafeRunner
        writes them to ``Safety/*`` and ``summary.json``."""
        inner = getattr(self.env, "safety_counters", None)
        counters = dict(inner()) if callable(inner) else {}
        for name, value in self.counters.items():
            counters[name] = counters.get(name, 0) + value
        return counters

    def set_iteration(self, iteration: int) -> None:
        """Write ``iteration`` into later incident records (SafeRunner calls this before each rollout)."""
        if self.recorder is not None:
            self.recorder.set_context(iteration=iteration)
        inner = getattr(self.env, "set_iteration", None)
        if callable(inner):
            inner(iteration)

    # ---------------------------------------------------------------------------------------- the guard
    def get_observations(self) -> TensorDict:
        """The env's observations with non-finite rows zeroed (counted and recorded, phase ``observe``)."""
        obs = self.env.get_observations()
        bad = self._obs_rows(obs)
        if int(bad.sum()):
            obs, _ = self._handle(obs, bad, phase="observe")
        self._last_obs = obs
        return obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Sanitise the actions, step the env, sanitise observation rows and rewards.

        Args:
            actions: Shape: (num_envs, num_actions). Not modified.

        Returns:
            As ``VecEnv.step``: observations (TensorDict), rewards (num_envs,), dones (num_envs,), extras.
        """
        clean, changed = sanitize_action_tensor(actions, self._low, self._high)
        act_bad = ~torch.isfinite(actions).all(dim=1)
        self.step_count += 1
        self._push_history(clean)
        obs, rewards, dones, extras = self.env.step(clean)
        obs_bad = self._obs_rows(obs)
        rew_bad = _rows_nonfinite(rewards.reshape(rewards.shape[0], -1))
        counts = torch.stack([changed.sum(), act_bad.sum(), obs_bad.sum(), rew_bad.sum()]).tolist()  # the one sync
        if counts[0]:
            self.counters["actions_sanitised"] += int(counts[0])
        if counts[1] or counts[2] or counts[3]:
            obs, rewards = self._handle(
                obs, obs_bad, phase="step", actions=actions, clean=clean, act_bad=act_bad, rewards=rewards,
                rew_bad=rew_bad,
            )  # fmt: skip
        self._last_obs = obs
        if self.recorder is not None:  # records of this step carry the env steps before it, as SafeStep's do
            self.recorder.advance(self.num_envs)
        return obs, rewards, dones, extras

    def _obs_rows(self, obs: TensorDict) -> torch.Tensor:
        bad: torch.Tensor | None = None
        for _, value in _leaves(obs):
            rows = _rows_nonfinite(value)
            bad = rows if bad is None else bad | rows
        return bad if bad is not None else torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _push_history(self, clean: torch.Tensor) -> None:
        if not self._history.capacity or self._last_obs is None:
            return
        if self._history.obs is None:
            k, obs = self._history.capacity, self._last_obs
            self._history.obs = obs.unsqueeze(0).expand(k, *obs.batch_size).clone()
            self._history.actions = clean.new_zeros((k, *clean.shape))
        self._history.push(self._last_obs, clean)

    def _handle(
        self,
        obs: TensorDict,
        obs_bad: torch.Tensor,
        *,
        phase: str,
        actions: torch.Tensor | None = None,
        clean: torch.Tensor | None = None,
        act_bad: torch.Tensor | None = None,
        rewards: torch.Tensor | None = None,
        rew_bad: torch.Tensor | None = None,
    ) -> tuple[TensorDict, torch.Tensor | None]:
        """The slow path: count and record the bad rows, sanitise observations and rewards."""
        masks = {
            IncidentKind.nonfinite_action: act_bad,
            IncidentKind.nonfinite_obs: obs_bad,
            IncidentKind.nonfinite_reward: rew_bad,
        }
        rows: dict[int, list[IncidentKind]] = {}
        summary = []
        for kind, mask in masks.items():
            if mask is None:
                continue
            bad_rows = torch.nonzero(mask).reshape(-1).tolist()
            self.counters[COUNTER_OF_KIND[kind]] += len(bad_rows)
            summary.append(f"{kind.value}: {len(bad_rows)}")
            for row in bad_rows:
                rows.setdefault(row, []).append(kind)
        self._warn.warning(
            phase,
            "tensor guard: %d env rows with non-finite values at step %d (%s); sanitised",
            len(rows),
            self.step_count,
            ", ".join(summary),
        )
        for n, (row, kinds) in enumerate(sorted(rows.items())):
            if n >= self.max_records_per_step:
                self.counters["incidents_dropped"] += len(rows) - n
                break
            self._record(row, kinds, phase, obs, actions, clean, rewards)
        if bool(obs_bad.any()):
            obs = obs.apply(lambda x: _zero_rows(x, obs_bad))
        if rewards is not None and rew_bad is not None and bool(rew_bad.any()):
            penalty = torch.as_tensor(self.guard_cfg.penalty, dtype=rewards.dtype, device=rewards.device)
            rewards = torch.where(rew_bad.reshape(rewards.shape), penalty, rewards)
        return obs, rewards

    def _record(
        self,
        row: int,
        kinds: list[IncidentKind],
        phase: str,
        obs: TensorDict,
        actions: torch.Tensor | None,
        clean: torch.Tensor | None,
        rewards: torch.Tensor | None,
    ) -> None:
        if self.recorder is None:
            return
        raw_row = None if actions is None else actions[row].detach().cpu().numpy()
        obs_row = {name: value[row].detach().cpu().numpy() for name, value in _leaves(obs)}
        reasons = []
        if raw_row is not None and IncidentKind.nonfinite_action in kinds:
            reasons.append(f"action: {describe_nonfinite(raw_row)}")
        for key, value in obs_row.items():
            if value.dtype.kind == "f" and not all_finite(value):
                reasons.append(f"observation {key}: {describe_nonfinite(value)}")
        reward = None if rewards is None else float(rewards.reshape(rewards.shape[0], -1)[row, 0])
        if IncidentKind.nonfinite_reward in kinds:
            reasons.append(f"reward {reward}")
        history_obs, history_act = self._history_of(row)
        incident = Incident(
            kind=kinds[0],
            kinds=kinds,
            env_index=row,
            reason="; ".join(reasons),
            source="tensor_guard",
            env_id=self.env_id,
            phase=phase,
            env_step=self.step_count,
            action_low=None if self._low is None else self._low.cpu().numpy(),
            action_high=None if self._high is None else self._high.cpu().numpy(),
            raw_action=raw_row,
            action=None if clean is None else clean[row].detach().cpu().numpy(),
            nonfinite_action_elements=0 if raw_row is None else int((~np.isfinite(raw_row)).sum()),
            reward=reward,
            obs=obs_row,
            history_obs=history_obs,
            history_actions=history_act,
        )
        if not self.recorder.record(incident):
            self.counters["incidents_dropped"] += 1

    def _history_of(self, row: int) -> tuple[dict[str, np.ndarray] | None, np.ndarray | None]:
        obs, actions = self._history.read()
        if obs is None or actions is None:
            return None, None
        return {name: v.cpu().numpy() for name, v in _leaves(obs[:, row])}, actions[:, row].cpu().numpy()
