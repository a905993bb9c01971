"""The gradient guard's mechanics on plain torch models: the issue's minimal form, each mode against NaN/+Inf/-Inf."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robo_safe_rl.config.grad_guard import GuardMode
from robo_safe_rl.safety.grad_guard import (
    CallTap,
    GradGuard,
    GuardedOptimizer,
    nonfinite_counts,
    total_grad_norm,
)

BAD = pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "+inf", "-inf"])
RAISE = GuardMode["raise"]


def _state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Adam's per-parameter state (step, exp_avg, exp_avg_sq) as a flat list of tensors."""
    return [t.clone() for s in opt.state.values() for t in s.values()]


def _assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


def test_minimal_form_without_guard_poisons_every_weight() -> None:
    # The failure the guard ends, as the issue states it: the clip returns NaN and step() writes NaN everywhere.
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    assert math.isnan(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2).item())
    opt.step()
    assert all(torch.isnan(p).all() for p in model.parameters())


def test_one_inf_element_turns_into_nan_through_the_clip() -> None:
    # Worked example: grads (3, +inf) -> total norm inf -> coefficient 0.2 / inf = 0 -> (3 * 0, inf * 0) = (0, nan).
    p = nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, math.inf])
    torch.nn.utils.clip_grad_norm_([p], 0.2)
    assert p.grad[0].item() == 0.0 and math.isnan(p.grad[1].item())


@pytest.mark.parametrize("clean_steps", [0, 2])
def test_minimal_form_through_the_guard_changes_nothing(clean_steps: int) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    guard = GradGuard(model.named_parameters(), GuardMode.skip)
    opt = GuardedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3), guard)
    for _ in range(clean_steps):  # so that Adam has moments and a step count to keep
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    weights, moments = [p.detach().clone() for p in model.parameters()], _state(opt.inner)
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)  # returns nan, grads stay nan
    opt.step()  # the guard checks here, having seen no backward: the step is skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    _assert_same([p.detach() for p in model.parameters()], weights)
    _assert_same(_state(opt.inner), moments)
    assert guard.last_skipped and guard.checked_late
    metrics, _ = guard.end_iteration()
    assert metrics["grad_steps_skipped"] == 1 and metrics["grad_nonfinite_steps"] == 1


def _net() -> nn.Sequential:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _poison(param: nn.Parameter, index: tuple[int, ...], value: float) -> None:
    """A gradient hook that writes ``value`` at ``index`` during backward, as a bad op in backward would."""

    def hook(p: torch.Tensor) -> None:
        p.grad[index] = value

    param.register_post_accumulate_grad_hook(hook)


def _guarded_step(mode: GuardMode, bad: float | None) -> tuple[nn.Module, GuardedOptimizer, GradGuard]:
    """One warm-up step, then one step whose second-layer weight gradient holds ``bad`` at (1, 2), clipped."""
    model = _net()
    guard = GradGuard(model.named_parameters(), mode, keep_grads=mode is RAISE)
    guard.watch_backward = True
    opt = GuardedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1), guard)
    x = torch.linspace(-1, 1, 15).reshape(5, 3)
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    if bad is not None:
        _poison(model[2].weight, (1, 2), bad)
    opt.zero_grad()
    model(x).square().mean().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return model, opt, guard


@BAD
@pytest.mark.parametrize("mode", [GuardMode.skip, RAISE], ids=["skip", "raise"])
def test_skip_and_raise_leave_weights_and_adam_state_bitwise_unchanged(mode: GuardMode, bad: float) -> None:
    model, opt, guard = _guarded_step(mode, bad)
    ref = _net()  # the same warm-up step, and no second step at all
    ref_adam = torch.optim.Adam(ref.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 15).reshape(5, 3)
    ref(x).square().mean().backward()
    ref_adam.step()
    _assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    _assert_same(_state(opt.inner), _state(ref_adam))
    assert guard.last_skipped
    event = guard.last_event
    assert event is not None
    assert (event.nonfinite_elements, event.first_param) == (1, "2.weight")  # counted before the clip smeared it
    metrics, _ = guard.end_iteration()
    assert metrics["grad_steps_skipped"] == 1 and metrics["grad_nonfinite_elements"] == 1
    assert metrics["grad_steps_zeroed"] == 0
    assert guard.totals["grad_steps_skipped"] == 1
    if mode is RAISE:
        assert event.grads is not None and not torch.isfinite(event.grads["2.weight"][1, 2])


@BAD
def test_zero_mode_is_the_step_with_that_element_zero(bad: float) -> None:
    model, opt, guard = _guarded_step(GuardMode.zero, bad)
    ref = _net()
    ref_adam = torch.optim.Adam(ref.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 15).reshape(5, 3)
    ref(x).square().mean().backward()
    ref_adam.step()
    _poison(ref[2].weight, (1, 2), 0.0)
    ref_adam.zero_grad()
    ref(x).square().mean().backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    ref_adam.step()
    _assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    _assert_same(_state(opt.inner), _state(ref_adam))
    assert not guard.last_skipped and guard.last_nonfinite
    metrics, _ = guard.end_iteration()
    counts = (metrics["grad_steps_zeroed"], metrics["grad_steps_skipped"], metrics["grad_nonfinite_elements"])
    assert counts == (1, 0, 1)


@pytest.mark.parametrize("mode", [GuardMode.skip, GuardMode.zero, RAISE], ids=["skip", "zero", "raise"])
def test_clean_steps_are_bitwise_those_of_the_plain_optimizer(mode: GuardMode) -> None:
    guarded, plain = _net(), _net()
    guard = GradGuard(guarded.named_parameters(), mode)
    guard.watch_backward = True
    opt = GuardedOptimizer(torch.optim.Adam(guarded.parameters(), lr=0.05), guard)
    ref = torch.optim.Adam(plain.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        x = torch.randn(6, 3, generator=gen)
        for model, o in ((guarded, opt), (plain, ref)):
            o.zero_grad()
            model(x).pow(2).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.3)
            o.step()
    _assert_same([p.detach() for p in guarded.parameters()], [p.detach() for p in plain.parameters()])
    _assert_same(_state(opt.inner), _state(ref))
    metrics, _ = guard.end_iteration()
    assert metrics["grad_nonfinite_steps"] == 0 and not guard.checked_late
    assert metrics["grad_norm_preclip_max"] >= metrics["grad_norm_preclip"] > 0


def test_a_norm_that_overflows_float32_on_finite_gradients_is_no_event() -> None:
    # 3e19 ** 2 = 9e38 > float32 max (3.4e38): the norm is inf although every element is finite. Plain torch would
    # clip with coefficient 0 and step; the guard must not call that a non-finite gradient.
    p = nn.Parameter(torch.zeros(2))
    guard = GradGuard([("p", p)], GuardMode.skip)
    p.grad = torch.tensor([3e19, 1.0])
    guard.after_backward()
    assert guard.should_step() and not guard.last_nonfinite


def test_a_non_finite_loss_skips_even_with_finite_gradients() -> None:
    p = nn.Parameter(torch.zeros(2))
    guard = GradGuard([("p", p)], GuardMode.skip)
    p.grad = torch.ones(2)
    guard.after_backward(torch.tensor(float("nan")))
    assert not guard.should_step()
    assert guard.last_event is not None and not guard.last_event.loss_finite
    metrics, _ = guard.end_iteration()
    assert (metrics["loss_nonfinite"], metrics["grad_nonfinite_elements"], metrics["grad_steps_skipped"]) == (1, 0, 1)


def test_iteration_metrics_worked_example() -> None:
    # Three steps: norms 5 (grads 3, 4), then a NaN (skipped), then 13 (grads 5, 12). Mean over applied (5+13)/2 = 9.
    p = nn.Parameter(torch.zeros(2))
    guard = GradGuard([("p", p)], GuardMode.skip)
    for grad in ([3.0, 4.0], [math.nan, 1.0], [5.0, 12.0]):
        guard.begin_minibatch()
        p.grad = torch.tensor(grad)
        guard.after_backward()
        guard.should_step()
    metrics, extra = guard.end_iteration([2, 0])
    assert metrics == {
        "grad_nonfinite_steps": 1,
        "grad_steps_skipped": 1,
        "grad_steps_zeroed": 0,
        "grad_nonfinite_elements": 1,
        "loss_nonfinite": 0,
        "grad_norm_preclip": 9.0,
        "grad_norm_preclip_max": 13.0,
    }
    assert extra == [2, 0]
    assert guard.end_iteration()[0]["grad_steps_skipped"] == 0  # a new iteration starts from zero
    assert guard.totals["grad_steps_skipped"] == 1


def test_norm_and_count_helpers_worked_examples() -> None:
    # sqrt(3^2 + 4^2 + 12^2) = 13.
    assert total_grad_norm([torch.tensor([3.0, 4.0]), torch.tensor([[12.0]])]).item() == 13.0
    assert nonfinite_counts([torch.tensor([math.nan, 1.0, math.inf]), torch.tensor([-math.inf])]) == [2, 1]
    assert nonfinite_counts([]) == []


def test_guarded_optimizer_is_the_inner_optimizer_for_everything_but_step() -> None:
    model = _net()
    inner = torch.optim.Adam(model.parameters(), lr=0.1)
    opt = GuardedOptimizer(inner, GradGuard(model.named_parameters(), GuardMode.skip))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert opt.param_groups is inner.param_groups and opt.state is inner.state and opt.defaults is inner.defaults
    saved = opt.state_dict()
    assert saved.keys() == inner.state_dict().keys() and saved["state"][0]["step"] == 1
    other = _net()
    fresh = GuardedOptimizer(torch.optim.Adam(other.parameters(), lr=0.1), GradGuard(other.named_parameters(), RAISE))
    fresh.load_state_dict(saved)
    assert fresh.inner.state_dict()["state"][0]["step"] == 1
    with pytest.raises(TypeError, match="closure"):
        opt.step(lambda: None)  # type: ignore[arg-type]


def test_off_mode_builds_no_guard() -> None:
    with pytest.raises(ValueError, match="mode skip, zero or raise"):
        GradGuard(_net().named_parameters(), GuardMode.off)


def test_call_tap_hands_back_what_the_callback_returns_and_only_while_open() -> None:
    seen: list[float] = []

    def zero(_args: tuple[object, ...], value: float) -> float:
        seen.append(value)
        return 0.0

    tap = CallTap(torch.Tensor.item, zero)
    t = torch.tensor(2.5)
    tap.open()
    try:
        assert t.item() == 0.0 and (t + 1).item() == 0.0  # other calls (the add) pass through untouched
    finally:
        tap.close()
    assert t.item() == 2.5 and seen == [2.5, 3.5]
    tap.close()  # closing twice is harmless


def test_hooks_check_before_the_clip_and_only_while_watching() -> None:
    model = _net()
    guard = GradGuard(model.named_parameters(), GuardMode.skip)
    _poison(model[0].bias, (0,), math.nan)
    model(torch.ones(2, 3)).sum().backward()
    assert guard.last_event is None and guard._norm is None  # not watching: nothing ran during backward
    guard.watch_backward = True
    model.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # a NaN coefficient: every gradient is NaN now
    assert not guard.should_step()
    assert guard.last_event is not None and guard.last_event.nonfinite_elements == 1  # the count from before
