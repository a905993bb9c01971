"""The gradient fire drill (``faults.grad``): faults enter SafePPO's update where real ones arise.

A NaN return goes into a copy of the mini-batch (recurrent mini-batches are views into the rollout storage), so the
loss turns NaN through the PPO maths; a gradient element is overwritten right after backward, as if backward had
produced it. Both are scheduled by the global mini-batch index ``iteration * epochs * mini_batches + k``. A
rolled-back iteration repeats its indices: a scheduled fault fires once, as the policy drill's do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robo_safe_rl.config.grad_guard import GradFaultCfg
from robo_safe_rl.errors import ConfigError


class GradDrill:
    """Fires the scheduled gradient and loss faults of one rank and counts them.

    Args:
        cfg: ``faults.grad``.
        named_params: The guarded parameters by module path (``actor.mlp.0.weight``), for ``faults.grad.param``.
        rank: This process's global rank (``faults.grad.rank`` picks the one that injects).

    Raises:
        ConfigError: On an unknown or frozen ``param``, or an ``element`` out of its range.
    """

    def __init__(self, cfg: GradFaultCfg, named_params: dict[str, torch.nn.Parameter], rank: int) -> None:
        self.cfg = cfg
        self.injected = [0, 0]
        """This update's ``[gradient, loss]`` injections on this rank (the owner resets it per update)."""
        self._target = _resolve_target(cfg, named_params) if cfg.enabled else None
        self._active = cfg.enabled and (cfg.rank is None or cfg.rank == rank)
        self._index, self._highest, self._fresh = -1, -1, False

    def begin(self, index: int) -> None:
        """Enter the mini-batch of global index ``index``."""
        self._index, self._fresh = index, index > self._highest
        self._highest = max(self._highest, index)

    def poison_returns(self, batch: Any) -> None:
        """Put a NaN into a copy of the mini-batch's returns, if scheduled (before the forward)."""
        if self._due(self.cfg.loss_due):
            batch.returns = batch.returns.clone()
            batch.returns.view(-1)[0] = math.nan
            self.injected[1] += 1

    def poison_grad(self) -> None:
        """Overwrite one gradient element with ``cfg.value``, if scheduled (right after backward)."""
        if self._target is not None and self._due(self.cfg.grad_due):
            param, element = self._target
            param.grad[element] = self.cfg.value  # type: ignore[index]
            self.injected[0] += 1

    def _due(self, due: Callable[[int], bool]) -> bool:
        return self._active and self._fresh and due(self._index)


def _resolve_target(
    cfg: GradFaultCfg, named: dict[str, torch.nn.Parameter]
) -> tuple[torch.nn.Parameter, tuple[int, ...]]:
    trainable = [n for n, p in named.items() if p.requires_grad]
    name = cfg.param or next((n for n in trainable if n.startswith("actor.")), None)
    if name not in trainable:
        raise ConfigError(f"faults.grad.param: unknown or frozen parameter {name!r}; valid: {trainable}")
    param, element = named[name], cfg.element
    if element >= param.numel():
        raise ConfigError(f"faults.grad.element: {element} is out of range for {name} ({param.numel()} elements)")
    return param, tuple(int(i) for i in np.unravel_index(element, tuple(param.shape)))
