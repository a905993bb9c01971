"""Typed schemas of the training configuration, registered with Hydra's ConfigStore.

The YAML files in ``configs/`` only choose and set values; every key and its default is defined and documented here.
A typo fails at composition (structured configs are closed), a value out of range fails in ``__post_init__`` when
the config is converted with ``OmegaConf.to_object`` -- the first thing the training entry does, before anything is
built. rsl-rl's own names pass through unchanged (``clip_param``, ``lam``, ``desired_kl``, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from robo_safe_rl.config.checks import float_in, int_in, require
from robo_safe_rl.config.grad_guard import GradFaultCfg, GradGuardCfg
from robo_safe_rl.config.recovery import PolicyFaultConfig, RecoveryConfig
from robo_safe_rl.config.safe_step import EnvFaultConfig, SafeStepConfig

#: rsl-rl's activation names (``rsl_rl.utils.resolve_nn_activation``).
ACTIVATIONS = frozenset(
    {"elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish", "identity"}
)


class Schedule(Enum):
    """rsl-rl's learning-rate schedule."""

    adaptive = "adaptive"  # adapt the lr after every mini-batch to keep the KL near desired_kl
    fixed = "fixed"


class StdType(Enum):
    """How the Gaussian policy parameterises its action std (rsl-rl's ``std_type``)."""

    scalar = "scalar"
    log = "log"


@dataclass
class TaskConfig:
    """Which environment to train on and how many copies of it."""

    name: str = MISSING
    """Short task name, used for the experiment folder (``ant``)."""
    env_id: str = MISSING
    """Gymnasium id of the task (``RoboSafe/Ant-v0``); the tool imports ``envs`` so the id is registered."""
    num_envs: int = 16
    """Environments stepped in lock-step (in-process). Each is one PyBullet client."""
    max_episode_steps: int | None = None
    """Time limit in env steps; ``None`` keeps the task's registered limit (1000 for Ant)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gymnasium.make``."""

    def __post_init__(self) -> None:
        int_in("task.num_envs", self.num_envs, 1)
        if self.max_episode_steps is not None:
            int_in("task.max_episode_steps", self.max_episode_steps, 1)


@dataclass
class AlgoConfig:
    """PPO hyperparameters (rsl-rl names) and the actor-critic networks. Defaults are rsl-rl / Isaac Lab's."""

    learning_rate: float = 1.0e-3
    """Adam learning rate (the starting value under the adaptive schedule)."""
    schedule: Schedule = Schedule.adaptive
    desired_kl: float | None = 0.01
    """Target KL per mini-batch for the adaptive schedule."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip, applied to actor and critic separately."""
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.01
    use_clipped_value_loss: bool = True
    normalize_advantage_per_mini_batch: bool = False
    actor_hidden_dims: list[int] = field(default_factory=lambda: [256, 128, 128])
    critic_hidden_dims: list[int] = field(default_factory=lambda: [256, 128, 128])
    activation: str = "elu"
    init_std: float = 1.0
    """Initial action std of the Gaussian policy."""
    std_type: StdType = StdType.scalar
    std_min: float = 1.0e-6
    """Lower bound of the action std (rsl-rl's ``std_range[0]``)."""
    std_max: float = 1.0e6
    obs_normalization: bool = False
    """Running mean/std normalisation of actor and critic inputs (rsl-rl's ``EmpiricalNormalization``)."""
    obs_clip: float | None = None
    """Clamp the (normalised) network input to ``[-obs_clip, obs_clip]``; ``None`` leaves it alone."""
    reward_clip: float | None = None
    """Clamp each step's reward to ``[-reward_clip, reward_clip]`` before PPO sees it (episode returns in the logs
    stay unclipped); ``None`` leaves rewards alone."""

    def __post_init__(self) -> None:
        float_in("algo.learning_rate", self.learning_rate, 0.0, 1.0, low_open=True)
        if self.desired_kl is not None:
            float_in("algo.desired_kl", self.desired_kl, 0.0, 10.0, low_open=True)
        require(
            self.schedule is not Schedule.adaptive or self.desired_kl is not None,
            "algo.desired_kl",
            self.desired_kl,
            "a number when algo.schedule=adaptive",
        )
        float_in("algo.max_grad_norm", self.max_grad_norm, 0.0, 1.0e6, low_open=True)
        int_in("algo.num_learning_epochs", self.num_learning_epochs, 1)
        int_in("algo.num_mini_batches", self.num_mini_batches, 1)
        float_in("algo.clip_param", self.clip_param, 0.0, 1.0, low_open=True)
        float_in("algo.gamma", self.gamma, 0.0, 1.0)
        float_in("algo.lam", self.lam, 0.0, 1.0)
        float_in("algo.value_loss_coef", self.value_loss_coef, 0.0, 1.0e3)
        float_in("algo.entropy_coef", self.entropy_coef, 0.0, 1.0e3)
        require(
            self.activation.lower() in ACTIVATIONS,
            "algo.activation",
            self.activation,
            f"one of rsl-rl's activations {sorted(ACTIVATIONS)}",
        )
        for key in ("actor_hidden_dims", "critic_hidden_dims"):
            dims = getattr(self, key)
            require(
                len(dims) > 0 and all(isinstance(d, int) and d > 0 for d in dims),
                f"algo.{key}",
                dims,
                "a non-empty list of positive layer widths",
            )
        float_in("algo.init_std", self.init_std, 0.0, 1.0e3, low_open=True)
        float_in("algo.std_min", self.std_min, 0.0, 1.0e6, low_open=True)
        float_in("algo.std_max", self.std_max, self.std_min, 1.0e6, low_open=True)
        for key in ("obs_clip", "reward_clip"):
            if getattr(self, key) is not None:
                float_in(f"algo.{key}", getattr(self, key), 0.0, 1.0e9, low_open=True)


@dataclass
class RunnerConfig:
    """The rollout/update loop (rsl-rl's runner settings)."""

    num_steps_per_env: int = 24
    """Env steps per env per iteration; a batch is num_envs x num_steps_per_env transitions."""
    max_iterations: int = 200
    save_interval: int = 50
    """Write ``model_<iter>.pt`` every this many iterations (and at the end)."""
    experiment_name: str = "${task.name}"
    """Folder under ``logs/`` that groups the runs of one experiment."""
    check_for_nan: bool = True
    """rsl-rl's own check of env outputs (raises on NaN; SafeStep should have removed them first)."""

    def __post_init__(self) -> None:
        int_in("runner.num_steps_per_env", self.num_steps_per_env, 1)
        int_in("runner.max_iterations", self.max_iterations, 1)
        int_in("runner.save_interval", self.save_interval, 1)
        require(bool(self.experiment_name), "runner.experiment_name", self.experiment_name, "a non-empty name")


@dataclass
class SafetyConfig:
    """Where each fault is caught (see DESIGN.md's safety model)."""

    grad_guard: GradGuardCfg = field(default_factory=GradGuardCfg)
    step: SafeStepConfig = field(default_factory=SafeStepConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)


@dataclass
class FaultsConfig:
    """Fire-drill fault injection, off by default, grouped by where the fault enters."""

    grad: GradFaultCfg = field(default_factory=GradFaultCfg)
    env: EnvFaultConfig = field(default_factory=EnvFaultConfig)
    policy: PolicyFaultConfig = field(default_factory=PolicyFaultConfig)


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


@dataclass
class TrainConfig:
    """The root of ``configs/train.yaml``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    seed: int = 1
    """Seeds torch, numpy and the env resets (env i of rank r gets seed + 1000 r + i)."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; under torchrun, CUDA ranks use
    ``cuda:LOCAL_RANK`` and CPU ranks use gloo."""
    run_dir: str = MISSING
    """Where this run writes everything (checkpoints, events, config.yaml, incidents/, summary.json)."""
    resume: str | None = None
    """Continue from a checkpoint: a ``model_<iter>.pt`` file, or a run directory (its newest clean checkpoint).
    Model, optimizer state, normalisers and the iteration counter are restored; the run goes on for
    ``runner.max_iterations`` more iterations in ``run_dir``."""

    def __post_init__(self) -> None:
        require(isinstance(self.seed, int) and self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(bool(_DEVICE.match(self.device)), "device", self.device, "one of auto, cpu, cuda, cuda:N")
        require(bool(self.run_dir), "run_dir", self.run_dir, "a directory path")
        # rsl-rl splits num_envs x num_steps_per_env transitions into num_mini_batches; an empty mini-batch trains on
        # nothing and logs NaN losses without any error.
        batch = self.task.num_envs * self.runner.num_steps_per_env
        require(
            batch >= self.algo.num_mini_batches,
            "algo.num_mini_batches",
            self.algo.num_mini_batches,
            f"at most task.num_envs x runner.num_steps_per_env = {batch} (one transition per mini-batch at least)",
        )


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (``train.yaml`` starts from ``train_schema``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
