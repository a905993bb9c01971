"""SafePPO: rsl-rl's PPO with the gradient guard and the gradient fire drill, without a copy of ``update()``.

rsl-rl builds it from the algorithm dict (``class_name: robo_safe_rl.training.ppo:SafePPO``); the extra keys
``grad_guard`` (``safety.grad_guard``), ``grad_faults`` (``faults.grad``) and ``dump_dir`` reach ``__init__``.
Inside ``PPO.update()`` each mini-batch runs ``zero_grad -> loss.backward() -> [reduce_parameters] -> clip ->
step -> .item() of the loss terms``; SafePPO hooks in at exactly those points:

- the optimizer is a :class:`~robo_safe_rl.safety.grad_guard.GuardedOptimizer`: ``zero_grad`` opens a tap that sees
  ``loss.backward()`` and checks loss and gradients right after it (before the all-reduce and the clip); ``step``
  applies or skips; a skipped step also restores the adaptive learning rate of before the mini-batch;
- ``reduce_parameters`` (multi-process) first agrees on the decision across ranks and never all-reduces poisoned
  gradients;
- during ``update()`` the storage's mini-batch generators pass through SafePPO, which marks mini-batch boundaries,
  injects scheduled faults, and collects each mini-batch's logged loss terms (a tap on ``Tensor.item`` between
  ``step`` and the next mini-batch), so the returned mean losses leave out skipped mini-batches.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from rsl_rl.algorithms import PPO
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.config.grad_guard import GradFaultCfg, GradGuardCfg, GuardMode
from robo_safe_rl.errors import ConfigError, NonFiniteError
from robo_safe_rl.safety.grad_guard import COUNTER_KEYS, CallTap, GradGuard, GuardedOptimizer, sum_over_ranks

logger = logging.getLogger(__name__)

_LOG_FIRST = 10  # events logged one by one; after that every _LOG_EVERY-th, so a sick run does not flood the log
_LOG_EVERY = 100


class _BatchStream:
    """The rollout storage as ``update()`` sees it: reads pass through, mini-batch generators go through ``wrap``."""

    def __init__(self, storage: RolloutStorage, wrap: Callable[[Iterator[Any]], Iterator[Any]]) -> None:
        self._storage = storage
        self._wrap = wrap

    def mini_batch_generator(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return self._wrap(self._storage.mini_batch_generator(*args, **kwargs))

    def recurrent_mini_batch_generator(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return self._wrap(self._storage.recurrent_mini_batch_generator(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def _plain(value: Any) -> Any:
    """Tensors (copied to CPU), numbers, strings and containers of them: what ``weights_only=True`` can load."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, TensorDict):
        return _plain(value.to_dict())
    if isinstance(value, dict):  # int keys kept: an optimizer state dict stays loadable as it is
        return {k if isinstance(k, (int, str)) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


class SafePPO(PPO):
    """PPO whose optimizer never applies a NaN/Inf gradient (``safety.grad_guard``), with a gradient fire drill.

    Besides rsl-rl's PPO arguments it takes ``grad_guard`` (:class:`GradGuardCfg` or dict), ``grad_faults``
    (:class:`GradFaultCfg` or dict) and ``dump_dir`` (the run directory, for ``raise`` mode's dump). With no
    non-finite value a guarded run is bitwise identical to plain PPO with the same seed: the guard only reads.

    For the runner: set :attr:`current_iteration` before each ``update()`` (else it counts updates itself); after
    it, log :meth:`iteration_metrics` under ``Safety/``; at the end put :attr:`safety_counters` and
    :attr:`faults_injected` into summary.json. Under multi-process training every rank must call ``update()``.
    """

    def __init__(
        self,
        actor: torch.nn.Module,
        critic: torch.nn.Module,
        storage: RolloutStorage,
        *args: Any,
        grad_guard: GradGuardCfg | dict[str, Any] | None = None,
        grad_faults: GradFaultCfg | dict[str, Any] | None = None,
        dump_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Args:
        actor: Actor model, as rsl-rl passes it.
        critic: Critic model.
        storage: Rollout storage.
        *args: rsl-rl PPO's positional arguments.
        grad_guard: The guard's config; None means the defaults (mode ``skip``).
        grad_faults: Faults to inject; None means none.
        dump_dir: Where ``raise`` mode writes its dump; None writes none.
        **kwargs: rsl-rl PPO's keyword arguments (``device``, ``multi_gpu_cfg``, ``learning_rate``, ...).

        Raises:
            ConfigError: On a bad guard or fault config (naming the key), or the guard combined with RND.
        """
        self.guard_cfg = GradGuardCfg.from_value(grad_guard)
        self.fault_cfg = GradFaultCfg.from_value(grad_faults)
        if kwargs.get("rnd_cfg") and self.guard_cfg.mode is not GuardMode.off:
            raise ConfigError(
                "safety.grad_guard.mode: the guard does not cover RND's separate optimizer; "
                f"got mode {self.guard_cfg.mode.name} with algorithm.rnd_cfg set. Hint: set mode=off or drop rnd_cfg"
            )
        self.guard: GradGuard | None = None
        super().__init__(actor, critic, storage, *args, **kwargs)
        self.dump_dir = None if dump_dir is None else os.fspath(dump_dir)
        self.current_iteration = 0
        """Iteration number used for fault schedules and messages; the runner may set it before ``update()``."""
        self.safety_counters: dict[str, int] = dict.fromkeys(COUNTER_KEYS, 0)
        """Cumulative event counts over all ranks (for summary.json)."""
        self.faults_injected: dict[str, int] = {}
        """Cumulative injected-fault counts over all ranks, by kind, only kinds that occurred (for summary.json)."""
        self._metrics: dict[str, float] = {}
        named = [("actor." + n, p) for n, p in self._raw_actor.named_parameters()]
        named += [("critic." + n, p) for n, p in self._raw_critic.named_parameters()]
        if self.guard_cfg.mode is not GuardMode.off:
            mode = self.guard_cfg.mode
            self.guard = GradGuard(named, mode, world_size=self.gpu_world_size, keep_grads=mode is GuardMode["raise"])
            self.optimizer = self.optimizer  # the setter wraps it
        self._item_tap = CallTap(torch.Tensor.item, lambda _args, result: self._terms.append(float(result)))
        self._grad_fault: tuple[torch.nn.Parameter, tuple[int, ...]] | None = None
        if self.fault_cfg.enabled:
            self._grad_fault = self._resolve_fault_target(dict(named))
            self._grad_fault[0].register_post_accumulate_grad_hook(self._inject_grad)
        self._injected = [0, 0]  # this update's [gradient, loss] injections on this rank
        self._grad_armed = False
        self._in_update = False
        self._mb_open = False
        self._terms: list[float] = []
        self._records: list[tuple[bool, list[float]]] = []  # (skipped, loss terms) per mini-batch of this update
        self._raise_pending = False
        self._mb, self._update_index, self._batch, self._lr_before = -1, -1, None, self.learning_rate
        self._events = 0
        self._capture_ok = True
        self._warned_late = False

    # The setter keeps the guard in front of any optimizer assigned later (PPO.__init__, a runner's rollback).
    @property
    def optimizer(self) -> Any:
        """The optimizer; a :class:`GuardedOptimizer` around the real one when the guard is on."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        if self.guard is not None and not isinstance(optimizer, GuardedOptimizer):
            optimizer = GuardedOptimizer(optimizer, self.guard, after_step=self._after_step)
        self._optimizer = optimizer

    def iteration_metrics(self) -> dict[str, float]:
        """Metrics of the last ``update()`` (tag names without the ``Safety/`` prefix), already on the host.

        Keys: ``grad_nonfinite_steps`` (mini-batches with a NaN/Inf loss or gradient on any rank),
        ``grad_steps_skipped``, ``grad_steps_zeroed``, ``grad_nonfinite_elements`` (summed over ranks),
        ``loss_nonfinite``, ``grad_norm_preclip`` / ``grad_norm_preclip_max`` (mean / max over applied steps of the
        actor+critic gradient norm that clipping saw; absent when no step was applied) and, during a drill,
        ``faults_grad_nonfinite`` / ``faults_loss_nonfinite``. Empty with mode ``off`` and no drill.
        """
        return dict(self._metrics)

    def update(self) -> dict[str, float]:
        """One PPO update, guarded. Returns rsl-rl's mean losses, over the mini-batches that were applied.

        When no mini-batch was skipped the dict is exactly rsl-rl's. When all were, the loss keys are left out
        (nothing was learned; a 0 or a NaN would mislead).

        Raises:
            NonFiniteError: In ``raise`` mode, at the first mini-batch with a non-finite loss or gradient.
        """
        if self.guard is None and self._grad_fault is None:
            loss_dict = super().update()
            self.current_iteration += 1
            return loss_dict
        storage, self.storage = self.storage, _BatchStream(self.storage, self._guarded_batches)  # type: ignore[assignment]
        self._records, self._injected, self._in_update = [], [0, 0], True
        if self.guard is not None:
            self.guard.watch_backward = True
        try:
            loss_dict = super().update()
        finally:
            self.storage = storage
            self._in_update = False
            self._item_tap.close()
            if self.guard is not None:
                self.guard.watch_backward = False
                self.guard.backward_tap.close()
        self._end_update()
        self.current_iteration += 1
        return self._mean_losses(loss_dict)

    def reduce_parameters(self) -> None:
        """All-reduce gradients, after all ranks agreed that no rank holds a NaN/Inf (else nothing is reduced)."""
        if self.guard is not None and not self.guard.agree():
            return  # every rank skips this step; poisoned gradients never enter the all-reduce
        super().reduce_parameters()
        if self.guard is not None:
            self.guard.measure_norm()

    # ---- mini-batch boundaries ---------------------------------------------------------------------------------
    def _guarded_batches(self, batches: Iterator[Any]) -> Iterator[Any]:
        per_update = self.num_learning_epochs * self.num_mini_batches
        for k, batch in enumerate(batches):
            self._end_minibatch()
            update = self.current_iteration * per_update + k
            self._mb, self._update_index, self._batch = k, update, batch
            self._lr_before, self._terms, self._mb_open = self.learning_rate, [], True
            if self._grad_fault is not None and self._rank_injects():
                self._grad_armed = self.fault_cfg.grad_due(update)
                if self.fault_cfg.loss_due(update):
                    # A NaN return makes the value loss, hence the loss, NaN through rsl-rl's own code. The batch
                    # holds a copy (or a view, for recurrent batches): clone before writing.
                    batch.returns = batch.returns.clone()
                    batch.returns.view(-1)[0] = math.nan
                    self._injected[1] += 1
            yield batch
        self._end_minibatch()

    def _after_step(self, applied: bool) -> None:
        guard = self.guard
        if not self._in_update or guard is None:
            return
        if not applied:
            # rsl-rl adapted the learning rate from this mini-batch's KL before backward; a skipped mini-batch
            # leaves everything as it was, so the rate goes back too.
            self.learning_rate = self._lr_before
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr_before
        if guard.checked_late and not self._warned_late:
            self._warned_late = True
            logger.warning("grad guard: loss.backward() was not seen; gradients are checked in step(), after clipping")
        if guard.last_nonfinite:
            self._events += 1
            self._raise_pending = guard.mode is GuardMode["raise"]
            if not self._raise_pending and (self._events <= _LOG_FIRST or self._events % _LOG_EVERY == 0):
                logger.warning("grad guard: %s; %s", self._describe(), "skipped" if guard.last_skipped else "zeroed")
        self._item_tap.open()

    def _end_minibatch(self) -> None:
        if not self._mb_open:
            return
        self._mb_open = False
        self._item_tap.close()
        self._records.append((self.guard is not None and self.guard.last_skipped, self._terms))
        if self._raise_pending:
            self._raise_nonfinite()

    # ---- faults ------------------------------------------------------------------------------------------------
    def _rank_injects(self) -> bool:
        return self.fault_cfg.rank is None or self.fault_cfg.rank == self.gpu_global_rank

    def _resolve_fault_target(self, named: dict[str, torch.nn.Parameter]) -> tuple[torch.nn.Parameter, tuple[int, ...]]:
        trainable = [n for n, p in named.items() if p.requires_grad]
        name = self.fault_cfg.param or next((n for n in trainable if n.startswith("actor.")), None)
        if name not in trainable:
            raise ConfigError(f"faults.grad.param: unknown or frozen parameter {name!r}; valid: {trainable}")
        param = named[name]
        if self.fault_cfg.element >= param.numel():
            raise ConfigError(
                f"faults.grad.element: {self.fault_cfg.element} is out of range for {name} ({param.numel()} elements)"
            )
        return param, tuple(int(i) for i in np.unravel_index(self.fault_cfg.element, tuple(param.shape)))

    def _inject_grad(self, param: torch.Tensor) -> None:
        # Runs during backward, like any gradient hook, so the guard meets the value where a real one would arise.
        if self._grad_armed and param.grad is not None and self._grad_fault is not None:
            self._grad_armed = False
            param.grad[self._grad_fault[1]] = self.fault_cfg.value
            self._injected[0] += 1

    # ---- accounting --------------------------------------------------------------------------------------------
    def _end_update(self) -> None:
        if self.guard is not None:
            metrics, injected = self.guard.end_iteration(self._injected)
            self.safety_counters = dict(self.guard.totals)
        else:
            metrics = {}
            injected = self._injected
            if self.gpu_world_size > 1:
                injected = [int(v) for v in sum_over_ranks(self._injected, self.device)]
        for key, count in zip(("grad_nonfinite", "loss_nonfinite"), injected, strict=True):
            if count:
                self.faults_injected[key] = self.faults_injected.get(key, 0) + count
            if self._grad_fault is not None:
                metrics[f"faults_{key}"] = count
        self._metrics = metrics

    def _mean_losses(self, loss_dict: dict[str, float]) -> dict[str, float]:
        keys = self._loss_keys()
        records = self._records
        if self.guard is None or not self._capture_ok:
            return loss_dict
        # The captured terms of the applied mini-batches, summed in rsl-rl's order: on a clean update the means equal
        # rsl-rl's bitwise, which checks that the capture still matches rsl-rl's update().
        means = [sum(col) / len(col) for col in zip(*(terms for skipped, terms in records if not skipped), strict=True)]
        clean = not any(skipped for skipped, _ in records)
        if any(len(terms) != len(keys) for _, terms in records) or (
            clean and any(loss_dict.get(k) != m for k, m in zip(keys, means, strict=True))
        ):
            self._capture_ok = False
            logger.warning("grad guard: loss terms not captured as expected; logged means include skipped mini-batches")
            return loss_dict
        if clean:
            return loss_dict
        result = {k: v for k, v in loss_dict.items() if k not in keys}
        result.update(zip(keys, means, strict=False))  # keys without an applied mini-batch are left out
        return result

    def _loss_keys(self) -> list[str]:
        """rsl-rl's loss-dict keys in the order update() calls .item() on them (RND is refused with the guard)."""
        return ["value", "surrogate", "entropy"] + (["symmetry"] if self.symmetry else [])

    # ---- raise mode --------------------------------------------------------------------------------------------
    def _describe(self) -> str:
        guard = self.guard
        event = guard.last_event if guard is not None else None
        where = f"iteration {self.current_iteration}, mini-batch {self._mb} (update {self._update_index})"
        if self.gpu_world_size > 1:
            where += f", rank {self.gpu_global_rank}"
        if event is None:
            return f"non-finite loss or gradient on another rank in {where}"
        loss = "unknown" if event.loss is None else f"{event.loss:.6g}"
        what = f"{event.nonfinite_elements} non-finite gradient element(s), first in {event.first_param}"
        return f"{what}, loss {loss}, in {where}"

    def _raise_nonfinite(self) -> None:
        self._raise_pending = False
        self._end_update()  # all ranks raise at this same point, so the collective in it is safe
        keys = self._loss_keys()
        terms = ", ".join(f"{k} {v:.6g}" for k, v in zip(keys, self._terms, strict=False))
        event = self.guard.last_event if self.guard is not None else None
        dump = self._write_dump(event, dict(zip(keys, self._terms, strict=False))) if event is not None else None
        raise NonFiniteError(
            f"grad guard (mode raise): {self._describe()}; loss terms: {terms or 'not captured'}. "
            "The step was not applied: weights and optimizer state are those before this mini-batch. "
            + (f"Dump: {dump} (torch.load(path, weights_only=True)). " if dump else "No dump written. ")
            + "Hint: safety.grad_guard.mode=skip contains such mini-batches and keeps training."
        )

    def _write_dump(self, event: Any, terms: dict[str, float]) -> str | None:
        if not self.guard_cfg.dump_on_raise or self.dump_dir is None:
            return None
        suffix = f"_rank{self.gpu_global_rank}" if self.gpu_world_size > 1 else ""
        path = os.path.join(self.dump_dir, f"grad_guard_dump_it{self.current_iteration}_mb{self._mb}{suffix}.pt")
        payload = {
            "iteration": self.current_iteration,
            "mini_batch": self._mb,
            "update": self._update_index,
            "rank": self.gpu_global_rank,
            "first_param": event.first_param,
            "nonfinite_elements": event.nonfinite_elements,
            "loss": event.loss,
            "loss_terms": terms,
            "batch": _plain(vars(self._batch)),
            "nonfinite_grads": _plain(event.grads or {}),
            "actor_state_dict": _plain(self._raw_actor.state_dict()),
            "critic_state_dict": _plain(self._raw_critic.state_dict()),
            "optimizer_state_dict": _plain(self.optimizer.state_dict()),
        }
        os.makedirs(self.dump_dir, exist_ok=True)
        tmp = path + ".tmp"
        torch.save(payload, tmp)
        os.replace(tmp, path)
        return path
