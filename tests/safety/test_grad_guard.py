"""The gradient guard's numerics on plain torch models: the minimal form, each mode against NaN/+Inf/-Inf."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robo_safe_rl.config.grad_guard import GuardMode
from robo_safe_rl.safety.grad_guard import GradGuard, Verdict, grad_norm, nonfinite_counts, stack_scalars

BAD = pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "+inf", "-inf"])
RAISE = GuardMode["raise"]


def _state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Adam's per-parameter state (step, exp_avg, exp_avg_sq) as a flat list of tensors."""
    return [t.clone() for s in opt.state.values() for t in s.values()]


def _assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


def _guard(model: nn.Module, mode: GuardMode = GuardMode.skip, **kwargs: bool) -> GradGuard:
    return GradGuard([list(model.named_parameters())], mode, **kwargs)


def _guarded_step(model: nn.Module, opt: torch.optim.Optimizer, guard: GradGuard, loss: torch.Tensor) -> Verdict:
    """The module docstring's minimal form: backward, check, then clip with the guard's norm and step, or not."""
    opt.zero_grad()
    loss.backward()
    verdict = guard.check({"loss": loss})
    if verdict.step:
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), 0.5, verdict.norms[0])
        opt.step()
    return verdict


def test_minimal_form_without_guard_poisons_every_weight() -> None:
    # The failure the guard ends: the clip returns NaN and step() writes NaN everywhere.
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


def _net() -> nn.Sequential:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


X = torch.linspace(-1, 1, 15).reshape(5, 3)


def _poison(param: nn.Parameter, index: tuple[int, ...], value: float) -> None:
    """A gradient hook that writes ``value`` at ``index`` during backward, as a bad op in backward would."""

    def hook(p: torch.Tensor) -> None:
        p.grad[index] = value

    param.register_post_accumulate_grad_hook(hook)


def _run(mode: GuardMode, bad: float) -> tuple[nn.Module, torch.optim.Optimizer, GradGuard, Verdict]:
    """One clean warm-up step, then one whose second-layer weight gradient holds ``bad`` at (1, 2)."""
    model = _net()
    guard = _guard(model, mode, keep_grads=mode is RAISE)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    _guarded_step(model, opt, guard, model(X).square().mean())
    _poison(model[2].weight, (1, 2), bad)
    return model, opt, guard, _guarded_step(model, opt, guard, model(X).square().mean())


def _reference(zero_at: tuple[int, int] | None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Plain torch: the same warm-up step, then no second step (None) or one with that gradient element 0."""
    model = _net()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for second in (False, True):
        if second and zero_at is None:
            break
        if second:
            _poison(model[2].weight, zero_at, 0.0)
        opt.zero_grad()
        model(X).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return model, opt


@BAD
@pytest.mark.parametrize("mode", [GuardMode.skip, RAISE], ids=["skip", "raise"])
def test_skip_and_raise_leave_weights_and_adam_state_bitwise_unchanged(mode: GuardMode, bad: float) -> None:
    model, opt, guard, verdict = _run(mode, bad)
    ref, ref_adam = _reference(None)
    _assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    _assert_same(_state(opt), _state(ref_adam))
    assert not verdict.step and verdict.nonfinite
    event = verdict.event
    assert event is not None and event.loss_finite
    assert (event.nonfinite_elements, event.first_param) == (1, "2.weight")  # counted before any clip smeared it
    metrics, _ = guard.end_iteration()
    assert metrics["grad_steps_skipped"] == 1 and metrics["grad_nonfinite_elements"] == 1
    assert metrics["grad_steps_zeroed"] == 0 and guard.totals["grad_steps_skipped"] == 1
    if mode is RAISE:
        assert event.grads is not None and not torch.isfinite(event.grads["2.weight"][1, 2])


@BAD
def test_zero_mode_is_the_step_with_that_element_zero(bad: float) -> None:
    model, opt, guard, verdict = _run(GuardMode.zero, bad)
    ref, ref_adam = _reference((1, 2))
    _assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    _assert_same(_state(opt), _state(ref_adam))
    assert verdict.step and verdict.nonfinite
    metrics, _ = guard.end_iteration()
    counts = (metrics["grad_steps_zeroed"], metrics["grad_steps_skipped"], metrics["grad_nonfinite_elements"])
    assert counts == (1, 0, 1)


@pytest.mark.parametrize("mode", [GuardMode.skip, GuardMode.zero, RAISE], ids=["skip", "zero", "raise"])
def test_clean_steps_are_bitwise_those_of_clip_grad_norm(mode: GuardMode) -> None:
    guarded, plain = _net(), _net()
    guard = _guard(guarded, mode)
    opt = torch.optim.Adam(guarded.parameters(), lr=0.05)
    ref = torch.optim.Adam(plain.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        x = torch.randn(6, 3, generator=gen)
        assert _guarded_step(guarded, opt, guard, guarded(x).pow(2).sum()).step
        ref.zero_grad()
        plain(x).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
        ref.step()
    _assert_same([p.detach() for p in guarded.parameters()], [p.detach() for p in plain.parameters()])
    _assert_same(_state(opt), _state(ref))
    metrics, _ = guard.end_iteration()
    assert metrics["grad_nonfinite_steps"] == 0
    assert metrics["grad_norm_preclip_max"] >= metrics["grad_norm_preclip"] > 0


def test_a_norm_that_overflows_float32_on_finite_gradients_is_no_event() -> None:
    # 3e19 ** 2 = 9e38 > float32 max (3.4e38): the norm is inf although every element is finite and the loss too.
    p = nn.Parameter(torch.zeros(2))
    guard = GradGuard([[("p", p)]], GuardMode.skip)
    p.grad = torch.tensor([3e19, 1.0])
    verdict = guard.check({"loss": torch.tensor(1.0)})
    assert verdict.step and not verdict.nonfinite and math.isinf(verdict.norms[0].item())


@pytest.mark.parametrize("mode", [GuardMode.skip, GuardMode.zero], ids=["skip", "zero"])
def test_a_loss_that_overflows_is_an_event_although_its_gradient_is_finite(mode: GuardMode) -> None:
    # Worked example (float32): v = (0, 0), target 1e30. Loss mean((v - 1e30)^2) = 1e60 overflows to inf; its gradient
    # 2 (v - 1e30) / 2 = -1e30 per element is finite, but the sum of squares 2e60 of the norm overflows too. Unguarded,
    # the clip coefficient 0.5 / inf = 0 zeroes the gradient and Adam steps on zeros, with nothing counted.
    v = nn.Parameter(torch.zeros(2))
    guard = GradGuard([[("v", v)]], mode)
    loss = (v - 1e30).pow(2).mean()
    loss.backward()
    grad = torch.full((2,), -1e30)  # float32's nearest value to -1e30
    assert math.isinf(loss.item()) and v.grad is not None and torch.equal(v.grad, grad)
    verdict = guard.check({"value": loss})
    assert verdict.step is (mode is GuardMode.zero) and verdict.terms == {"value": math.inf}
    assert verdict.event is not None and not verdict.event.loss_finite and verdict.event.nonfinite_elements == 0
    assert torch.equal(v.grad, grad)  # nothing to zero: every element was finite
    metrics, _ = guard.end_iteration()
    assert (metrics["loss_nonfinite"], metrics["grad_nonfinite_steps"], metrics["grad_nonfinite_elements"]) == (1, 1, 0)
    assert metrics["grad_steps_skipped"] == int(mode is GuardMode.skip)


@BAD
def test_a_non_finite_loss_term_skips_even_with_finite_gradients(bad: float) -> None:
    p = nn.Parameter(torch.zeros(2))
    guard = GradGuard([[("p", p)]], GuardMode.skip)
    p.grad = torch.ones(2)
    verdict = guard.check({"value": torch.tensor(1.5), "entropy": torch.tensor(bad)})
    assert not verdict.step and verdict.terms["value"] == 1.5
    assert verdict.event is not None and not verdict.event.loss_finite
    metrics, _ = guard.end_iteration()
    assert (metrics["loss_nonfinite"], metrics["grad_nonfinite_elements"], metrics["grad_steps_skipped"]) == (1, 0, 1)


def test_iteration_metrics_worked_example() -> None:
    # Two clip groups, three mini-batches: norms (5, 12) -> 13, then a NaN (skipped), then (0, 0) -> 0 (a clean step
    # with zero gradients). Mean over applied steps (13 + 0) / 2 = 6.5, max 13.
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    guard = GradGuard([[("a", a)], [("b", b)]], GuardMode.skip)
    norms = []
    for grad_a, grad_b in (([3.0, 4.0], [12.0]), ([math.nan, 1.0], [1.0]), ([0.0, 0.0], [0.0])):
        a.grad, b.grad = torch.tensor(grad_a), torch.tensor(grad_b)
        norms.append([n.item() for n in guard.check({}).norms])
    assert norms[0] == [5.0, 12.0]  # per clip group, as clip_grad_norm_ sees each
    metrics, extra = guard.end_iteration([2, 0])
    assert metrics == {
        "grad_nonfinite_steps": 1,
        "grad_steps_skipped": 1,
        "grad_steps_zeroed": 0,
        "grad_nonfinite_elements": 1,
        "loss_nonfinite": 0,
        "grad_norm_preclip": 6.5,
        "grad_norm_preclip_max": 13.0,
    }
    assert extra == [2, 0]
    assert guard.end_iteration()[0]["grad_steps_skipped"] == 0  # a new iteration starts from zero
    assert guard.totals["grad_steps_skipped"] == 1


def test_named_groups_report_their_norms_and_how_often_their_clip_binds() -> None:
    # Clip at 10, three applied steps with group norms (5, 12), (0, 0), (13, 10): the actor's mean (5 + 0 + 13) / 3 =
    # 6, the critic's (12 + 0 + 10) / 3 = 22 / 3; the clip binds above 10 (clip_grad_norm_ scales by 10 / norm):
    # the actor's once (13), the critic's once (12; at 10 its factor 10 / (10 + 1e-6) is rounding, not a clip).
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    guard = GradGuard([[("a", a)], [("b", b)]], GuardMode.skip, group_names=("actor", "critic"), max_norm=10.0)
    for grad_a, grad_b in (([3.0, 4.0], [12.0]), ([0.0, 0.0], [0.0]), ([5.0, 12.0], [10.0])):
        a.grad, b.grad = torch.tensor(grad_a), torch.tensor(grad_b)
        assert guard.check({}).step
    metrics, _ = guard.end_iteration()
    assert metrics["grad_norm_preclip_actor"] == 6.0
    assert metrics["grad_norm_preclip_critic"] == pytest.approx(22.0 / 3.0)
    assert metrics["grad_clip_binds_actor"] == metrics["grad_clip_binds_critic"] == pytest.approx(1.0 / 3.0)
    # Without a threshold the norms are reported and the binding is not; a name per group or none.
    guard = GradGuard([[("a", a)], [("b", b)]], GuardMode.skip, group_names=("actor", "critic"))
    guard.check({})
    unbounded = guard.end_iteration()[0]
    assert unbounded["grad_norm_preclip_actor"] == 13.0 and unbounded["grad_norm_preclip_critic"] == 10.0
    assert not [key for key in unbounded if key.startswith("grad_clip_binds")]
    with pytest.raises(ValueError, match="1 group names for 2 groups"):
        GradGuard([[("a", a)], [("b", b)]], GuardMode.skip, group_names=("actor",))


def test_helpers_worked_examples() -> None:
    a, b, frozen = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1, 1)), nn.Parameter(torch.zeros(3))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([[12.0]])
    assert grad_norm([a, b, frozen]).item() == 13.0  # sqrt(3^2 + 4^2 + 12^2); no gradient, no part in it
    assert nonfinite_counts([torch.tensor([math.nan, 1.0, math.inf]), torch.tensor([-math.inf])]) == [2, 1]
    assert nonfinite_counts([]) == []
    scalars = stack_scalars([torch.tensor(0.1), torch.tensor(2.5, dtype=torch.bfloat16)], "cpu")
    assert scalars.tolist() == [torch.tensor(0.1).item(), 2.5]  # each reads as its own .item()


def test_off_mode_builds_no_guard() -> None:
    with pytest.raises(ValueError, match="mode skip, zero or raise"):
        _guard(_net(), GuardMode.off)
