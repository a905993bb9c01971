"""Mirror augmentation (``algorithm.symmetry_cfg``): rsl-rl's symmetry extension fed by the task's declared mirror."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from tiny_env import TinyEnv, train_cfg

import robosafe_tasks  # noqa: F401  (registers the tasks, as tools/train.py does)
from robo_safe_rl.apps.train import main
from robo_safe_rl.bridge.mirror import Mirror, SignedPermutation
from robo_safe_rl.config.agent import SymmetryConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.rundir import RunDir
from robo_safe_rl.training.runner import SafeRunner
from robo_safe_rl.training.symmetry import check_symmetry, mirror_batch, reflect, reported_mirror_loss, symmetry_cfg


def test_reflect_worked_example() -> None:
    # out[i] = sign[i] * x[index[i]]: (1, 2, 3) with 0 <-> 2 traded and 1 negated is (3, -2, 1), row by row.
    m = SignedPermutation((2, 1, 0), (1, -1, 1))
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert torch.equal(reflect(x, m), torch.tensor([[3.0, -2.0, 1.0], [6.0, -5.0, 4.0]]))
    assert torch.equal(reflect(reflect(x, m), m), x)


class _Env:
    mirror = Mirror(SignedPermutation((1, 0, 2), (1, 1, -1)), SignedPermutation((0,), (-1,)))


def test_mirror_batch_appends_the_mirror_images() -> None:
    obs = TensorDict({"policy": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])}, batch_size=[2])
    actions = torch.tensor([[0.5], [-0.25]])
    out_obs, out_actions = mirror_batch(_Env(), obs=obs, actions=actions)
    assert out_obs.batch_size == torch.Size([4])
    expected = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [2.0, 1.0, -3.0], [5.0, 4.0, -6.0]])
    assert torch.equal(out_obs["policy"], expected)
    assert torch.equal(out_actions, torch.tensor([[0.5], [-0.25], [-0.5], [0.25]]))
    # rsl-rl's mirror loss asks for one of the two at a time.
    assert mirror_batch(_Env(), actions=actions)[0] is None and mirror_batch(_Env(), obs=obs)[1] is None


def test_symmetry_is_refused_for_a_task_without_a_mirror() -> None:
    check_symmetry(SymmetryConfig(), None, "half_cheetah")  # off: nothing to check
    with pytest.raises(ConfigError) as err:
        check_symmetry(SymmetryConfig(use_data_augmentation=True), None, "half_cheetah")
    assert str(err.value) == (
        "invalid config value algorithm.symmetry_cfg.use_data_augmentation=true: task=half_cheetah declares no "
        "left-right mirror (observation_mirror and action_mirror on its env); expected a task that "
        "does (python tools/train.py --list-tasks, column mirror)"
    )


def test_the_mirror_loss_coefficient_is_range_checked() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.symmetry_cfg\.mirror_loss_coeff=-1\.0"):
        SymmetryConfig(mirror_loss_coeff=-1.0)
    with pytest.raises(ConfigError, match=r"mirror_loss_coeff=0\.0: expected a number > 0 with use_mirror_loss=true"):
        SymmetryConfig(use_mirror_loss=True)


def test_the_mirrored_batch_keeps_the_device_and_an_env_without_a_mirror_is_named() -> None:
    obs = TensorDict({"policy": torch.zeros(2, 3)}, batch_size=[2], device="cpu")
    assert mirror_batch(_Env(), obs=obs)[0].device == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"^symmetry augmentation on TinyEnv, which has no mirror"):
        mirror_batch(TinyEnv(seed=0), obs=obs)


class MirroredTinyEnv(TinyEnv):
    """TinyEnv with a declared mirror: its dynamics (axes 0 and 1 pushed by actions 0 and 1, reward -|x|^2) are
    unchanged by trading axes 0 and 1 together with the two actions, and by negating axis 3."""

    def __init__(self, mirror: Mirror, seed: int = 1) -> None:
        super().__init__(seed=seed, num_envs=4)
        self.mirror = mirror


SWAP = Mirror(SignedPermutation((1, 0, 2, 3), (1, 1, 1, -1)), SignedPermutation((1, 0), (1, 1)))
IDENTITY = Mirror(SignedPermutation((0, 1, 2, 3), (1, 1, 1, 1)), SignedPermutation((0, 1), (1, 1)))


def trained(
    log_dir: Path, mirror: Mirror, augment: bool, updates: int = 1, mirror_normalization: bool | None = None
) -> SafeRunner:
    """A run of ``updates`` updates; ``mirror_normalization`` not None turns the observation normalisers on, with the
    option set so."""
    torch.manual_seed(0)
    algorithm: dict[str, object] = {"schedule": "fixed", "learning_rate": 1e-3}
    if augment:
        algorithm["symmetry_cfg"] = symmetry_cfg(SymmetryConfig(use_data_augmentation=True))
    cfg = train_cfg(algorithm)
    if mirror_normalization is not None:
        cfg["algorithm"]["mirror_normalization"] = mirror_normalization
        cfg["actor"]["obs_normalization"] = cfg["critic"]["obs_normalization"] = True
    run = SafeRunner(MirroredTinyEnv(mirror), cfg, log_dir=str(log_dir), device="cpu", files=RunDir(log_dir))
    run.learn(updates)
    return run


def weights(run: SafeRunner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in (*run.alg.actor.parameters(), *run.alg.critic.parameters())]


def test_augmenting_with_the_identity_changes_nothing_and_with_a_mirror_changes_the_update(tmp_path: Path) -> None:
    # A mini-batch followed by an exact copy of itself has the same mean losses, so the identity "mirror" trains as no
    # augmentation does (up to the order of float sums); a real mirror adds other samples and other gradients. This is
    # what shows the function reaching rsl-rl's update: augmentation that did nothing would pass the first check only.
    # One update: its forward passes draw actions for every sample of the (larger) batch from torch's generator, so
    # from the second rollout on the runs sample other actions.
    plain = weights(trained(tmp_path / "plain", IDENTITY, augment=False))
    same = weights(trained(tmp_path / "identity", IDENTITY, augment=True))
    mirrored = weights(trained(tmp_path / "swap", SWAP, augment=True))
    for a, b in zip(plain, same, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert max(float((a - b).abs().max()) for a, b in zip(plain, mirrored, strict=True)) > 1e-4


def test_augmentation_makes_the_policy_follow_its_mirror(tmp_path: Path) -> None:
    # The mean squared difference between the policy's mean at mirrored inputs and the mirror of its mean at the
    # originals (rsl-rl's mirror loss, Loss/symmetry), on 256 fixed inputs. Measured: 0.047 at the shared start; after
    # 100 updates 0.17 without augmentation and 0.0044 with it.
    def mirror_gap(run: SafeRunner) -> float:
        x = torch.randn(256, 4, generator=torch.Generator().manual_seed(5))
        obs = TensorDict({"policy": x}, batch_size=[256])
        both, _ = mirror_batch(run.env, obs=obs)
        with torch.no_grad():
            means = run.alg.actor(both)
        return float((means[256:] - reflect(means[:256], SWAP.action)).square().mean())

    plain = trained(tmp_path / "plain", SWAP, augment=False, updates=100)
    augmented = trained(tmp_path / "augmented", SWAP, augment=True, updates=100)
    assert mirror_gap(augmented) < 0.1 * mirror_gap(plain)


def test_the_reported_mirror_loss_is_rsl_rls_from_the_update_s_own_forward_pass(tmp_path: Path) -> None:
    # SafePPO's addition (9): augmenting without learning from the mirror loss, the update reports rsl-rl's value
    # (Symmetry.compute_loss, a second forward pass) from the means its own forward pass made. The same number, bit for
    # bit, and not a vacuous one: 8 random states of a policy trained 3 updates are far from symmetric.
    run = trained(tmp_path / "run", SWAP, augment=True, updates=3)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    both, _ = mirror_batch(run.env, obs=TensorDict({"policy": x}, batch_size=[8]))
    run.alg.actor(both, stochastic_output=True)  # the update's forward pass, which leaves the means on the actor
    reported = reported_mirror_loss(run.alg.symmetry, run.alg.actor.output_mean, 8)
    by_rsl_rl = run.alg.symmetry.compute_loss(run.alg.actor, SimpleNamespace(observations=both), 8)
    assert torch.equal(reported, by_rsl_rl) and not reported.requires_grad
    with torch.no_grad():
        means = run.alg.actor(both)
    assert torch.equal(reported, (means[8:] - reflect(means[:8], SWAP.action)).square().mean())
    assert float(reported) > 1e-6


def test_mirror_normalization_gives_the_normalisers_the_mirror_s_statistics(tmp_path: Path) -> None:
    # SafePPO's addition (10). One update, so both runs normalise the same first rollout (32 observations: 4 envs x 8
    # steps; the normalisers learn only after the update), and rsl-rl's running statistics, from count 0, are the
    # batch's own. SWAP trades axes 0 and 1 and negates axis 3; the rollout and its mirror image together have:
    # axes 0 and 1 the mean of the two means, and the variance of the pooled halves (the mean of the two variances
    # plus the squared half-gap of the means); axis 2 its own statistics; axis 3 mean 0 and its own second moment.
    plain = trained(tmp_path / "plain", SWAP, augment=True, mirror_normalization=False)
    mirrored = trained(tmp_path / "mirrored", SWAP, augment=True, mirror_normalization=True)
    for model in ("actor", "critic"):
        before = getattr(plain.alg, model).obs_normalizer
        after = getattr(mirrored.alg, model).obs_normalizer
        assert int(before.count) == 32 and int(after.count) == 64  # the mirror image was learnt from too
        m, v = before.mean.double(), before.std.double().square()
        pooled = (v[0] + v[1]) / 2 + ((m[0] - m[1]) / 2).square()
        expected_mean = torch.stack([(m[0] + m[1]) / 2, (m[0] + m[1]) / 2, m[2], torch.zeros((), dtype=m.dtype)])
        expected_var = torch.stack([pooled, pooled, v[2], v[3] + m[3].square()])
        torch.testing.assert_close(after.mean.double(), expected_mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(after.std.double().square(), expected_var, rtol=1e-5, atol=1e-6)
        # Not vacuous: the rollout alone is far from its mirror's statistics.
        assert abs(float(m[3])) > 1e-2 and abs(float(m[0] - m[1])) > 1e-2
    # What it is for: a mirrored observation normalises to the mirror of the normalised original (rollout alone: not).
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))
    for run, holds in ((mirrored, True), (plain, False)):
        normalise = run.alg.actor.obs_normalizer
        gap = float((normalise(reflect(x, SWAP.observation)) - reflect(normalise(x), SWAP.observation)).abs().max())
        assert (gap < 1e-5) is holds, gap


def test_mirror_normalization_needs_a_symmetry_extension(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        SymmetryConfig(mirror_normalization=True)
    assert str(err.value) == (
        "invalid config value algorithm.symmetry_cfg.mirror_normalization=True: expected false without "
        "use_data_augmentation or use_mirror_loss (no symmetry extension to mirror with)"
    )
    SymmetryConfig(use_mirror_loss=True, mirror_loss_coeff=1.0, mirror_normalization=True)  # either use will do
    # A runner built by hand, past the config.
    with pytest.raises(ConfigError, match=r"mirror_normalization=true without a symmetry extension"):
        trained(tmp_path / "run", SWAP, augment=False, updates=0, mirror_normalization=True)


TINY = ["task.num_envs=2", "runner.num_steps_per_env=8", "runner.max_iterations=2", "algorithm.num_mini_batches=2"]


def test_the_ant_trains_with_augmentation_from_the_command_line(tmp_path: Path) -> None:
    from benchmarks.runs import scalars

    run_dir = tmp_path / "run"
    assert main([*TINY, "task=ant", "algorithm.symmetry_cfg.use_data_augmentation=true", f"run_dir={run_dir}"]) == 0
    assert RunDir(run_dir).read_summary()["status"] == "completed"
    assert len(scalars(run_dir, "Loss/symmetry")) == 2  # both updates augmented and reported the mirror loss


def test_a_task_without_a_mirror_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    over = ["task=half_cheetah", "algorithm.symmetry_cfg.use_data_augmentation=true", f"run_dir={run_dir}"]
    assert main([*TINY, *over]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train: invalid config value algorithm.symmetry_cfg.use_data_augmentation=true: task=half_cheetah "
        "(RoboSafe/HalfCheetah-v0) declares no left-right mirror (observation_mirror and action_mirror on its env); "
        "expected a task that does (python tools/train.py --list-tasks, column mirror)"
    )
    assert not run_dir.exists()
