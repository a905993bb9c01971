"""The policy-side fire drill (``faults.policy``): corrupt one actor weight where real corruption shows up.

Each scheduled iteration fires once, even when recovery rolls back and repeats that iteration index, so every
injected fault is matched by exactly one recovery event in ``summary.json``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from robo_safe_rl.config.recovery import PolicyFaultConfig
from robo_safe_rl.training.recovery import models


def poison_actor(alg: Any) -> str:
    """Set the first element of the actor's first weight matrix (``mlp.0.weight`` for rsl-rl's MLP) to NaN, in
    place, and return the parameter's name."""
    actor, _ = models(alg)
    named = list(actor.named_parameters())
    name, param = next(((n, p) for n, p in named if n.endswith("weight")), named[0])
    with torch.no_grad():
        param.view(-1)[0] = float("nan")
    return name


class PolicyFaults:
    """Fires the scheduled policy faults and counts them (``injected``)."""

    def __init__(self, cfg: PolicyFaultConfig) -> None:
        self.cfg = cfg
        # One key per scheduled kind, zero until it fires: the same keys on every rank, so counts can be summed.
        self.injected: dict[str, int] = {}
        if cfg.nonfinite_weights_before_rollout:
            self.injected["policy_weights_before_rollout"] = 0
        if cfg.nonfinite_weights_after_update:
            self.injected["policy_weights_after_update"] = 0
        self._fired: set[tuple[str, int]] = set()

    def _fire(self, kind: str, schedule: list[int], alg: Any, iteration: int) -> None:
        if self.cfg.rank is not None and self.cfg.rank != int(os.environ.get("RANK", "0")):
            return
        if iteration in schedule and (kind, iteration) not in self._fired:
            self._fired.add((kind, iteration))
            poison_actor(alg)
            self.injected[kind] = self.injected.get(kind, 0) + 1

    def before_rollout(self, alg: Any, iteration: int) -> None:
        """Poison the actor before the rollout of ``iteration`` if scheduled (the action fuse must catch it)."""
        self._fire("policy_weights_before_rollout", self.cfg.nonfinite_weights_before_rollout, alg, iteration)

    def after_update(self, alg: Any, iteration: int) -> None:
        """Poison the actor after the update of ``iteration`` if scheduled (the post-update check must catch it)."""
        self._fire("policy_weights_after_update", self.cfg.nonfinite_weights_after_update, alg, iteration)
