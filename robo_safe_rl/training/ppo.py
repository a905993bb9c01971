"""SafePPO: rsl-rl's PPO with the gradient guard and the gradient fire drill, without a copy of ``update()``.

rsl-rl builds it from the algorithm dict (``class_name: robo_safe_rl.training.ppo:SafePPO``); the extra keys
``grad_guard`` (``safety.grad_guard``), ``grad_faults`` (``faults.grad``) and ``dump_dir`` reach ``__init__``.
Inside ``PPO.update()`` each mini-batch runs ``zero_grad -> loss.backward() -> [reduce_parameters] -> clip ->
step -> .item() of the loss terms``; SafePPO hooks in at exactly those points:

- the guard's gradient hooks check the gradients at the end of ``loss.backward()``, before the all-reduce and the
  clip; the optimizer is a :class:`~robo_safe_rl.safety.grad_guard.GuardedOptimizer` whose ``step`` applies or
  skips; a skipped step also puts back the adaptive learning rate of before the mini-batch;
- ``reduce_parameters`` (multi-process) first agrees on the decision across ranks and never all-reduces poisoned
  gradients;
- during ``update()`` the storage's mini-batch generators pass through SafePPO, which marks mini-batch boundaries and
  injects scheduled faults. After a mini-batch with a non-finite value (only then), a tap on ``Tensor.item`` reads
  the loss terms rsl-rl logs, for the message, and hands rsl-rl a 0 instead of each term of a skipped mini-batch and
  of each non-finite term; ``update()`` then rescales each of rsl-rl's means by ``N / (N - terms left out)``, so the
  logged means are over the applied mini-batches and never NaN because of a contained event.

A non-finite loss is caught through its gradients: each of PPO's loss terms back-propagates its NaN/Inf (a NaN
advantage, return, value or log-prob puts a NaN into the gradients of the network it came from), and a loss whose
gradients are finite cannot corrupt the weights. ``loss_nonfinite`` counts the caught mini-batches whose logged loss
terms were not finite.
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
from robo_safe_rl.safety.grad_guard import (
    COUNTER_KEYS,
    CallTap,
    GradEvent,
    GradGuard,
    GuardedOptimizer,
    sum_over_ranks,
)

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

    With no non-finite value a guarded run is bitwise identical to plain PPO with the same seed: the guard only reads.

    For the runner: optionally set :attr:`current_iteration` before each ``update()`` (else it counts updates) and
    :attr:`dump_dir`; after ``update()`` log :meth:`iteration_metrics` under ``Safety/``; at the end put
    :attr:`safety_counters` and :attr:`faults_injected` into summary.json. Under multi-process training every rank
    calls ``update()`` (it holds collectives), and all counters are already summed over ranks.
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
        grad_guard: ``safety.grad_guard``; None means the defaults (mode ``skip``).
        grad_faults: ``faults.grad``; None means no fault.
        dump_dir: Where ``raise`` mode writes its dump (the run directory); None writes none.
        **kwargs: rsl-rl PPO's keyword arguments (``device``, ``multi_gpu_cfg``, ``learning_rate``, ...).

        Raises:
            ConfigError: On a bad guard or fault config (naming the key), or the guard combined with RND.
        """
        self.guard_cfg = GradGuardCfg.from_value(grad_guard)
        self.fault_cfg = GradFaultCfg.from_value(grad_faults)
        mode = self.guard_cfg.mode
        if kwargs.get("rnd_cfg") and mode is not GuardMode.off:
            raise ConfigError(
                f"safety.grad_guard.mode={mode.name} with algorithm.rnd_cfg set: the guard does not cover RND's own "
                "optimizer. Hint: set safety.grad_guard.mode=off or drop rnd_cfg"
            )
        self.guard: GradGuard | None = None
        super().__init__(actor, critic, storage, *args, **kwargs)
        self.dump_dir = None if dump_dir is None else os.fspath(dump_dir)
        self.current_iteration = 0
        """Iteration number for fault schedules and messages; counts updates, or is set by the runner."""
        self.safety_counters: dict[str, int] = dict.fromkeys(COUNTER_KEYS, 0)
        """Cumulative event counts over all ranks (for summary.json)."""
        self.faults_injected: dict[str, int] = {}
        """Cumulative injected faults over all ranks, by kind (``grad_nonfinite``, ``loss_nonfinite``), only kinds
        that occurred (for summary.json)."""
        named = [("actor." + n, p) for n, p in self._raw_actor.named_parameters()]
        named += [("critic." + n, p) for n, p in self._raw_critic.named_parameters()]
        if mode is not GuardMode.off:
            raising = mode is GuardMode["raise"]
            self.guard = GradGuard(named, mode, world_size=self.gpu_world_size, keep_grads=raising)
            self.optimizer = self.optimizer  # the setter wraps it
        self._grad_fault: tuple[torch.nn.Parameter, tuple[int, ...]] | None = None
        if self.fault_cfg.enabled:
            self._grad_fault = self._resolve_fault_target(dict(named))
            self._grad_fault[0].register_post_accumulate_grad_hook(self._inject_grad)
        self._item_tap = CallTap(torch.Tensor.item, self._on_item)
        self._metrics: dict[str, float] = {}
        self._injected = [0, 0]  # this update's [gradient, loss] injections on this rank
        self._grad_armed = self._in_update = self._mb_open = self._zero_items = False
        self._terms: list[float] = []
        self._mb, self._update_index, self._batch, self._lr_before = -1, -1, None, self.learning_rate
        self._left_out: list[int] = []  # per loss key: terms of this update handed to rsl-rl as 0
        self._events = 0
        self._warned: set[str] = set()

    # The setter keeps the guard in front of any optimizer assigned later (PPO.__init__, a runner's rollback).
    @property
    def optimizer(self) -> Any:
        """The optimizer: a :class:`GuardedOptimizer` around rsl-rl's when the guard is on."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        if self.guard is not None and not isinstance(optimizer, GuardedOptimizer):
            optimizer = GuardedOptimizer(optimizer, self.guard, after_step=self._after_step)
        self._optimizer = optimizer

    def iteration_metrics(self) -> dict[str, float]:
        """Metrics of the last ``update()``, summed over ranks (tag names without ``Safety/``), no sync needed.

        Keys: ``grad_nonfinite_steps`` (mini-batches with a NaN/Inf gradient on any rank), ``grad_steps_skipped``,
        ``grad_steps_zeroed``, ``grad_nonfinite_elements``, ``loss_nonfinite``; ``grad_norm_preclip`` and
        ``grad_norm_preclip_max`` (mean and max over applied steps of the actor+critic gradient norm that clipping
        saw; absent when no step was applied); and during a drill ``faults_grad_nonfinite`` and
        ``faults_loss_nonfinite``. Empty with mode ``off`` and no drill.
        """
        return dict(self._metrics)

    def update(self) -> dict[str, float]:
        """One PPO update, guarded: rsl-rl's mean losses, over the mini-batches that were applied.

        Without a non-finite event the dict is exactly rsl-rl's. Each mean leaves out the skipped mini-batches and
        any non-finite term; a key with nothing left is dropped (a 0 or a NaN would mislead).

        Raises:
            NonFiniteError: In ``raise`` mode, at the first mini-batch with a non-finite gradient on any rank.
        """
        if self.guard is None and self._grad_fault is None:
            loss_dict = super().update()
            self.current_iteration += 1
            return loss_dict
        storage = self.storage
        self.storage = _BatchStream(storage, self._guarded_batches)  # type: ignore[assignment]  # read-only view
        self._injected, self._left_out, self._in_update = [0, 0], [0] * len(self._loss_keys()), True
        if self.guard is not None:
            self.guard.watch_backward = True
        try:
            loss_dict = super().update()
        finally:
            self.storage, self._batch = storage, None
            self._in_update = False
            self._item_tap.close()
            if self.guard is not None:
                self.guard.watch_backward = False
        self._end_update()
        self.current_iteration += 1
        if not any(self._left_out):
            return loss_dict
        # rsl-rl summed a 0 for each term left out and divided by all N mini-batches.
        total, result = self.num_learning_epochs * self.num_mini_batches, dict(loss_dict)
        for key, left_out in zip(self._loss_keys(), self._left_out, strict=True):
            if left_out and key in result:
                if left_out < total:
                    result[key] = loss_dict[key] * total / (total - left_out)
                else:
                    del result[key]
        return result

    def reduce_parameters(self) -> None:
        """All-reduce the gradients once all ranks agreed that none holds a NaN/Inf; otherwise reduce nothing."""
        if self.guard is not None and not self.guard.agree():
            return  # every rank skips this step; the poisoned gradients never enter the all-reduce
        super().reduce_parameters()
        if self.guard is not None:
            self.guard.measure_norm()

    # ---- mini-batch boundaries ---------------------------------------------------------------------------------
    def _guarded_batches(self, batches: Iterator[Any]) -> Iterator[Any]:
        per_update = self.num_learning_epochs * self.num_mini_batches
        batches, k = iter(batches), -1
        while True:
            self._end_minibatch()  # first: the item tap must not be open while the next batch is sliced
            batch = next(batches, None)
            if batch is None:
                return
            k += 1
            self._mb, self._update_index, self._batch = k, self.current_iteration * per_update + k, batch
            self._lr_before, self._mb_open = self.learning_rate, True
            if self._grad_fault is not None and self._rank_injects():
                self._grad_armed = self.fault_cfg.grad_due(self._update_index)
                if self.fault_cfg.loss_due(self._update_index):
                    # A NaN return makes the value loss, hence the loss, NaN through rsl-rl's own code. Recurrent
                    # batches are views into the storage: write into a copy.
                    batch.returns = batch.returns.clone()
                    batch.returns.view(-1)[0] = math.nan
                    self._injected[1] += 1
            yield batch

    def _after_step(self, applied: bool) -> None:
        guard = self.guard
        if not self._in_update or guard is None:
            return
        if guard.checked_late:
            self._warn_once("late", "grad guard: no backward seen; gradients were checked in step(), after clipping")
        if not guard.last_nonfinite:
            return
        if not applied:
            # rsl-rl adapted the learning rate from this mini-batch's KL before backward; a skipped mini-batch
            # leaves everything as it was, the rate included.
            self.learning_rate = self._lr_before
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr_before
        self._terms, self._zero_items = [], not applied
        self._item_tap.open()  # update() reads the loss terms next; the tap holds them until the next mini-batch

    def _on_item(self, _args: tuple[Any, ...], value: Any) -> Any:
        index = len(self._terms)
        self._terms.append(float(value))
        leave_out = self._zero_items or not math.isfinite(value)
        if not leave_out or index >= len(self._left_out):
            return value
        self._left_out[index] += 1
        return type(value)(0)

    def _end_minibatch(self) -> None:
        if not self._mb_open:
            return
        self._mb_open = False
        self._item_tap.close()
        guard = self.guard
        if guard is None or not guard.last_nonfinite:
            return
        if len(self._terms) != len(self._loss_keys()):
            self._warn_once("terms", f"grad guard: read {len(self._terms)} loss terms, expected {self._loss_keys()}")
        if not all(math.isfinite(t) for t in self._terms):
            guard.note_loss_nonfinite()
        self._events += 1
        if guard.mode is GuardMode["raise"]:
            self._raise_nonfinite()
        if self._events <= _LOG_FIRST or self._events % _LOG_EVERY == 0:
            action = "step skipped" if guard.last_skipped else "elements zeroed, step applied"
            logger.warning("grad guard: %s; %s (event %d)", self._describe(), action, self._events)

    def _loss_keys(self) -> list[str]:
        """rsl-rl's loss-dict keys in the order update() reads them with .item() (RND is refused with the guard)."""
        return ["value", "surrogate", "entropy"] + (["symmetry"] if self.symmetry else [])

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    # ---- faults ------------------------------------------------------------------------------------------------
    def _rank_injects(self) -> bool:
        return self.fault_cfg.rank is None or self.fault_cfg.rank == self.gpu_global_rank

    def _resolve_fault_target(self, named: dict[str, torch.nn.Parameter]) -> tuple[torch.nn.Parameter, tuple[int, ...]]:
        trainable = [n for n, p in named.items() if p.requires_grad]
        name = self.fault_cfg.param or next((n for n in trainable if n.startswith("actor.")), None)
        if name not in trainable:
            raise ConfigError(f"faults.grad.param: unknown or frozen parameter {name!r}; valid: {trainable}")
        param, element = named[name], self.fault_cfg.element
        if element >= param.numel():
            raise ConfigError(f"faults.grad.element: {element} is out of range for {name} ({param.numel()} elements)")
        return param, tuple(int(i) for i in np.unravel_index(element, tuple(param.shape)))

    def _inject_grad(self, param: torch.Tensor) -> None:
        # A gradient hook, run during backward: the guard meets the value where a real one would arise.
        if self._grad_armed and param.grad is not None and self._grad_fault is not None:
            self._grad_armed = False
            param.grad[self._grad_fault[1]] = self.fault_cfg.value
            self._injected[0] += 1

    # ---- accounting and raise mode -----------------------------------------------------------------------------
    def _end_update(self) -> None:
        """Per-update metrics and counters, summed over ranks (one small all-reduce when distributed)."""
        if self.guard is not None:
            metrics, injected = self.guard.end_iteration(self._injected)
            self.safety_counters = dict(self.guard.totals)
        else:
            metrics, injected = {}, list(self._injected)
            if self.gpu_world_size > 1:
                injected = [int(v) for v in sum_over_ranks(injected, self.device)]
        for key, count in zip(("grad_nonfinite", "loss_nonfinite"), injected, strict=True):
            if count:
                self.faults_injected[key] = self.faults_injected.get(key, 0) + count
            if self._grad_fault is not None:
                metrics[f"faults_{key}"] = count
        self._metrics = metrics

    def _describe(self) -> str:
        event = self.guard.last_event if self.guard is not None else None
        where = f"iteration {self.current_iteration}, mini-batch {self._mb} (update {self._update_index})"
        if self.gpu_world_size > 1:
            where += f", rank {self.gpu_global_rank}"
        if event is None:
            what = "a non-finite loss or gradient on another rank"
        elif event.nonfinite_elements:
            what = f"{event.nonfinite_elements} non-finite gradient element(s), the first in {event.first_param},"
        else:
            what = "a non-finite loss"
        terms = ", ".join(f"{k} {v:.6g}" for k, v in zip(self._loss_keys(), self._terms, strict=False))
        return f"{what} in {where}; loss terms: {terms or 'not read'}"

    def _raise_nonfinite(self) -> None:
        self._end_update()  # every rank raises at this same mini-batch, so the collective in it is safe
        event = self.guard.last_event if self.guard is not None else None
        dump = self._write_dump(event) if event is not None else None
        raise NonFiniteError(
            f"grad guard (mode raise): {self._describe()}. "
            "The step was not applied: weights and optimizer state are those before this mini-batch. "
            + (f"Dump: {dump} (torch.load(path, weights_only=True)). " if dump else "No dump written. ")
            + "Hint: safety.grad_guard.mode=skip contains such mini-batches and keeps training."
        )

    def _write_dump(self, event: GradEvent) -> str | None:
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
            "loss_terms": dict(zip(self._loss_keys(), self._terms, strict=False)),
            "batch": _plain(vars(self._batch)),
            "nonfinite_grads": _plain(event.grads or {}),
            "actor_state_dict": _plain(self._raw_actor.state_dict()),
            "critic_state_dict": _plain(self._raw_critic.state_dict()),
            "optimizer_state_dict": _plain(self.optimizer.state_dict()),
        }
        os.makedirs(self.dump_dir, exist_ok=True)
        torch.save(payload, path + ".tmp")
        os.replace(path + ".tmp", path)
        return path
