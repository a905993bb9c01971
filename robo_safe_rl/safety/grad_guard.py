"""The gradient guard: a NaN or Inf in a loss or its gradients never reaches ``optimizer.step()``.

The mechanics here know torch, not rsl-rl (:class:`~robo_safe_rl.training.ppo.SafePPO` wires them into PPO):

- :class:`GradGuard` checks each mini-batch once, at the end of backward (an autograd callback queued by its
  gradient hooks, so before any all-reduce and before clipping): one fused L2 norm over all gradients (finite exactly
  when every element is, unless the float sum of squares overflows, which the slow path tells apart) and the loss
  when given, read with one host-device sync. Only when that fails are the non-finite elements counted per parameter
  on the device (and zeroed in ``zero`` mode).
- Under multi-process training in ``skip``/``raise`` mode, :meth:`GradGuard.agree` all-reduces the flag so that every
  rank takes the same decision and no rank's poisoned gradients enter the gradient all-reduce.
- :class:`GuardedOptimizer` wraps the optimizer: ``step()`` asks the guard and skips the real step when told, so the
  weights and the optimizer state (Adam's moments, step count) stay bitwise unchanged. Everything else is the wrapped
  optimizer's, so checkpoints keep their format.
- :class:`CallTap` is a :class:`~torch.overrides.TorchFunctionMode` opened only for short windows, reporting the calls
  of one function (SafePPO reads the logged loss terms with it, from ``Tensor.item``).

Minimal use, outside PPO::

    guard = GradGuard(model.named_parameters(), GuardMode.skip)
    optimizer = GuardedOptimizer(torch.optim.Adam(model.parameters()), guard)
    guard.watch_backward = True     # check at the end of every backward; or call guard.after_backward(loss) yourself
    optimizer.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); optimizer.step()   # skipped if anything was NaN/Inf

Without either, the check runs inside ``step()``, on the gradients as they are then (after clipping, whose NaN
coefficient makes every element NaN: the decision is still right, the element count is not).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.autograd import Variable
from torch.overrides import TorchFunctionMode

from robo_safe_rl.config.grad_guard import GuardMode

COUNTER_KEYS = (
    "grad_nonfinite_steps",
    "grad_steps_skipped",
    "grad_steps_zeroed",
    "grad_nonfinite_elements",
    "loss_nonfinite",
)
"""Names of the guard's event counters (``Safety/<name>`` in TensorBoard, ``safety.<name>`` in summary.json)."""

_SKIPPING = (GuardMode.skip, GuardMode["raise"])


def total_grad_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """L2 norm of all gradients as one vector, on their device, without a host sync.

    Args:
        grads: Gradient tensors of any shapes, all on one device with one dtype.

    Returns:
        Scalar tensor; NaN if any element is NaN, +Inf if any is +-Inf (or if the float sum of squares overflows).
    """
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(grads))))


def nonfinite_counts(grads: Sequence[torch.Tensor]) -> list[int]:
    """Number of NaN/Inf elements in each tensor (one host sync for all of them)."""
    if not grads:
        return []
    return [int(c) for c in torch.stack([(~torch.isfinite(g)).sum() for g in grads]).tolist()]


def sum_over_ranks(values: Sequence[float], device: torch.device | str) -> list[float]:
    """All-reduce (sum) a short vector of host numbers across the process group; exact for integers below 2**53."""
    tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


class CallTap(TorchFunctionMode):
    """Hands each call of one torch function to a callback while open; every other call passes straight through.

    Opened and closed in pairs within one mini-batch (a torch function mode stack is last-in first-out). Every torch
    call inside the window pays a Python round trip (1-2 microseconds; attribute reads such as ``.grad`` count), so
    the window must hold few calls: around ``clip_grad_norm_`` it would hold about 70.
    """

    def __init__(self, target: Callable[..., Any], callback: Callable[[tuple[Any, ...], Any], Any]) -> None:
        """Args:
        target: The function to watch, e.g. ``torch.Tensor.item``.
        callback: Called as ``callback(args, result)`` after each call of ``target``; what it returns is what the
            caller of ``target`` receives (return ``result`` to change nothing).
        """
        super().__init__()
        self._target = target
        self._callback = callback
        self.is_open = False

    def open(self) -> None:
        """Start reporting (no-op when already open)."""
        if not self.is_open:
            self.__enter__()
            self.is_open = True

    def close(self) -> None:
        """Stop reporting (no-op when closed)."""
        if self.is_open:
            self.is_open = False
            self.__exit__(None, None, None)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        return self._callback(args, result) if func is self._target else result


@dataclass
class GradEvent:
    """What this rank found in one mini-batch whose loss or gradients were not finite.

    Attributes:
        nonfinite_elements: NaN/Inf gradient elements on this rank, counted before any all-reduce or clip.
        first_param: Name of the first parameter (in registration order) with a non-finite gradient element.
        loss: The loss value (``nan``/``inf`` included), or None when the guard did not see the loss.
        grads: Copies of the non-finite gradients before clipping, by name (only with ``keep_grads``).
    """

    nonfinite_elements: int
    first_param: str | None
    loss: float | None
    grads: dict[str, torch.Tensor] | None = None

    @property
    def loss_finite(self) -> bool:
        """Whether the loss was finite (True when unknown)."""
        return self.loss is None or math.isfinite(self.loss)


class GradGuard:
    """Decides, once per mini-batch, whether an optimizer step may use the current gradients.

    Per mini-batch: :meth:`begin_minibatch` (from ``zero_grad``), :meth:`after_backward` (at the end of backward when
    :attr:`watch_backward` is set, or called by hand), under multi-process :meth:`agree` before the gradient
    all-reduce, then :meth:`should_step` (from ``step``). Per iteration: :meth:`end_iteration` returns the metrics and
    adds them to :attr:`totals`.
    """

    def __init__(
        self,
        named_params: Iterable[tuple[str, torch.nn.Parameter]],
        mode: GuardMode,
        *,
        world_size: int = 1,
        keep_grads: bool = False,
    ) -> None:
        """Args:
        named_params: ``(name, parameter)`` pairs to guard; parameters without ``requires_grad`` are left out.
        mode: ``skip``, ``zero`` or ``raise`` (``off`` means: build no guard).
        world_size: Processes in the default process group (1: single process).
        keep_grads: Keep copies of non-finite gradients in :attr:`last_event` (for ``raise`` mode's dump).

        Raises:
            ValueError: If ``mode`` is ``off`` or there is no trainable parameter.
        """
        pairs = [(name, p) for name, p in named_params if p.requires_grad]
        if mode is GuardMode.off or not pairs:
            raise ValueError(f"GradGuard needs mode skip, zero or raise and trainable parameters; got mode {mode.name}")
        self.names = [name for name, _ in pairs]
        self.params = [p for _, p in pairs]
        self.mode = mode
        self.world_size = world_size
        self.keep_grads = keep_grads
        self.device = self.params[0].device
        self._uniform = len({(p.device, p.dtype) for p in self.params}) == 1
        self.deferred = world_size > 1 and mode in _SKIPPING
        self.watch_backward = False
        """Check at the end of each backward through these parameters (the owner sets it while it trains)."""
        self._queued = False
        # A hook per parameter costs next to nothing (measured: within noise on a 4-layer MLP); the first one to fire
        # in a backward queues the check, which autograd runs once every gradient of that backward is accumulated.
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        self.checked_late = False
        """Set once a check had to run inside ``step()`` because no ``after_backward`` came first."""
        self.totals = dict.fromkeys(COUNTER_KEYS, 0)
        self.last_event: GradEvent | None = None
        self.last_nonfinite = False
        self.last_skipped = False
        self._reset_minibatch()
        self._reset_iteration()

    # ---- one mini-batch ----------------------------------------------------------------------------------------
    def begin_minibatch(self) -> None:
        """Forget the previous mini-batch (and a check left queued by a backward that raised)."""
        self._queued = False
        self._reset_minibatch()

    def after_backward(self, loss: torch.Tensor | None = None) -> None:
        """Measure the gradients just after backward (and zero non-finite elements in ``zero`` mode).

        Args:
            loss: The loss that was backpropagated (any shape), or None if unknown.
        """
        with torch.no_grad():
            self._loss = None if loss is None else loss.detach().float().sum()
            self._norm = self._total_norm()
        self._local_bad, self._agreed_bad, self._event = None, None, None  # a second backward is checked afresh
        if not self.deferred:
            self._resolve_local()

    def agree(self) -> bool:
        """Agree across ranks whether this mini-batch is skipped (collective; every rank must call it).

        Returns:
            True when the gradients may be all-reduced: no rank found a non-finite value, or mode is ``zero`` (each
            rank zeroed its own non-finite elements already).
        """
        if not self.deferred:
            return True
        if self._norm is None:
            self.after_backward(None)
        with torch.no_grad():
            values = self._norm.reshape(1) if self._loss is None else torch.stack((self._loss, self._norm))
            flag = (~torch.isfinite(values)).any().to(torch.float32)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        if flag.tolist() == 0:  # the one sync of a clean mini-batch
            self._local_bad, self._agreed_bad = False, False
            return True
        # Some rank saw a non-finite norm or loss: each one now looks closely (a float overflow of the norm alone is
        # no event), and a second vote, on this rare path only, settles it.
        self._resolve_local()
        self._agreed_bad = sum_over_ranks([float(self._local_bad)], self.device)[0] > 0
        return not self._agreed_bad

    def measure_norm(self) -> None:
        """Re-measure the gradient norm for the metrics (after the all-reduce: the norm that clipping will see)."""
        with torch.no_grad():
            self._norm = self._total_norm()

    def should_step(self) -> bool:
        """Decide this mini-batch's step and record it (checking here if no check ran since ``begin_minibatch``).

        Returns:
            False when the step must be skipped (``skip``/``raise`` mode and a non-finite value on some rank).
        """
        if self._norm is None:
            self.checked_late = True
            self.after_backward(None)
        if self.deferred and self._agreed_bad is None:
            self.agree()
        nonfinite = bool(self._agreed_bad if self.deferred else self._local_bad)
        skip = nonfinite and self.mode in _SKIPPING
        event = self._event
        self._records.append(
            (int(bool(self._local_bad)), int(event is not None and not event.loss_finite), int(self._zeroed))
        )
        self._elements += event.nonfinite_elements if event is not None else 0
        if skip:
            self._skipped += 1
        elif self._norm is not None:
            self._norms.append(self._norm)
        self.last_event, self.last_nonfinite, self.last_skipped = event, nonfinite, skip
        self._reset_minibatch()
        return not skip

    # ---- one iteration -----------------------------------------------------------------------------------------
    def end_iteration(self, extra: Sequence[int] = ()) -> tuple[dict[str, float], list[int]]:
        """Close the iteration: metrics over all ranks (one small all-reduce when distributed), added to totals.

        Args:
            extra: Per-rank integers to sum over ranks in the same all-reduce (e.g. injected-fault counts).

        Returns:
            The metrics (names of :data:`COUNTER_KEYS`, plus ``grad_norm_preclip`` and ``grad_norm_preclip_max``, the
            mean and max over applied steps of the gradient norm clipping saw, when a step was applied) and
            ``extra`` summed over ranks.
        """
        records = self._records
        flat: list[float] = [float(v) for rec in records for v in rec] + [float(self._elements), *map(float, extra)]
        if self.world_size > 1:
            flat = sum_over_ranks(flat, self.device)
        per_mb = [flat[3 * i : 3 * i + 3] for i in range(len(records))]
        metrics: dict[str, float] = {
            "grad_nonfinite_steps": sum(1 for r in per_mb if r[0] > 0),
            "grad_steps_skipped": self._skipped,
            "grad_steps_zeroed": sum(1 for r in per_mb if r[2] > 0),
            "grad_nonfinite_elements": int(flat[3 * len(records)]),
            "loss_nonfinite": sum(1 for r in per_mb if r[1] > 0),
        }
        for key in COUNTER_KEYS:
            self.totals[key] += int(metrics[key])
        if self._norms:
            norms = torch.stack(self._norms)
            metrics["grad_norm_preclip"], metrics["grad_norm_preclip_max"] = torch.stack(
                (norms.mean(), norms.max())
            ).tolist()
        self._reset_iteration()
        return metrics, [int(v) for v in flat[3 * len(records) + 1 :]]

    def note_loss_nonfinite(self) -> None:
        """Count the last decided mini-batch as one with a non-finite loss (for owners that learn it after the step)."""
        if self._records:
            event, _, zeroed = self._records[-1]
            self._records[-1] = (event, 1, zeroed)

    def remove_hooks(self) -> None:
        """Detach the guard's gradient hooks from the parameters."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    # ---- internals ---------------------------------------------------------------------------------------------
    def _on_grad(self, _param: torch.Tensor) -> None:
        if self.watch_backward and not self._queued:
            self._queued = True
            Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self._queued = False
        self.after_backward(None)

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params if p.grad is not None]

    def _total_norm(self) -> torch.Tensor:
        grads = self._grads()
        if not grads:
            return torch.zeros((), device=self.device)
        if self._uniform:
            return total_grad_norm(grads)
        return torch.nn.utils.get_total_norm(grads)  # groups by device and dtype

    def _reset_minibatch(self) -> None:
        self._loss: torch.Tensor | None = None
        self._norm: torch.Tensor | None = None
        self._local_bad: bool | None = None
        self._agreed_bad: bool | None = None
        self._event: GradEvent | None = None
        self._zeroed = False

    def _reset_iteration(self) -> None:
        self._records: list[tuple[int, int, int]] = []
        self._norms: list[torch.Tensor] = []
        self._elements = 0
        self._skipped = 0

    def _resolve_local(self) -> None:
        """Read the check on the host (one sync); on failure count, name, keep and (``zero`` mode) zero elements."""
        if self._local_bad is not None:
            return
        if self._norm is None:
            self._norm = self._total_norm()
        if self._loss is None:
            loss, norm = None, self._norm.tolist()  # not .item(): owners may watch .item() with a CallTap
        else:
            loss, norm = torch.stack((self._loss, self._norm.to(self._loss.dtype))).tolist()
        loss_bad = loss is not None and not math.isfinite(loss)
        if math.isfinite(norm) and not loss_bad:
            self._local_bad = False
            return
        named = [(name, p.grad) for name, p in zip(self.names, self.params, strict=True) if p.grad is not None]
        with torch.no_grad():
            counts = nonfinite_counts([g for _, g in named])
        if not any(counts) and not loss_bad:  # the float sum of squares overflowed; every element is finite
            self._local_bad = False
            return
        bad = [(name, g) for (name, g), c in zip(named, counts, strict=True) if c]
        grads = {name: g.detach().clone() for name, g in bad} if self.keep_grads else None
        self._event = GradEvent(sum(counts), bad[0][0] if bad else None, loss, grads)
        self._local_bad = True
        if self.mode is GuardMode.zero and bad:
            with torch.no_grad():
                for _, g in bad:
                    torch.nan_to_num_(g, nan=0.0, posinf=0.0, neginf=0.0)
                self._norm = self._total_norm()
            self._zeroed = True


class GuardedOptimizer:
    """An optimizer whose ``step()`` runs only when the guard allows it; all else is the wrapped optimizer's.

    ``zero_grad`` starts the guard's mini-batch; ``step`` asks :meth:`GradGuard.should_step`, runs the real step or
    not, then calls ``after_step(applied)`` if set. ``param_groups``, ``state``, ``state_dict``, ``load_state_dict``
    and any other attribute are the wrapped optimizer's own, so checkpoints are unchanged in format.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        guard: GradGuard,
        after_step: Callable[[bool], None] | None = None,
    ) -> None:
        self.inner = optimizer
        self.guard = guard
        self.after_step = after_step

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's parameter groups (learning rates live here)."""
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients and start a new mini-batch in the guard."""
        self.inner.zero_grad(set_to_none=set_to_none)
        self.guard.begin_minibatch()

    def step(self, closure: None = None) -> None:
        """Apply the step unless the guard skips it.

        Raises:
            TypeError: If a closure is given (the guard checks gradients computed before ``step``).
        """
        if closure is not None:
            raise TypeError("GuardedOptimizer.step does not take a closure: compute the gradients before step()")
        applied = self.guard.should_step()
        if applied:
            self.inner.step()
        if self.after_step is not None:
            self.after_step(applied)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict, exactly."""
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer."""
        self.inner.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # Only called for names not found on the wrapper itself: defaults, state, add_param_group, hooks, ...
        if name == "inner":  # not yet set (e.g. during unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"GuardedOptimizer({self.inner!r}, mode={self.guard.mode.name})"
