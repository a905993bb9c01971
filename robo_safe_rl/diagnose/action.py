"""What was wrong with an action, per component, and whether the observation the policy acted on was finite.

Pure functions over a record's arrays; nothing here steps an env.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from robo_safe_rl.safety.finite import json_fields, json_floats


@dataclass(frozen=True)
class ComponentIssue:
    """One action component that was non-finite or outside its bounds.

    Attributes:
        index: Position in the action.
        name: The task's name for it (a joint name), or ``a[<index>]``.
        value: The raw value.
        low: Its lower bound (``None`` when the record has no bounds).
        high: Its upper bound.
        problem: ``"nan"``, ``"+inf"``, ``"-inf"``, ``"above"`` or ``"below"``.
        excess: For ``above``/``below``, how far outside the bounds; else ``None``.
    """

    index: int
    name: str
    value: float
    low: float | None
    high: float | None
    problem: str
    excess: float | None = None

    def describe(self) -> str:
        """``"hip_1 = nan"``, ``"hip_1 = 1e+10 (above 1 by 1e+10)"``."""
        if self.excess is None:
            return f"{self.name} = {self.value}"
        bound = self.high if self.problem == "above" else self.low
        return f"{self.name} = {self.value:.4g} ({self.problem} {bound:g} by {self.excess:.4g})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (non-finite numbers as ``"nan"``, ``"inf"``, ``"-inf"``)."""
        return asdict(self, dict_factory=json_fields)


@dataclass(frozen=True)
class ActionFinding:
    """An action checked component by component, with the observation that went into the policy.

    Attributes:
        raw: The action as the policy sent it, shape (A,); ``None`` when the record holds no action.
        applied: The action that reached the env (sanitised), shape (A,); ``None`` when unknown.
        names: One name per component.
        low: Lower bounds, shape (A,); ``None`` when unknown.
        high: Upper bounds, shape (A,); ``None`` when unknown.
        issues: The non-finite and out-of-range components, in index order.
        obs_in_finite: Whether the observation the policy acted on was finite; ``None`` when not recorded.
        obs_in_nonfinite: Where that observation was non-finite (``obs[3]``, ``policy[3]`` for a group).
    """

    raw: np.ndarray | None
    applied: np.ndarray | None = None
    names: list[str] = field(default_factory=list)
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    issues: list[ComponentIssue] = field(default_factory=list)
    obs_in_finite: bool | None = None
    obs_in_nonfinite: list[str] = field(default_factory=list)

    @property
    def nonfinite(self) -> list[ComponentIssue]:
        """The NaN and Inf components."""
        return [i for i in self.issues if i.excess is None]

    @property
    def out_of_range(self) -> list[ComponentIssue]:
        """The finite components outside the bounds."""
        return [i for i in self.issues if i.excess is not None]

    @property
    def max_excess(self) -> float | None:
        """The largest distance of a finite component outside its bounds; ``None`` when none is outside."""
        return max((i.excess for i in self.out_of_range if i.excess is not None), default=None)

    def summary(self, max_items: int = 4) -> str:
        """One line: ``"2 of 8 components non-finite: hip_1 = nan, ankle_4 = inf"`` or ``"within limits"``."""
        if self.raw is None:
            return "no action recorded"
        if not self.issues:
            return "finite and within limits"
        parts = []
        for label, issues in (("non-finite", self.nonfinite), ("out of range", self.out_of_range)):
            if issues:
                shown = ", ".join(i.describe() for i in issues[:max_items])
                more = f", ... ({len(issues) - max_items} more)" if len(issues) > max_items else ""
                parts.append(f"{len(issues)} of {len(self.raw)} components {label}: {shown}{more}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (schema in :mod:`robo_safe_rl.diagnose.report`)."""
        return {
            "names": self.names,
            "raw": json_floats(self.raw),
            "applied": json_floats(self.applied),
            "low": json_floats(self.low),
            "high": json_floats(self.high),
            "nonfinite": len(self.nonfinite),
            "out_of_range": len(self.out_of_range),
            "max_excess": self.max_excess,
            "components": [i.to_dict() for i in self.issues],
            "obs_in_finite": self.obs_in_finite,
            "obs_in_nonfinite": self.obs_in_nonfinite,
        }


def component_issues(
    raw: np.ndarray, low: np.ndarray | None, high: np.ndarray | None, names: list[str]
) -> list[ComponentIssue]:
    """Check each component of ``raw`` against finiteness and ``[low, high]``.

    Args:
        raw: The action. Shape: (A,).
        low: Lower bounds, shape (A,), or ``None`` (only finiteness is checked).
        high: Upper bounds, shape (A,), or ``None``.
        names: One name per component.

    Returns:
        The offending components in index order.
    """
    issues: list[ComponentIssue] = []
    lows = [None] * len(raw) if low is None else [float(v) for v in low]
    highs = [None] * len(raw) if high is None else [float(v) for v in high]
    for i, value in enumerate(float(v) for v in raw):
        lo, hi = lows[i], highs[i]
        if math.isnan(value):
            issues.append(ComponentIssue(i, names[i], value, lo, hi, "nan"))
        elif math.isinf(value):
            issues.append(ComponentIssue(i, names[i], value, lo, hi, "+inf" if value > 0 else "-inf"))
        elif hi is not None and value > hi:
            issues.append(ComponentIssue(i, names[i], value, lo, hi, "above", value - hi))
        elif lo is not None and value < lo:
            issues.append(ComponentIssue(i, names[i], value, lo, hi, "below", lo - value))
    return issues


def action_names(record: dict[str, Any], size: int) -> list[str]:
    """The record's ``action_names`` when it has one per component, else ``a[0]``, ``a[1]``, ..."""
    names = record.get("action_names")
    if isinstance(names, list) and len(names) == size:
        return [str(n) for n in names]
    return [f"a[{i}]" for i in range(size)]


def _array(arrays: dict[str, np.ndarray], record: dict[str, Any], key: str) -> np.ndarray | None:
    """An action-sized array from the npz, else from the JSON line (where non-finite values are strings)."""
    if key in arrays:
        return np.asarray(arrays[key], dtype=np.float64).reshape(-1)
    value = record.get(key)
    if isinstance(value, list):
        return np.array([float(v) for v in value], dtype=np.float64)
    return None


def observation_in(arrays: dict[str, np.ndarray]) -> tuple[bool | None, list[str]]:
    """Whether the observation the policy acted on (the history's last row) was finite, and where it was not.

    Returns:
        ``(None, [])`` when no history was recorded; else the flag and the non-finite positions (``obs[3]``, or
        ``<group>[3]`` for TensorDict observations).
    """
    rows: dict[str, np.ndarray] = {}
    if "history_obs" in arrays and len(arrays["history_obs"]):
        rows["obs"] = np.asarray(arrays["history_obs"][-1], dtype=np.float64).reshape(-1)
    for key, value in arrays.items():
        if key.startswith("history_obs.") and len(value):
            rows[key.removeprefix("history_obs.")] = np.asarray(value[-1], dtype=np.float64).reshape(-1)
    if not rows:
        return None, []
    bad = [f"{group}[{int(i)}]" for group, row in rows.items() for i in np.flatnonzero(~np.isfinite(row))]
    return not bad, bad


def analyse_action(record: dict[str, Any], arrays: dict[str, np.ndarray]) -> ActionFinding:
    """Check an incident's raw action and the observation that went into the policy.

    Args:
        record: The JSON line.
        arrays: Its npz arrays.

    Returns:
        The finding; ``raw`` is ``None`` for records without an action (faults during a reset).
    """
    raw = _array(arrays, record, "raw_action")
    obs_finite, obs_bad = observation_in(arrays)
    if raw is None:
        return ActionFinding(raw=None, obs_in_finite=obs_finite, obs_in_nonfinite=obs_bad)
    low, high = _array(arrays, record, "action_low"), _array(arrays, record, "action_high")
    if low is not None and low.shape != raw.shape:
        low = None
    if high is not None and high.shape != raw.shape:
        high = None
    names = action_names(record, len(raw))
    return ActionFinding(
        raw=raw,
        applied=_array(arrays, record, "action"),
        names=names,
        low=low,
        high=high,
        issues=component_issues(raw, low, high, names),
        obs_in_finite=obs_finite,
        obs_in_nonfinite=obs_bad,
    )
