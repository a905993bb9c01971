"""Rebuild a trained policy the way training built it, and load its weights without running code from any file.

:func:`load_policy` takes a ``model_<iter>.pt`` or a run directory (its newest clean checkpoint) and:

1. reads the train dict that training saved beside the checkpoints
   (:meth:`~robo_safe_rl.rundir.RunDir.read_train_cfg`); a run without one is refused, never guessed from weights;
2. builds the actor as rsl-rl's ``PPO.construct_algorithm`` does: the class the dict's ``actor.class_name`` names,
   called with an observation template of the saved group sizes, the resolved ``obs_groups``, ``"actor"``, the
   action count and the dict's other actor keys. It is built on torch's ``meta`` device, so the dict's sizes
   allocate nothing;
3. reads ``actor_state_dict`` with the inspector's loader (``weights_only=True``) and assigns it after checking
   every name, shape and dtype: the observation normaliser's statistics come with it, the clip is the dict's;
4. returns the actor in eval mode, as ``OnPolicyRunner.get_inference_policy`` does (Isaac Lab's play idiom).

Class names in the saved dict are data from disk: only names of rsl_rl's and robo_safe_rl's modules are resolved,
and only torch modules are accepted; anything else is refused before it is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rsl_rl.utils import resolve_callable, resolve_class
from tensordict import TensorDict

from robo_safe_rl.checkpoint.loading import open_checkpoint
from robo_safe_rl.checkpoint.report import resolve_checkpoint
from robo_safe_rl.errors import CheckpointError, ConfigError
from robo_safe_rl.rundir import CONFIG_FILE, TRAIN_CFG_FILE, RunDir, SavedTrainCfg

ACTOR_KEY = "actor_state_dict"
"""Where rsl-rl's checkpoints keep the actor's weights and normaliser."""
#: ``module:Attr`` or ``module.Attr`` inside rsl_rl or robo_safe_rl, or a bare name (rsl-rl searches its own modules).
_ALLOWED_CLASS = re.compile(r"((rsl_rl|robo_safe_rl)(\.[A-Za-z]\w*)*[:.])?[A-Za-z]\w*")


@dataclass(frozen=True)
class LoadedPolicy:
    """A trained actor, rebuilt and loaded.

    Attributes:
        actor: rsl-rl's model in eval mode; called with a TensorDict of observation groups it returns the mean
            action (``stochastic_output=True`` samples).
        checkpoint: The file its weights came from.
        iteration: The iteration stored in the file, ``None`` when it stores none.
        saved: The run's saved train dict.
    """

    actor: torch.nn.Module
    checkpoint: Path
    iteration: int | None
    saved: SavedTrainCfg

    @property
    def obs_groups(self) -> list[str]:
        """The observation groups the actor reads."""
        return list(self.saved.train_cfg["obs_groups"]["actor"])

    @property
    def obs_dim(self) -> int:
        """Size of the actor's (flat) observation: its groups' last dimensions together."""
        return sum(self.saved.obs_shapes[g][-1] for g in self.obs_groups)

    @property
    def num_actions(self) -> int:
        """Size of the action."""
        return self.saved.num_actions

    @property
    def clock(self) -> int:
        """Policy steps each env of its run had taken when the checkpoint was saved: a task's step clock there (its
        reward curriculum's), ``(iteration + 1) x num_steps_per_env``; 0 when the file stores no iteration."""
        steps = self.saved.train_cfg.get("num_steps_per_env")
        if self.iteration is None or not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            return 0
        return (self.iteration + 1) * steps

    def task(self, given: str | None = None) -> str:
        """The gymnasium id to run the policy in: ``given`` (``--task``), else ``task.env_id`` of its run's config.

        Raises:
            ConfigError: If neither names one.
        """
        env_id = given or RunDir(self.checkpoint.parent).task_env_id()
        if not env_id:
            raise ConfigError(f"{self.checkpoint}: no --task given and no {CONFIG_FILE} with task.env_id beside it")
        return env_id

    def check_spaces(self, env: Any, env_id: str, hint: str = "") -> None:
        """Fail unless the gymnasium ``env`` (of the task ``env_id``) has the policy's observation and action sizes.

        Raises:
            ConfigError: Naming the checkpoint, both sizes and ``hint`` (``": wrong --task?"``).
        """
        obs, act = env.observation_space.shape, env.action_space.shape
        if (obs, act) != ((self.obs_dim,), (self.num_actions,)):
            raise ConfigError(
                f"{self.checkpoint}: the actor maps {self.obs_dim} observations to {self.num_actions} actions; "
                f"{env_id} has observations of shape {obs} and actions of shape {act}{hint}"
            )

    def describe(self) -> str:
        """``"ClippedMLPModel 28 -> 8: hidden_dims=[64, 64], activation=elu, ... (train_cfg.json)"``."""
        cfg = self.saved.train_cfg["actor"]
        name = str(cfg.get("class_name", "?")).replace(":", ".").rsplit(".", 1)[-1]
        keys = ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("class_name", "distribution_cfg"))
        return f"{name} {self.obs_dim} -> {self.num_actions}: {keys} ({TRAIN_CFG_FILE})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values: sizes and the actor's entry of the train dict."""
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.num_actions,
            "actor": self.saved.train_cfg["actor"],
            "source": TRAIN_CFG_FILE,
        }

    def act(self, obs: np.ndarray, *, stochastic: bool = False) -> np.ndarray:
        """The policy's action for one observation or a batch.

        Args:
            obs: Shape: (obs_dim,) or (batch, obs_dim), for an actor that reads one observation group.
            stochastic: Sample from the action distribution instead of taking its mean (rsl-rl turns torch's
                argument validation off, so a NaN std samples NaN rather than raising).

        Returns:
            Shape: (num_actions,) or (batch, num_actions), float32.

        Raises:
            ConfigError: If the actor reads several observation groups (call :attr:`actor` with a TensorDict).
        """
        if len(self.obs_groups) != 1:
            raise ConfigError(f"act() takes one observation array; this actor reads the groups {self.obs_groups}")
        return actor_action(self.actor, self.obs_groups[0], obs, stochastic=stochastic)


def actor_action(actor: torch.nn.Module, group: str, obs: np.ndarray, *, stochastic: bool = False) -> np.ndarray:
    """The action of an rsl-rl actor that reads the one observation group ``group`` (its mean, or a sample).

    Args:
        actor: rsl-rl's model (called with a TensorDict, it returns the mean action; ``stochastic_output`` samples).
        group: The observation group it reads (``policy``).
        obs: Shape: (obs_dim,) or (batch, obs_dim).
        stochastic: Sample from the action distribution instead of taking its mean.

    Returns:
        Shape: (num_actions,) or (batch, num_actions), float32.
    """
    batch = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
    single = batch.dim() == 1
    batch = batch.reshape(1, -1) if single else batch
    device = next(actor.parameters()).device
    td = TensorDict({group: batch.to(device)}, batch_size=[batch.shape[0]])
    with torch.inference_mode():
        out = actor(td, stochastic_output=stochastic).cpu().numpy().astype(np.float32)
    return out[0] if single else out


def load_policy(path: str | Path, *, device: str = "cpu") -> LoadedPolicy:
    """Rebuild the actor of a checkpoint, or of a run directory's newest clean checkpoint (module docstring).

    Args:
        path: A ``model_<iter>.pt`` beside its run's saved train dict, or a run directory.
        device: Torch device of the returned actor.

    Raises:
        CheckpointError: The path holds no usable checkpoint, the checkpoint is not rsl-rl's format, there is no
            saved train dict beside it, or the dict and the weights do not make one actor.
        ConfigError: The saved train dict is unreadable or malformed.
    """
    checkpoint = resolve_checkpoint(path)
    saved = RunDir(checkpoint.parent).read_train_cfg()
    if saved is None:
        raise CheckpointError(
            f"{checkpoint}: no {TRAIN_CFG_FILE} beside it, so its policy cannot be rebuilt as it was trained (a run of "
            f"an older version, or a checkpoint copied without it); copy the run's {TRAIN_CFG_FILE} beside it"
        )
    actor = _build_actor(saved, checkpoint)
    state, iteration = _actor_state(checkpoint)
    _check_fit(actor, state, checkpoint)
    actor.load_state_dict(state, strict=True, assign=True)
    actor.to(device).eval()
    return LoadedPolicy(actor, checkpoint, iteration, saved)


def _build_actor(saved: SavedTrainCfg, checkpoint: Path) -> torch.nn.Module:
    """The actor as training built it, on the meta device (no memory allocated, whatever the sizes say)."""
    where = checkpoint.parent / TRAIN_CFG_FILE
    cfg = saved.train_cfg["actor"]
    for name in _class_names(cfg):
        _check_class(name, where)
    try:
        actor_class, kwargs = resolve_class(cfg)
        with torch.device("meta"):
            obs = TensorDict({g: torch.zeros(1, *s) for g, s in saved.obs_shapes.items()}, batch_size=[1])
            return actor_class(obs, saved.train_cfg["obs_groups"], "actor", saved.num_actions, **kwargs)
    except Exception as err:  # the saved dict is data: any failure of the constructor is a bad dict
        raise ConfigError(f"{where}: its actor entry does not build a model ({type(err).__name__}: {err})") from err


def _class_names(cfg: Any) -> list[str]:
    """Every ``class_name`` in a nesting of dicts and lists (the actor's and its distribution's)."""
    if isinstance(cfg, dict):
        return [v for k, v in cfg.items() if k == "class_name"] + [n for v in cfg.values() for n in _class_names(v)]
    if isinstance(cfg, list):
        return [n for v in cfg for n in _class_names(v)]
    return []


def _check_class(name: Any, where: Path) -> None:
    if not isinstance(name, str) or not _ALLOWED_CLASS.fullmatch(name):
        raise ConfigError(f"{where}: class_name {name!r} refused: only classes of rsl_rl and robo_safe_rl are built")
    try:
        found = resolve_callable(name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{where}: class_name {name!r} not found ({err})") from err
    if not (isinstance(found, type) and issubclass(found, torch.nn.Module)):
        raise ConfigError(f"{where}: class_name {name!r} is not a torch module class")


def _actor_state(checkpoint: Path) -> tuple[dict[str, torch.Tensor], int | None]:
    """The actor's state dict and the stored iteration, read with ``weights_only=True``."""
    prefix = f"{ACTOR_KEY}/"
    with open_checkpoint(checkpoint, mmap=False) as loaded:
        state = {name.removeprefix(prefix): t.clone() for name, t in loaded.tensors() if name.startswith(prefix)}
        iteration = loaded.iteration
    if not state:
        raise CheckpointError(f"{checkpoint}: not an rsl-rl checkpoint: it holds no {ACTOR_KEY}")
    return state, iteration


def _check_fit(actor: torch.nn.Module, state: dict[str, torch.Tensor], checkpoint: Path) -> None:
    """Every tensor the actor expects, by name, shape, dtype and (dense) layout; nothing more."""
    expected = actor.state_dict()
    problems = [f"missing {k}" for k in expected if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in expected]
    for key, want in expected.items():
        got = state.get(key)
        if got is not None and (got.shape != want.shape or got.dtype != want.dtype or got.layout != torch.strided):
            problems.append(f"{key} is {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CheckpointError(
            f"{checkpoint}: its {ACTOR_KEY} does not fit the actor of {TRAIN_CFG_FILE} ({shown}): another run's "
            "checkpoint?"
        )
