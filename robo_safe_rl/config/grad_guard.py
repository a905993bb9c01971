"""Config schemas of the gradient guard (``safety.grad_guard``) and of its fire drill (``faults.grad``).

Both are plain dataclasses: Hydra's ConfigStore registers them (the config root does that), and
:class:`~robo_safe_rl.training.ppo.SafePPO` accepts them, or the plain dicts rsl-rl passes around, through
:meth:`GradGuardCfg.from_value` and :meth:`GradFaultCfg.from_value`, so a bad key or value fails with its name.

YAML forms, with the defaults::

    safety:
      grad_guard:
        mode: skip            # skip | zero | raise | off
        dump_on_raise: true   # mode raise writes grad_guard_dump_it<iter>_mb<k>.pt into the run directory

    faults:
      grad:
        at_updates: []        # global mini-batch indices: iteration * epochs * mini_batches + k
        every: 0              # also every n-th mini-batch (0: off)
        value: .nan           # .nan, .inf or -.inf (Hydra override: faults.grad.value=-inf)
        param: null           # module path, e.g. actor.mlp.0.weight; null: the actor's first trainable parameter
        element: 0            # flat index of the poisoned element in that gradient
        rank: null            # only this global rank injects; null: every rank
        loss_at_updates: []   # a NaN return in the mini-batch, so the real loss turns NaN
        loss_every: 0         # also a NaN loss every n-th mini-batch (0: off)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from robo_safe_rl.errors import ConfigError

# The functional form because ``raise`` is a keyword; OmegaConf matches YAML strings against member names.
GuardMode = Enum("GuardMode", [("skip", "skip"), ("zero", "zero"), ("raise", "raise"), ("off", "off")], module=__name__)
GuardMode.__doc__ = """What the guard does with a mini-batch whose loss or gradients hold a NaN or Inf.

- ``skip`` (default): no update at all; weights, optimizer state and learning rate stay bitwise unchanged, and
  under multi-process training every rank skips the same mini-batch.
- ``zero``: the non-finite gradient elements are set to 0 before the all-reduce and the clip; the step proceeds
  (so Adam's moments and step count still move).
- ``raise``: the step is skipped, then :class:`~robo_safe_rl.errors.NonFiniteError` stops the run with a diagnostic
  and a dump of the mini-batch and the model state.
- ``off``: plain rsl-rl, no guard.
"""

_C = TypeVar("_C")


def _from_value(cls: type[_C], value: _C | dict[str, Any] | None, key: str) -> _C:
    """Build a config dataclass from itself, a plain mapping (rsl-rl's algorithm dict) or ``None`` (defaults)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):  # a dict, or an OmegaConf DictConfig
        raise ConfigError(f"{key}: expected a mapping or {cls.__name__}, got {type(value).__name__} ({value!r})")
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in set(value) - set(known))
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {unknown}; valid keys: {known}")
    return cls(**{str(k): v for k, v in value.items()})


def _every(update: int, every: int) -> bool:
    return every > 0 and (update + 1) % every == 0


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value!r}")


@dataclass
class GradGuardCfg:
    """``safety.grad_guard``: the gradient guard of :class:`~robo_safe_rl.training.ppo.SafePPO`.

    Attributes:
        mode: What happens to a mini-batch with a non-finite loss or gradient (see :class:`GuardMode`). Default
            ``skip``. A YAML string (``"raise"``) is accepted as well.
        dump_on_raise: In ``raise`` mode, write the mini-batch and the model state to
            ``<run dir>/grad_guard_dump_it<iter>_mb<k>.pt`` (loadable with ``weights_only=True``). Default True.
    """

    mode: GuardMode = GuardMode.skip  # type: ignore[attr-defined]
    dump_on_raise: bool = True

    def __post_init__(self) -> None:
        valid = [m.name for m in GuardMode]
        if isinstance(self.mode, str) and self.mode in valid:
            self.mode = GuardMode[self.mode]
        if not isinstance(self.mode, GuardMode):
            raise ConfigError(f"safety.grad_guard.mode: invalid value {self.mode!r}; valid values: {valid}")
        if not isinstance(self.dump_on_raise, bool):
            raise ConfigError(f"safety.grad_guard.dump_on_raise: expected true or false, got {self.dump_on_raise!r}")

    @classmethod
    def from_value(cls, value: GradGuardCfg | dict[str, Any] | None) -> GradGuardCfg:
        """Validate a config given as a dataclass, a plain dict or ``None`` (defaults).

        Raises:
            ConfigError: On an unknown key or a value out of range, naming the key.
        """
        return _from_value(cls, value, "safety.grad_guard")


@dataclass
class GradFaultCfg:
    """``faults.grad``: the gradient fire drill. Off by default (no indices, ``every=0``).

    Faults enter where real ones arise: a gradient element is overwritten right after backward, before the guard (as
    if backward had produced it), and a NaN loss comes from a NaN placed into the mini-batch's returns (a copy; the
    rollout storage is never touched). An update index is the global mini-batch index,
    ``iteration * num_learning_epochs * num_mini_batches + k``, counted from 0; a fault fires once, even when a
    rolled-back iteration runs its index again.

    Attributes:
        at_updates: Update indices at which one gradient element is set to ``value``. Default none.
        every: Also inject at every ``every``-th update (indices ``every - 1``, ``2 * every - 1``, ...); 0 is off.
        value: The injected value: NaN, +Inf or -Inf. Default NaN.
        param: Module path of the poisoned parameter (``actor.mlp.0.weight``, ``critic.mlp.2.bias``); ``None``
            (default) picks the actor's first trainable parameter.
        element: Flat index of the poisoned element in that gradient. Default 0.
        rank: Inject on this global rank only (multi-process drills); ``None`` (default) on every rank.
        loss_at_updates: Update indices at which one return of the mini-batch is set to NaN, so the loss is NaN.
        loss_every: Also a NaN loss at every ``loss_every``-th update (indices ``loss_every - 1``, ...); 0 is off.
    """

    at_updates: list[int] = field(default_factory=list)
    every: int = 0
    value: float = math.nan
    param: str | None = None
    element: int = 0
    rank: int | None = None
    loss_at_updates: list[int] = field(default_factory=list)
    loss_every: int = 0

    def __post_init__(self) -> None:
        for key in ("at_updates", "loss_at_updates"):
            indices = getattr(self, key)
            if isinstance(indices, str) or not isinstance(indices, Sequence):
                raise ConfigError(f"faults.grad.{key}: expected a list of update indices, got {indices!r}")
            for index in indices:
                _check_int(f"faults.grad.{key}", index, 0)
            setattr(self, key, list(indices))
        _check_int("faults.grad.every", self.every, 0)
        _check_int("faults.grad.loss_every", self.loss_every, 0)
        _check_int("faults.grad.element", self.element, 0)
        if self.rank is not None:
            _check_int("faults.grad.rank", self.rank, 0)
        try:
            value = float(self.value)  # also "nan", "inf", "-inf" from a plain dict
        except (TypeError, ValueError):
            value = 0.0
        if isinstance(self.value, bool) or math.isfinite(value):
            raise ConfigError(f"faults.grad.value: expected nan, inf or -inf, got {self.value!r}")
        self.value = value
        if self.param is not None and (not isinstance(self.param, str) or not self.param):
            raise ConfigError(f"faults.grad.param: expected a module path (actor.mlp.0.weight), got {self.param!r}")

    @property
    def enabled(self) -> bool:
        """Whether any gradient or loss fault is scheduled."""
        return bool(self.at_updates or self.every or self.loss_at_updates or self.loss_every)

    def grad_due(self, update: int) -> bool:
        """Whether a gradient fault is scheduled at global mini-batch index ``update``."""
        return update in self.at_updates or _every(update, self.every)

    def loss_due(self, update: int) -> bool:
        """Whether a NaN-loss fault is scheduled at global mini-batch index ``update``."""
        return update in self.loss_at_updates or _every(update, self.loss_every)

    @classmethod
    def from_value(cls, value: GradFaultCfg | dict[str, Any] | None) -> GradFaultCfg:
        """Validate a config given as a dataclass, a plain dict or ``None`` (no faults).

        Raises:
            ConfigError: On an unknown key or a value out of range, naming the key.
        """
        return _from_value(cls, value, "faults.grad")
