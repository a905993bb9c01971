"""SafePPO against rsl-rl's PPO on synthetic rollouts: bitwise rsl-rl when clean, each mode against NaN/+Inf/-Inf.

The reference for every contained event is plain PPO with the same event done by hand through public torch hooks: a
skipped mini-batch is plain PPO whose optimizer finds no gradient at that step (Adam leaves such a parameter, its
moments and its step count untouched); a zeroed one is plain PPO whose gradient element is 0 there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rsl_rl.algorithms import PPO
from rsl_rl.models import MLPModel, RNNModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from robo_safe_rl.errors import ConfigError, NonFiniteError, NonFiniteStateError
from robo_safe_rl.training.ppo import SafePPO, linear_schedule

OBS, ACT, ENVS, STEPS = 6, 2, 8, 8
N = 5 * 4  # rsl-rl's default 5 epochs x 4 mini-batches (of 16 transitions) per update
GAUSS = {"class_name": "rsl_rl.modules.distribution:GaussianDistribution", "init_std": 1.0}
BAD = pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "+inf", "-inf"])


def build(cls: type[PPO] = SafePPO, recurrent: bool = False, **kwargs: Any) -> PPO:
    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.zeros(ENVS, OBS)}, batch_size=[ENVS])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    model, extra = (RNNModel, {"rnn_type": "gru", "rnn_hidden_dim": 8}) if recurrent else (MLPModel, {})
    actor = model(obs, groups, "actor", ACT, hidden_dims=[16, 16], distribution_cfg=GAUSS, **extra)
    critic = model(obs, groups, "critic", 1, hidden_dims=[16, 16], **extra)
    return cls(actor, critic, RolloutStorage("rl", ENVS, STEPS, obs, [ACT]), **kwargs)


def rollout(alg: PPO, it: int, reward_scale: float = 1.0) -> None:
    """A seeded synthetic rollout (Gaussian obs and rewards, 10 % dones); identical for identical weights."""
    torch.manual_seed(1000 + it)  # action sampling, then the update's mini-batch permutation
    gen = torch.Generator().manual_seed(it)
    with torch.inference_mode():
        for _ in range(STEPS):
            obs = TensorDict({"policy": torch.randn(ENVS, OBS, generator=gen)}, batch_size=[ENVS])
            alg.act(obs)
            dones = (torch.rand(ENVS, generator=gen) < 0.1).float()
            alg.process_env_step(obs, torch.randn(ENVS, generator=gen) * reward_scale, dones, {})
        alg.compute_returns(obs)


def train(alg: PPO, iterations: int = 2, reward_scale: float = 1.0) -> list[dict[str, float]]:
    losses = []
    for it in range(iterations):
        rollout(alg, it, reward_scale)
        losses.append(alg.update())
    return losses


def snapshot(alg: PPO) -> list[Any]:
    """Weights, optimizer state (moments, step counts, param groups) and learning rate."""
    opt = alg.optimizer.state_dict()
    state = [t for s in opt["state"].values() for t in s.values()]
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt["param_groups"]]
    return [
        *alg._raw_actor.state_dict().values(),
        *alg._raw_critic.state_dict().values(),
        *state,
        groups,
        alg.learning_rate,
    ]


def assert_bitwise(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def finite(alg: PPO) -> bool:
    return all(torch.isfinite(t).all() for t in snapshot(alg)[:-2] if isinstance(t, torch.Tensor))


def at_steps(alg: PPO, calls: tuple[int, ...], action: Callable[[PPO], None]) -> None:
    """Run ``action(alg)`` just before plain PPO's optimizer takes its ``calls``-th steps (0-based over the run)."""
    counter = itertools.count()

    def hook(*_: Any) -> None:
        if next(counter) in calls:
            action(alg)

    alg.optimizer.register_step_pre_hook(hook)


def skip_steps(alg: PPO, *calls: int) -> None:
    """Plain PPO whose optimizer takes no step at ``calls``: it finds no gradient there."""
    at_steps(alg, calls, lambda a: a.optimizer.zero_grad(set_to_none=True))


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "gru"])
@pytest.mark.parametrize("mode", ["skip", "zero", "raise", "off"])
def test_a_clean_run_is_bitwise_plain_ppo(mode: str, recurrent: bool) -> None:
    # Same weights, optimizer state, adaptive learning rate (the default schedule) and logged losses as rsl-rl's
    # PPO.update; with mode off the owned update is plain rsl-rl.
    plain = build(PPO, recurrent=recurrent)
    guarded = build(recurrent=recurrent, grad_guard={"mode": mode})
    assert train(guarded) == train(plain)
    assert_bitwise(snapshot(guarded), snapshot(plain))
    metrics = guarded.iteration_metrics()  # type: ignore[attr-defined]
    if mode == "off":
        assert metrics == {}
    else:
        assert metrics["grad_nonfinite_steps"] == 0 and metrics["grad_norm_preclip"] > 0
    assert guarded.faults_injected == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["skip", "off"])
def test_mixed_precision_is_bitwise_plain_ppo(mode: str) -> None:
    # bfloat16 loss terms and float32 norms are read together: float64 holds both exactly.
    plain, guarded = build(PPO, use_mixed_precision=True), build(use_mixed_precision=True, grad_guard={"mode": mode})
    assert train(guarded) == train(plain)
    assert_bitwise(snapshot(guarded), snapshot(plain))


def mirror(env: Any, obs: TensorDict | None = None, actions: torch.Tensor | None = None) -> tuple[Any, Any]:
    """A symmetry of the synthetic task: each sample and its negation (rsl-rl's data_augmentation_func form)."""
    mirrored_obs = None if obs is None else torch.cat([obs, -obs])
    return mirrored_obs, None if actions is None else torch.cat([actions, -actions])


@pytest.mark.parametrize("mixed_precision", [False, True])
@pytest.mark.parametrize("mirror_loss", [True, False])
def test_symmetry_runs_through_the_guard_bitwise(mirror_loss: bool, mixed_precision: bool) -> None:
    # With the mirror loss only reported (False), SafePPO's addition (9) computes it from the update's own forward
    # pass where rsl-rl runs a second one: the logged `symmetry` term must still be rsl-rl's, bit for bit.
    def cfg() -> dict[str, Any]:
        return {
            "env": None,
            "data_augmentation_func": mirror,
            "use_data_augmentation": True,
            "use_mirror_loss": mirror_loss,
            "mirror_loss_coeff": 1.0,
        }

    plain = build(PPO, symmetry_cfg=cfg(), use_mixed_precision=mixed_precision)
    guarded = build(symmetry_cfg=cfg(), use_mixed_precision=mixed_precision)
    losses = train(guarded)
    assert losses == train(plain) and all("symmetry" in loss for loss in losses)
    assert_bitwise(snapshot(guarded), snapshot(plain))


@BAD
def test_skip_is_a_step_not_taken(bad: float) -> None:
    faults = {"at_updates": [7], "value": bad, "param": "actor.mlp.0.weight", "element": 5}
    guarded = build(schedule="fixed", grad_faults=faults)
    plain = build(PPO, schedule="fixed")
    skip_steps(plain, 7)
    train(guarded), train(plain)
    assert finite(guarded)
    assert_bitwise(snapshot(guarded), snapshot(plain))
    assert guarded.safety_counters == {  # type: ignore[attr-defined]
        "grad_nonfinite_steps": 1,
        "grad_steps_skipped": 1,
        "grad_steps_zeroed": 0,
        "grad_nonfinite_elements": 1,
        "loss_nonfinite": 0,
    }
    assert guarded.faults_injected == {"grad_nonfinite": 1}  # type: ignore[attr-defined]


@BAD
def test_zero_is_the_step_with_that_element_zero(bad: float) -> None:
    faults = {"at_updates": [7], "value": bad, "param": "actor.mlp.0.weight", "element": 5}
    guarded = build(grad_guard={"mode": "zero"}, grad_faults=faults)
    plain = build(PPO)
    calls = itertools.count()

    def zero_at_7(p: torch.Tensor) -> None:
        if next(calls) == 7:
            p.grad[0, 5] = 0.0  # element 5 of a (16, 6) weight

    plain.actor.mlp[0].weight.register_post_accumulate_grad_hook(zero_at_7)
    train(guarded), train(plain)
    assert finite(guarded)
    assert_bitwise(snapshot(guarded), snapshot(plain))
    counters = guarded.safety_counters  # type: ignore[attr-defined]
    assert (counters["grad_steps_zeroed"], counters["grad_steps_skipped"], counters["grad_nonfinite_elements"]) == (
        1,
        0,
        1,
    )


@BAD
def test_raise_names_where_and_what_and_dumps(bad: float, tmp_path: Path) -> None:
    faults = {"at_updates": [7], "value": bad, "param": "critic.mlp.2.weight", "element": 3}
    alg = build(grad_guard={"mode": "raise"}, grad_faults=faults, dump_dir=tmp_path)
    with pytest.raises(NonFiniteError) as err:
        train(alg)
    message = str(err.value)
    dump = tmp_path / "grad_guard_dump_it0_mb7.pt"
    for part in (
        "iteration 0, mini-batch 7 (update 7)",
        "1 non-finite gradient element(s), the first in critic.mlp.2.weight",
        "loss terms: value ",
        ", surrogate ",
        ", entropy ",
        "The step was not applied",
        f"Dump: {dump}",
    ):
        assert part in message
    saved = torch.load(dump, weights_only=True)
    assert (saved["iteration"], saved["mini_batch"], saved["first_param"]) == (0, 7, "critic.mlp.2.weight")
    assert set(saved["loss_terms"]) == {"value", "surrogate", "entropy"}
    assert saved["batch"]["returns"].shape == (ENVS * STEPS // 4, 1)
    grad = saved["nonfinite_grads"]["critic.mlp.2.weight"]
    assert grad[0, 3].item() == bad or (math.isnan(bad) and math.isnan(grad[0, 3].item()))
    # The dump holds the model as it is: before the faulty mini-batch, finite.
    assert_bitwise(list(saved["actor_state_dict"].values()), list(alg._raw_actor.state_dict().values()))
    assert finite(alg)
    assert alg.safety_counters["grad_steps_skipped"] == 1  # type: ignore[attr-defined]


def test_raise_without_a_run_directory_says_so() -> None:
    alg = build(grad_guard={"mode": "raise", "dump_on_raise": True}, grad_faults={"loss_at_updates": [2]})
    with pytest.raises(NonFiniteError, match=r"mini-batch 2 .*loss terms: value nan.*No dump written"):
        train(alg)


@pytest.mark.parametrize("kind", ["grad", "loss"])
@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_skipped_mini_batches_are_as_if_they_never_ran(epoch: int, kind: str) -> None:
    # rsl-rl draws the mini-batch order once per update, the same for every epoch. So 3 epochs of which one is skipped
    # whole (4 mini-batches with a NaN gradient, or a NaN loss) are plain PPO's 2 epochs: the same steps, the same
    # adaptive learning rates (each skipped mini-batch's KL moved it, and the skip put it back), and the same logged
    # means, over the 8 applied mini-batches summed in the same order.
    skipped = [4 * epoch + k for k in range(4)]
    guarded = build(num_learning_epochs=3, grad_faults={"at_updates" if kind == "grad" else "loss_at_updates": skipped})
    plain = build(PPO, num_learning_epochs=2)
    assert train(guarded, iterations=1) == train(plain, iterations=1)
    assert_bitwise(snapshot(guarded), snapshot(plain))
    counters = guarded.safety_counters  # type: ignore[attr-defined]
    assert counters["grad_steps_skipped"] == 4 and counters["loss_nonfinite"] == (4 if kind == "loss" else 0)
    assert guarded.storage.returns.isfinite().all()  # the NaN return went into a copy of the mini-batch


def test_zero_mode_applies_a_nan_loss_step_but_logs_no_nan() -> None:
    # A NaN return makes the value loss NaN and, through its one sample, every critic gradient; the actor's gradients
    # come from the surrogate and the entropy alone and stay finite. Zero mode steps with the critic's set to 0: plain
    # PPO whose critic gradients are 0 at that step.
    guarded = build(grad_guard={"mode": "zero"}, grad_faults={"loss_at_updates": [3]})
    plain = build(PPO)
    at_steps(plain, (3,), lambda a: [p.grad.zero_() for p in a.critic.parameters()])  # type: ignore[union-attr]
    (losses,), (reference,) = train(guarded, iterations=1), train(plain, iterations=1)
    assert_bitwise(snapshot(guarded), snapshot(plain))
    # The NaN value term is left out of its mean; the finite terms of that applied mini-batch stay in theirs.
    assert losses["surrogate"] == reference["surrogate"] and losses["entropy"] == reference["entropy"]
    assert math.isfinite(losses["value"])
    counters = guarded.safety_counters  # type: ignore[attr-defined]
    assert counters["grad_steps_zeroed"] == 1 and counters["loss_nonfinite"] == 1 and finite(guarded)


@pytest.mark.parametrize("mode", ["skip", "zero"])
def test_rewards_of_1e30_are_loss_events(mode: str) -> None:
    # Finite rewards of 1e30: the returns (about 1e30 to 1e32) still fit float32, the value loss (V - R)^2 (about
    # 1e60) does not: Inf. Its gradients are finite, so nothing else sees it: plain PPO logs an Inf value loss while
    # the overflowed norm makes the critic's clip coefficient 0 and Adam steps on zeros, every mini-batch. The guard
    # counts each such mini-batch; skip mode leaves every weight and all optimizer state untouched.
    guarded, plain = build(grad_guard={"mode": mode}), build(PPO)
    before = snapshot(guarded)
    (losses,), (reference,) = train(guarded, 1, reward_scale=1e30), train(plain, 1, reward_scale=1e30)
    assert math.isinf(reference["value"]) and finite(plain)
    counters = guarded.safety_counters  # type: ignore[attr-defined]
    assert counters["loss_nonfinite"] == counters["grad_nonfinite_steps"] == N
    assert counters["grad_nonfinite_elements"] == 0
    if mode == "skip":
        assert losses == {} and counters["grad_steps_skipped"] == N
        assert_bitwise(snapshot(guarded), before)
    else:  # applied, as in plain PPO, but counted; the Inf term stays out of the logged mean
        assert "value" not in losses and counters["grad_steps_skipped"] == 0
        assert_bitwise(snapshot(guarded), snapshot(plain))


def test_without_the_guard_a_mid_update_nan_stops_the_update_with_a_clear_error() -> None:
    # Mode off: the NaN gradient of mini-batch 3 goes through the clip into every actor weight, the std included; the
    # next forward's sampler raises "normal expects all elements of std >= 0.0". The update stops there.
    alg = build(grad_guard={"mode": "off"}, grad_faults={"at_updates": [3]})
    rollout(alg, 0)
    with pytest.raises(NonFiniteStateError, match=r"iteration 0 stopped at mini-batch 4 \(update 4\)") as err:
        alg.update()
    assert "normal expects all elements of std >= 0.0" in str(err.value.__cause__)
    assert alg.storage.step == 0  # the rollout was dropped, so the runner can collect the next one
    assert alg.faults_injected == {"grad_nonfinite": 1}  # type: ignore[attr-defined]


def test_a_weight_poisoned_between_mini_batches_stops_the_update_not_counted_as_gradient_events() -> None:
    # Something the guard does not see (here a hook after the optimizer's step 5) writes a NaN into a weight: every
    # later loss is NaN. The first one stops the update, instead of the guard skipping every mini-batch left.
    alg = build()
    counter = itertools.count()

    def poison(*_: Any) -> None:
        if next(counter) == 5:
            with torch.no_grad():
                alg.actor.mlp[0].weight[0, 0] = math.nan

    alg.optimizer.register_step_post_hook(poison)
    rollout(alg, 0)
    with pytest.raises(NonFiniteStateError, match=r"stopped at mini-batch 6 "):
        alg.update()
    assert alg.safety_counters["grad_steps_skipped"] == 1  # type: ignore[attr-defined]


def test_every_minibatch_skipped_learns_nothing_and_logs_no_loss() -> None:
    alg = build(grad_faults={"every": 1})
    before = snapshot(alg)
    (losses,) = train(alg, iterations=1)
    assert losses == {}
    after = snapshot(alg)
    assert_bitwise(after, before)  # weights, optimizer state (empty: Adam never stepped) and the adaptive rate
    assert alg.iteration_metrics()["grad_steps_skipped"] == N  # type: ignore[attr-defined]
    assert "grad_norm_preclip" not in alg.iteration_metrics()  # type: ignore[attr-defined]


def test_a_skip_puts_back_the_adaptive_learning_rate() -> None:
    guarded = build(grad_faults={"at_updates": [N - 1]})  # the last mini-batch of the first update
    plain = build(PPO)
    rates: list[float] = []
    at_steps(plain, tuple(range(N)), lambda a: rates.append(a.learning_rate))  # the rate each step uses
    skip_steps(plain, N - 1)
    train(guarded, iterations=1), train(plain, iterations=1)
    assert plain.learning_rate != rates[N - 2]  # the last mini-batch's KL did move the rate in plain PPO
    assert guarded.learning_rate == rates[N - 2]  # the rate the last applied step used
    assert guarded.optimizer.param_groups[0]["lr"] == rates[N - 2]
    assert_bitwise(snapshot(guarded)[:-2], snapshot(plain)[:-2])


def test_a_drill_over_two_updates_is_counted_per_update_and_in_total() -> None:
    alg = build(grad_faults={"at_updates": [2, N + 5], "loss_at_updates": [9]})
    train(alg, iterations=1)
    first = alg.iteration_metrics()  # type: ignore[attr-defined]
    assert (first["grad_nonfinite_steps"], first["faults_grad_nonfinite"], first["faults_loss_nonfinite"]) == (2, 1, 1)
    train(alg, iterations=1)
    second = alg.iteration_metrics()  # type: ignore[attr-defined]
    assert (second["grad_steps_skipped"], second["faults_grad_nonfinite"], second["faults_loss_nonfinite"]) == (1, 1, 0)
    assert alg.safety_counters["grad_steps_skipped"] == 3  # type: ignore[attr-defined]
    assert alg.faults_injected == {"grad_nonfinite": 2, "loss_nonfinite": 1}  # type: ignore[attr-defined]
    assert finite(alg)


def test_without_the_guard_the_drill_kills_the_model() -> None:
    # mode off is plain rsl-rl: the injected NaN goes through the clip into every actor weight.
    # The last mini-batch: one more forward with NaN weights would fail inside torch.normal ("std >= 0.0").
    alg = build(grad_guard={"mode": "off"}, grad_faults={"at_updates": [N - 1]})
    train(alg, iterations=1)
    assert alg.faults_injected == {"grad_nonfinite": 1}  # type: ignore[attr-defined]
    assert all(torch.isnan(p).all() for p in alg._raw_actor.parameters())


def test_checkpoints_keep_rsl_rl_format() -> None:
    alg = build()
    train(alg, iterations=1)
    plain = build(PPO)
    plain.load(alg.save(), None, strict=True)
    assert_bitwise(snapshot(plain), snapshot(alg))


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"faults.grad.param: unknown or frozen parameter 'actor.nope'; valid: \["):
        build(grad_faults={"at_updates": [1], "param": "actor.nope"})
    with pytest.raises(ConfigError, match=r"faults.grad.element: 96 is out of range for actor.mlp.0.weight \(96"):
        build(grad_faults={"at_updates": [1], "param": "actor.mlp.0.weight", "element": 96})
    with pytest.raises(ConfigError, match=r"safety\.grad_guard\.mode=skip with algorithm\.rnd_cfg set"):
        build(rnd_cfg={"weight": 1.0})
    with pytest.raises(ConfigError, match="unknown key"):
        build(grad_guard={"mode": "skip", "typo": 1})


def test_recurrent_policies_are_guarded_and_the_storage_is_never_poisoned() -> None:
    # Recurrent mini-batches are views into the rollout storage: the NaN-loss drill must write into a copy.
    guarded = build(recurrent=True, schedule="fixed", grad_faults={"loss_at_updates": [2], "at_updates": [6]})
    plain = build(PPO, recurrent=True, schedule="fixed")
    skip_steps(plain, 2, 6)
    rollout(guarded, 0), rollout(plain, 0)
    guarded.update(), plain.update()
    assert guarded.storage.returns.isfinite().all()
    assert_bitwise(snapshot(guarded), snapshot(plain))
    assert guarded.safety_counters["grad_steps_skipped"] == 2  # type: ignore[attr-defined]


def test_the_clip_schedule_is_stable_baselines3s_linear_schedule_after_each_rollout() -> None:
    # Worked example: rl-baselines3-zoo's lin_0.4 over 2M env steps gives the update after a rollout that brought the
    # env steps to n the clip 0.4 * (1 - n / 2e6); with rollouts of 16 x 512 = 8,192 env steps, 122 iterations end at
    # 999,424, where it is 0.4 * (1 - 999,424 / 2e6) = 0.2001152.
    final = 0.4 * (1.0 - 999_424 / 2.0e6)
    for i in (0, 1, 60, 121):
        assert linear_schedule(0.4, final, i, 122) == pytest.approx(0.4 * (1.0 - 8_192 * (i + 1) / 2.0e6), rel=1e-12)
    assert linear_schedule(0.4, 0.2, 121, 122) == 0.2
    assert linear_schedule(0.4, 0.2, 500, 122) == 0.2  # past the schedule (a resumed run): the final value


@pytest.mark.parametrize(
    ("name", "start", "final", "values"),
    [
        # 5 updates of a schedule from 0.4 to 0.2 over 4 iterations (0.4 - 0.2 * (i + 1) / 4, then kept). A large rate
        # makes the ratios leave the clip range, so the clip values decide the updates.
        ("clip_param", 0.4, 0.2, [0.35, 0.3, 0.25, 0.2, 0.2]),
        # From 0.1 to 0 likewise (0.1 - 0.1 * (i + 1) / 4). The bonus pulls the action std up, so its values decide the
        # std's updates.
        ("entropy_coef", 0.1, 0.0, [0.075, 0.05, 0.025, 0.0, 0.0]),
    ],
)
def test_a_schedule_is_plain_ppo_with_its_value_set_before_each_update(
    name: str, start: float, final: float, values: list[float]
) -> None:
    # The reference: rsl-rl's PPO whose value is set by hand before each update; checked against the constant value.
    kwargs = {name: start, "learning_rate": 0.05, "schedule": "fixed"}
    plain, scheduled = build(PPO, **kwargs), build(**{f"{name}_final": final}, schedule_iterations=4, **kwargs)
    constant = build(**kwargs)
    plain_losses, scheduled_losses = [], []
    for it, value in enumerate(values):
        rollout(plain, it)
        setattr(plain, name, value)
        plain_losses.append(plain.update())
        rollout(scheduled, it)
        scheduled_losses.append(scheduled.update())
        assert getattr(scheduled, name) == pytest.approx(value, abs=1e-15)
    assert scheduled_losses == plain_losses
    assert_bitwise(snapshot(scheduled), snapshot(plain))
    train(constant, iterations=5)
    assert getattr(constant, name) == start
    weights = [torch.cat([p.flatten() for p in alg._raw_actor.parameters()]) for alg in (constant, scheduled)]
    assert not torch.equal(*weights)


@pytest.mark.parametrize("key", ["clip_param_final", "entropy_coef_final"])
def test_a_schedule_without_its_length_is_a_config_error(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"algorithm\.{key}=0\.2: .*expected schedule_iterations >= 1"):
        build(**{key: 0.2})
