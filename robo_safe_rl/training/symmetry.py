"""Mirror augmentation for rsl-rl's symmetry extension, from the task's declared mirror.

rsl-rl's :class:`rsl_rl.extensions.Symmetry` calls a ``data_augmentation_func(env=, obs=, actions=)`` on every
mini-batch and learns from the originals and their mirror images together (``use_data_augmentation``: each
mini-batch twice as large, the mirrored samples taking the original's advantage, return and old log-probability),
or adds a loss on the policy disagreeing with its own mirror image (``use_mirror_loss``). :func:`mirror_batch` is
that function for any task that declares its mirror (:mod:`robo_safe_rl.bridge.mirror`); ``algorithm.symmetry_cfg``
turns it on, and :func:`check_symmetry` refuses it for a task without one before anything trains.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn as nn
from rsl_rl.extensions import Symmetry
from rsl_rl.modules.distribution import BetaDistribution, GaussianDistribution
from tensordict import TensorDict

from robo_safe_rl.bridge.mirror import Mirror, SignedPermutation
from robo_safe_rl.config.agent import SymmetryConfig
from robo_safe_rl.errors import ConfigError
from robo_safe_rl.training.gsde import StateDependentNoiseDistribution

#: What rsl-rl resolves ``symmetry_cfg["data_augmentation_func"]`` to.
MIRROR_BATCH = "robo_safe_rl.training.symmetry:mirror_batch"


@functools.lru_cache(maxsize=16)
def _as_tensors(
    mirror: SignedPermutation, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mirror``'s index and sign as tensors on ``device``: made once, not at each of an update's mini-batches (on
    CUDA each would be a host-to-device copy)."""
    return torch.tensor(mirror.index, device=device), torch.tensor(mirror.sign, dtype=dtype, device=device)


def reflect(x: torch.Tensor, mirror: SignedPermutation) -> torch.Tensor:
    """The mirror image of ``x``: ``out[..., i] = sign[i] * x[..., index[i]]``. Shape: (..., size), as ``x``."""
    index, sign = _as_tensors(mirror, x.device, x.dtype)
    return x.index_select(-1, index) * sign


def mirror_batch(
    env: Any, obs: TensorDict | None = None, actions: torch.Tensor | None = None
) -> tuple[TensorDict | None, torch.Tensor | None]:
    """rsl-rl's ``data_augmentation_func``: each input followed by its mirror image along the batch.

    Args:
        env: The vector env (:class:`~robo_safe_rl.bridge.vec_adapter.GymVecEnv`), whose ``mirror`` says how.
        obs: Observations, group ``policy`` of shape (batch, num_obs); or None.
        actions: Actions, shape (batch, num_actions); or None.

    Returns:
        ``obs`` and ``actions`` with their mirror images appended: shapes (2 * batch, ...); None where the input was.

    Raises:
        ConfigError: If ``env`` has no mirror (a runner built by hand around a task that declares none).
    """
    mirror = getattr(env, "mirror", None)
    if mirror is None:
        raise ConfigError(
            f"symmetry augmentation on {type(env).__name__}, which has no mirror: expected a vector env with a "
            "`mirror` (robo_safe_rl.bridge.mirror.Mirror), as GymVecEnv has for a task that declares one"
        )
    if obs is not None:
        # The adapter's one group, ``policy``, is the task's observation vector: the mirror is declared for it.
        mirrored = TensorDict(
            {key: reflect(value, mirror.observation) for key, value in obs.items()},
            batch_size=obs.batch_size,
            device=obs.device,
        )
        obs = torch.cat([obs, mirrored], dim=0)
    if actions is not None:
        actions = torch.cat([actions, reflect(actions, mirror.action)], dim=0)
    return obs, actions


#: Distributions whose ``mean`` after a stochastic forward pass is what the deterministic forward pass returns
#: (``deterministic_output``): rsl-rl's Gaussian (and its heteroscedastic subclass) and Beta, and the project's gSDE.
#: rsl-rl's base class only says the deterministic output is "typically" the mean, so another distribution is not
#: assumed to be one of them.
MEAN_IS_OUTPUT = (GaussianDistribution, BetaDistribution, StateDependentNoiseDistribution)


def reports_from_forward(symmetry: Symmetry | None, actor: Any) -> bool:
    """Whether the update can report the mirror loss with :func:`reported_mirror_loss`: the mini-batch augmented (so
    the forward pass saw the mirrored observations), the loss not learnt from (so it needs no graph), and the actor's
    distribution one whose mean is its deterministic output (:data:`MEAN_IS_OUTPUT`)."""
    return (
        symmetry is not None
        and symmetry.use_data_augmentation
        and not symmetry.use_mirror_loss
        and isinstance(getattr(actor, "distribution", None), MEAN_IS_OUTPUT)
    )


def reported_mirror_loss(symmetry: Symmetry, means: torch.Tensor, original_batch_size: int) -> torch.Tensor:
    """rsl-rl's mirror loss of an augmented mini-batch, detached, as :meth:`Symmetry.compute_loss` reports it when the
    loss is not learnt from, from the action means the update's forward pass already computed over that mini-batch.

    ``compute_loss`` evaluates the actor again, deterministically, on the augmented observations (a forward pass with
    autograd, its graph then dropped); for the distributions of :data:`MEAN_IS_OUTPUT` the means of the stochastic
    forward pass are those outputs, bit for bit.

    Args:
        symmetry: The extension (its ``data_augmentation_func`` and ``env``).
        means: The actor's action means over the augmented mini-batch, shape (2 * original_batch_size, num_actions):
            the originals, then their mirror images.
        original_batch_size: The number of original samples.

    Returns:
        The mean squared difference between the means on the mirrored observations and the mirrored means on the
        originals (a 0-dim tensor without a graph).
    """
    with torch.no_grad():
        _, mirrored = symmetry.data_augmentation_func(env=symmetry.env, obs=None, actions=means[:original_batch_size])
        return nn.functional.mse_loss(means[original_batch_size:], mirrored[original_batch_size:])


def symmetry_cfg(cfg: SymmetryConfig) -> dict[str, Any] | None:
    """rsl-rl's ``symmetry_cfg`` entry: None when neither use is on (rsl-rl then builds no extension, and a run
    trains as it did before the option existed), else the flags with :func:`mirror_batch`."""
    if not (cfg.use_data_augmentation or cfg.use_mirror_loss):
        return None
    return {
        "data_augmentation_func": MIRROR_BATCH,
        "use_data_augmentation": cfg.use_data_augmentation,
        "use_mirror_loss": cfg.use_mirror_loss,
        "mirror_loss_coeff": cfg.mirror_loss_coeff,
    }


def check_symmetry(cfg: SymmetryConfig, mirror: Mirror | None, task: str) -> None:
    """Refuse symmetry for a task that declares no mirror (``mirror``: the task's, from a probe env; ``task``: its
    name and env id, for the message).

    Raises:
        ConfigError: Naming the option, the task and the attributes its env would need.
    """
    if symmetry_cfg(cfg) is not None and mirror is None:
        option = "use_data_augmentation" if cfg.use_data_augmentation else "use_mirror_loss"
        raise ConfigError(
            f"invalid config value algorithm.symmetry_cfg.{option}=true: task={task} declares no left-right mirror "
            "(observation_mirror and action_mirror on its env); expected a task that does (python tools/train.py "
            "--list-tasks, column mirror)"
        )
