"""The runner, algorithm and model nodes of the config, shaped like rsl-rl's train dict.

rsl-rl 5.5 configures a run with one nested dict: the runner's settings at the top level, then ``algorithm`` (PPO's
keyword arguments), ``actor`` and ``critic`` (the models' keyword arguments, the actor's output distribution nested as
``distribution_cfg``). Isaac Lab's ``RslRlOnPolicyRunnerCfg`` has the same shape. These dataclasses keep it, key for
key, so a value maps to rsl-rl's dict by its path: ``algorithm.desired_kl`` here is ``cfg["algorithm"]["desired_kl"]``
there and ``runner.save_interval`` is ``cfg["save_interval"]``. The one function that builds the dict,
:func:`robo_safe_rl.training.rsl_cfg.build_rsl_rl_cfg`, only adds class names and the safety settings.

Keys that are this project's own additions, not rsl-rl's, say so in their documentation: ``runner.reward_clip``,
``runner.normalize_rewards``, ``actor.obs_clip`` / ``critic.obs_clip``. Defaults are rsl-rl's and Isaac Lab's
locomotion defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from robo_safe_rl.config.checks import float_in, int_in, require

#: rsl-rl's activation names (``rsl_rl.utils.resolve_nn_activation``).
ACTIVATIONS = frozenset(
    {"elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish", "identity"}
)


class Logger(Enum):
    """Where rsl-rl writes its metrics (and ``Safety/*``): rsl-rl's ``logger`` choice, as in Isaac Lab."""

    tensorboard = "tensorboard"
    wandb = "wandb"  # Weights & Biases (plus TensorBoard files in the run directory); needs the `wandb` package
    neptune = "neptune"  # Neptune (plus TensorBoard files); needs `neptune` and NEPTUNE_API_TOKEN, NEPTUNE_USERNAME


class Schedule(Enum):
    """rsl-rl's learning-rate schedule."""

    adaptive = "adaptive"  # adapt the lr after every mini-batch to keep the KL near desired_kl
    fixed = "fixed"


class Noise(Enum):
    """The actor's exploration noise: which output distribution it samples its actions from."""

    gaussian = "gaussian"  # rsl-rl's GaussianDistribution: independent noise on every action of every step
    gsde = "gsde"  # addition: state-dependent noise held for a few steps (robo_safe_rl/training/gsde.py)


class StdType(Enum):
    """How the Gaussian policy parameterises its action std (rsl-rl's ``std_type``)."""

    scalar = "scalar"
    log = "log"


@dataclass
class RunnerConfig:
    """The top level of rsl-rl's train dict: the rollout/update loop, checkpoints and logging."""

    num_steps_per_env: int = 24
    """Env steps per env per iteration; a batch is num_envs x num_steps_per_env transitions."""
    max_iterations: int = 200
    """Iterations to run (``learn(num_learning_iterations=...)``; after a resume: this many more)."""
    save_interval: int = 50
    """Write ``model_<iter>.pt`` every this many iterations (and at the end)."""
    experiment_name: str = "${task.name}"
    """Folder under ``logs/`` that groups the runs of one experiment."""
    run_name: str = ""
    """Shown in rsl-rl's iteration printout when set."""
    check_for_nan: bool = True
    """rsl-rl's own check of env outputs (raises on NaN; SafeStep should have removed them first). Ours checks Inf
    too."""
    logger: Logger = Logger.tensorboard
    """``tensorboard``, ``wandb`` or ``neptune``; the ``Safety/*`` scalars go to the same place."""
    wandb_project: str = "robo_safe_rl"
    """W&B project of ``logger=wandb`` (the run is named after the run directory)."""
    neptune_project: str = "robo_safe_rl"
    """Neptune project of ``logger=neptune`` (under the NEPTUNE_USERNAME workspace)."""
    reward_clip: float | None = None
    """Addition (not rsl-rl's): clamp each step's reward to ``[-reward_clip, reward_clip]`` in the runner before PPO
    sees it (episode returns in the logs stay unclipped); ``None`` leaves rewards alone."""
    normalize_rewards: bool = False
    """Addition (not rsl-rl's): PPO sees each reward divided by the running std of the discounted return, clipped to
    +-10 (Stable-Baselines3's ``VecNormalize(norm_reward=True)``, rl-baselines3-zoo's ``normalize: true``;
    :mod:`robo_safe_rl.training.reward_scale`), after ``reward_clip``. Logged returns stay the env's."""

    def __post_init__(self) -> None:
        int_in("runner.num_steps_per_env", self.num_steps_per_env, 1)
        int_in("runner.max_iterations", self.max_iterations, 1)
        int_in("runner.save_interval", self.save_interval, 1)
        require(bool(self.experiment_name), "runner.experiment_name", self.experiment_name, "a non-empty name")
        for key in ("wandb_project", "neptune_project"):
            require(bool(getattr(self, key)), f"runner.{key}", getattr(self, key), "a non-empty project name")
        if self.reward_clip is not None:
            float_in("runner.reward_clip", self.reward_clip, 0.0, 1.0e9, low_open=True)


@dataclass
class SymmetryConfig:
    """rsl-rl's ``symmetry_cfg`` (``rsl_rl.extensions.Symmetry``), with the task's own mirror as its augmentation
    function (:mod:`robo_safe_rl.training.symmetry`); needs a task that declares one (``python tools/train.py
    --list-tasks``, column mirror). Both uses off (the default) builds no extension."""

    use_data_augmentation: bool = False
    """Learn from every mini-batch and its mirror image (twice the samples per optimizer step)."""
    use_mirror_loss: bool = False
    """Add ``mirror_loss_coeff`` x the squared difference between the policy's mean action at a mirrored observation
    and the mirror of its mean action at the original."""
    mirror_loss_coeff: float = 0.0
    """Weight of the mirror loss in PPO's loss, > 0 with ``use_mirror_loss``."""
    mirror_normalization: bool = False
    """Addition (not rsl-rl's): the observation normalisers learn from each rollout and its mirror image, so that their
    statistics are the mirror's own (a mirrored observation normalises to the mirror of the normalised original); off,
    they learn from the rollout alone, as in rsl-rl. Needs one of the two uses above."""

    def __post_init__(self) -> None:
        float_in("algorithm.symmetry_cfg.mirror_loss_coeff", self.mirror_loss_coeff, 0.0, 1.0e3)
        require(
            not self.mirror_normalization or self.use_data_augmentation or self.use_mirror_loss,
            "algorithm.symmetry_cfg.mirror_normalization",
            self.mirror_normalization,
            "false without use_data_augmentation or use_mirror_loss (no symmetry extension to mirror with)",
        )
        require(
            not self.use_mirror_loss or self.mirror_loss_coeff > 0.0,
            "algorithm.symmetry_cfg.mirror_loss_coeff",
            self.mirror_loss_coeff,
            "a number > 0 with use_mirror_loss=true (0 adds nothing to the loss)",
        )


@dataclass
class AlgorithmConfig:
    """rsl-rl's PPO keyword arguments (``cfg["algorithm"]``)."""

    learning_rate: float = 1.0e-3
    """Adam learning rate (the starting value under the adaptive schedule)."""
    critic_learning_rate: float | None = None
    """Addition (not rsl-rl's): with a number, the critic's parameters learn at this constant rate in a parameter
    group of their own, and ``schedule`` moves only the actor's rate; None keeps rsl-rl's one rate for both networks,
    which the adaptive schedule sets from the actor's KL alone."""
    schedule: Schedule = Schedule.adaptive
    desired_kl: float | None = 0.01
    """Target KL per mini-batch for the adaptive schedule."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip, applied to actor and critic separately."""
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    """PPO's clip range (of the probability ratio, and of the value change with ``use_clipped_value_loss``)."""
    clip_param_final: float | None = None
    """Addition (not rsl-rl's): with a number, the clip range falls linearly from ``clip_param`` to this value over
    ``runner.max_iterations`` (Stable-Baselines3's linear ``clip_range`` schedule, evaluated as it does after each
    rollout: the update of iteration i of N uses ``clip_param + (clip_param_final - clip_param) * (i + 1) / N``, and
    iterations past N keep the final value); None keeps rsl-rl's constant clip."""
    gamma: float = 0.99
    lam: float = 0.95
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.01
    entropy_coef_final: float | None = None
    """Addition (not rsl-rl's): with a number, the entropy bonus falls (or rises) linearly from ``entropy_coef`` to this
    value over ``runner.max_iterations``, on the clip schedule's timing (the update of iteration i of N uses
    ``entropy_coef + (entropy_coef_final - entropy_coef) * (i + 1) / N``, iterations past N the final value): a large
    bonus while the policy still has to find a gait, a small one once it has; None keeps rsl-rl's constant bonus."""
    use_clipped_value_loss: bool = True
    normalize_advantage_per_mini_batch: bool = False
    symmetry_cfg: SymmetryConfig = field(default_factory=SymmetryConfig)

    def __post_init__(self) -> None:
        float_in("algorithm.learning_rate", self.learning_rate, 0.0, 1.0, low_open=True)
        if self.critic_learning_rate is not None:
            float_in("algorithm.critic_learning_rate", self.critic_learning_rate, 0.0, 1.0, low_open=True)
        if self.desired_kl is not None:
            float_in("algorithm.desired_kl", self.desired_kl, 0.0, 10.0, low_open=True)
        require(
            self.schedule is not Schedule.adaptive or self.desired_kl is not None,
            "algorithm.desired_kl",
            self.desired_kl,
            "a number when algorithm.schedule=adaptive",
        )
        float_in("algorithm.max_grad_norm", self.max_grad_norm, 0.0, 1.0e6, low_open=True)
        int_in("algorithm.num_learning_epochs", self.num_learning_epochs, 1)
        int_in("algorithm.num_mini_batches", self.num_mini_batches, 1)
        float_in("algorithm.clip_param", self.clip_param, 0.0, 1.0, low_open=True)
        if self.clip_param_final is not None:
            float_in("algorithm.clip_param_final", self.clip_param_final, 0.0, 1.0)
        float_in("algorithm.gamma", self.gamma, 0.0, 1.0)
        float_in("algorithm.lam", self.lam, 0.0, 1.0)
        float_in("algorithm.value_loss_coef", self.value_loss_coef, 0.0, 1.0e3)
        float_in("algorithm.entropy_coef", self.entropy_coef, 0.0, 1.0e3)
        if self.entropy_coef_final is not None:
            float_in("algorithm.entropy_coef_final", self.entropy_coef_final, 0.0, 1.0e3)


def effective_std_range(std_range: list[float], std_floor: float | None) -> list[float]:
    """The ``[min, max]`` rsl-rl clamps the action std into: ``std_range`` with its minimum raised to ``std_floor``
    (never lowered). Example: the Ant's ``[0.4, 1e6]`` under ``ppo_conservative``'s floor of 0.05 stays ``[0.4, 1e6]``;
    the HalfCheetah's ``[1e-6, 1e6]`` becomes ``[0.05, 1e6]``."""
    low, high = std_range
    return [low if std_floor is None else max(low, std_floor), high]


@dataclass
class DistributionConfig:
    """rsl-rl's ``GaussianDistribution`` keyword arguments (``cfg["actor"]["distribution_cfg"]``), or those of the
    gSDE distribution with ``noise=gsde``."""

    noise: Noise = Noise.gaussian
    """Addition (not rsl-rl's): the distribution, :class:`Noise`."""
    init_std: float = 1.0
    """Initial action std of the Gaussian policy."""
    std_type: StdType = StdType.scalar
    std_range: list[float] = field(default_factory=lambda: [1.0e-6, 1.0e6])
    """``[min, max]`` of the action std; rsl-rl clamps the std into it (and raises the minimum to 1e-6)."""
    std_floor: float | None = None
    """Addition (not rsl-rl's): a floor under ``std_range``'s minimum that never lowers it: rsl-rl gets
    ``[max(std_range[0], std_floor), std_range[1]]``. A preset sets it (``ppo_conservative``: 0.05), so that it keeps
    a task's own higher floor (the Ant's) instead of replacing it; None adds none."""
    noise_features: int = 64
    """Addition, with ``noise=gsde`` only: features of the noise function (extra outputs of the actor's last layer),
    at most 4096 (a hidden layer here has 128-256 units; more features than that only cost memory)."""
    noise_interval: int = 4
    """Addition, with ``noise=gsde`` only: env steps a draw of the noise function is held for (Stable-Baselines3's
    ``sde_sample_freq``: 4 in rl-baselines3-zoo's PyBullet recipes)."""

    def __post_init__(self) -> None:
        float_in("actor.distribution_cfg.init_std", self.init_std, 0.0, 1.0e3, low_open=True)
        int_in("actor.distribution_cfg.noise_features", self.noise_features, 1, 4096)
        int_in("actor.distribution_cfg.noise_interval", self.noise_interval, 1)
        require(
            len(self.std_range) == 2,
            "actor.distribution_cfg.std_range",
            list(self.std_range),
            "two numbers [min, max]",
        )
        low, high = self.std_range
        float_in("actor.distribution_cfg.std_range[0]", low, 0.0, 1.0e6, low_open=True)
        float_in("actor.distribution_cfg.std_range[1]", high, low, 1.0e6, low_open=True)
        if self.std_floor is not None:
            float_in("actor.distribution_cfg.std_floor", self.std_floor, 0.0, high, low_open=True)


@dataclass
class ModelConfig:
    """rsl-rl's ``MLPModel`` keyword arguments, plus ``obs_clip``."""

    #: The key of this node in the config, for messages.
    path: ClassVar[str] = "model"

    hidden_dims: list[int] = field(default_factory=lambda: [256, 128, 128])
    activation: str = "elu"
    obs_normalization: bool = False
    """Running mean/std normalisation of the inputs (rsl-rl's ``EmpiricalNormalization``)."""
    obs_clip: float | None = None
    """Addition (not rsl-rl's): clamp the (normalised) network input to ``[-obs_clip, obs_clip]``; ``None`` leaves
    it alone."""

    def __post_init__(self) -> None:
        require(
            self.activation.lower() in ACTIVATIONS,
            f"{self.path}.activation",
            self.activation,
            f"one of rsl-rl's activations {sorted(ACTIVATIONS)}",
        )
        dims = self.hidden_dims
        require(
            len(dims) > 0 and all(isinstance(d, int) and d > 0 for d in dims),
            f"{self.path}.hidden_dims",
            list(dims),
            "a non-empty list of positive layer widths",
        )
        if self.obs_clip is not None:
            float_in(f"{self.path}.obs_clip", self.obs_clip, 0.0, 1.0e9, low_open=True)


@dataclass
class ActorConfig(ModelConfig):
    """The policy network (``cfg["actor"]``): an MLP with a Gaussian output distribution."""

    path: ClassVar[str] = "actor"

    distribution_cfg: DistributionConfig = field(default_factory=DistributionConfig)


@dataclass
class CriticConfig(ModelConfig):
    """The value network (``cfg["critic"]``)."""

    path: ClassVar[str] = "critic"
