"""Rebuild a training run's actor from its checkpoint alone, to run it in its task (``--policy``).

The checkpoint is read with the inspector's loader (``weights_only=True``, never running code from the file); its
``actor_state_dict`` is rsl-rl's ``MLPModel``'s: ``mlp.<i>.weight/bias``, ``distribution.std_param`` (or
``log_std_param``), and ``obs_normalizer._mean/_var/_std/count`` when observations were normalised.

The network settings:

- **shapes** always come from the state dict: the ``mlp.<i>.weight`` matrices in order of ``i`` give the input size
  (first matrix's columns), the hidden sizes (every matrix's rows but the last) and the action size (the last one's
  rows); observation normalisation is on when ``obs_normalizer._mean`` is present; the std parameterisation is
  ``log`` with ``distribution.log_std_param``, ``scalar`` with ``distribution.std_param``, none without either;
- **activation** and **obs_clip** are not visible in weights: they come from the run's ``config.yaml`` beside the
  checkpoint (``algo.activation``, ``algo.obs_clip``) when present, else rsl-rl's default ``elu`` and no clipping
  are assumed (and the report says so). Hidden sizes in ``config.yaml`` that disagree with the weights are reported.

The actor is built as :class:`~robo_safe_rl.training.models.ClippedMLPModel` (rsl-rl's ``MLPModel`` plus
``obs_clip``), the class training uses, with one observation group ``policy``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from robo_safe_rl.checkpoint.loading import open_checkpoint
from robo_safe_rl.errors import CheckpointError
from robo_safe_rl.training.models import ClippedMLPModel

ACTOR_KEY = "actor_state_dict"
DEFAULT_ACTIVATION = "elu"
_LINEAR = re.compile(r"mlp\.(\d+)\.weight")
_DISTRIBUTION = "rsl_rl.modules.distribution:GaussianDistribution"


@dataclass(frozen=True)
class NetworkSpec:
    """What is needed to rebuild the actor.

    Attributes:
        obs_dim: Input size.
        action_dim: Output size.
        hidden_dims: Hidden layer sizes.
        activation: rsl-rl activation name.
        obs_normalization: Whether an observation normaliser is part of the actor.
        obs_clip: Clamp of the normalised input, or ``None``.
        std_type: ``"scalar"``, ``"log"``, or ``None`` for a deterministic actor.
        source: Where activation and clipping came from: ``"config.yaml"`` or ``"assumed"``.
        notes: Disagreements and assumptions, one line each.
    """

    obs_dim: int
    action_dim: int
    hidden_dims: list[int]
    activation: str = DEFAULT_ACTIVATION
    obs_normalization: bool = False
    obs_clip: float | None = None
    std_type: str | None = "scalar"
    source: str = "assumed"
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``"28 -> [64, 64] -> 8, elu, obs normalisation off, obs clip none (activation from config.yaml)"``."""
        norm = "on" if self.obs_normalization else "off"
        return (
            f"{self.obs_dim} -> {self.hidden_dims} -> {self.action_dim}, {self.activation}, obs normalisation {norm}, "
            f"obs clip {self.obs_clip if self.obs_clip is not None else 'none'}, std {self.std_type or 'none'} "
            f"(activation and clip {'from config.yaml' if self.source == 'config.yaml' else 'assumed'})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "hidden_dims": self.hidden_dims,
            "activation": self.activation,
            "obs_normalization": self.obs_normalization,
            "obs_clip": self.obs_clip,
            "std_type": self.std_type,
            "source": self.source,
            "notes": self.notes,
        }


def load_actor_state(path: Path) -> tuple[dict[str, torch.Tensor], int | None]:
    """The actor's state dict and the stored iteration of an rsl-rl checkpoint.

    Raises:
        CheckpointError: If the file cannot be read, or holds no ``actor_state_dict``.
    """
    prefix = f"{ACTOR_KEY}/"
    with open_checkpoint(path, mmap=False) as loaded:
        state = {name.removeprefix(prefix): t.clone() for name, t in loaded.tensors() if name.startswith(prefix)}
        iteration = loaded.iteration
    if not state:
        raise CheckpointError(f"{path}: not an rsl-rl policy checkpoint: it holds no {ACTOR_KEY}")
    return state, iteration


def infer_spec(state: dict[str, torch.Tensor], path: Path | None = None) -> NetworkSpec:
    """The network's shapes from its state dict (module docstring), with the assumed activation and clip.

    Raises:
        CheckpointError: If the state dict holds no ``mlp.<i>.weight`` matrices.
    """
    linear = sorted((int(m.group(1)), t) for name, t in state.items() if (m := _LINEAR.fullmatch(name)))
    if not linear or any(t.dim() != 2 for _, t in linear):
        raise CheckpointError(f"{path}: the {ACTOR_KEY} holds no MLP (mlp.<i>.weight matrices)")
    weights = [t for _, t in linear]
    if "distribution.log_std_param" in state:
        std_type: str | None = "log"
    elif "distribution.std_param" in state:
        std_type = "scalar"
    else:
        std_type = None
    return NetworkSpec(
        obs_dim=int(weights[0].shape[1]),
        action_dim=int(weights[-1].shape[0]),
        hidden_dims=[int(w.shape[0]) for w in weights[:-1]],
        obs_normalization="obs_normalizer._mean" in state,
        std_type=std_type,
        notes=[f"activation {DEFAULT_ACTIVATION} and no obs clip assumed (no config.yaml beside the checkpoint)"],
    )


def network_spec(
    state: dict[str, torch.Tensor], config: dict[str, Any] | None, path: Path | None = None
) -> NetworkSpec:
    """The inferred shapes, with activation and clip from the run's config when it has them."""
    spec = infer_spec(state, path)
    algo = config.get("algo") if isinstance(config, dict) else None
    if not isinstance(algo, dict):
        return spec
    notes = []
    hidden = algo.get("actor_hidden_dims")
    if isinstance(hidden, list) and [int(h) for h in hidden] != spec.hidden_dims:
        notes.append(f"config.yaml says actor_hidden_dims {hidden}, the weights have {spec.hidden_dims}: weights used")
    clip = algo.get("obs_clip")
    return NetworkSpec(
        obs_dim=spec.obs_dim,
        action_dim=spec.action_dim,
        hidden_dims=spec.hidden_dims,
        activation=str(algo.get("activation") or DEFAULT_ACTIVATION),
        obs_normalization=spec.obs_normalization,
        obs_clip=float(clip) if isinstance(clip, (int, float)) else None,
        std_type=spec.std_type,
        source="config.yaml",
        notes=notes,
    )


def build_actor(spec: NetworkSpec, state: dict[str, torch.Tensor], path: Path | None = None) -> ClippedMLPModel:
    """Build the actor of ``spec`` and load ``state`` into it (NaN weights load as they are).

    Raises:
        CheckpointError: If the state dict does not fit the network (missing or unexpected keys, other shapes).
    """
    obs = TensorDict({"policy": torch.zeros(1, spec.obs_dim)}, batch_size=[1])
    distribution = None if spec.std_type is None else {"class_name": _DISTRIBUTION, "std_type": spec.std_type}
    actor = ClippedMLPModel(
        obs,
        {"actor": ["policy"]},
        "actor",
        spec.action_dim,
        spec.hidden_dims,
        spec.activation,
        spec.obs_normalization,
        distribution,
        obs_clip=spec.obs_clip,
    )
    try:
        actor.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(
            f"{path}: its {ACTOR_KEY} does not fit the rebuilt actor ({str(err).splitlines()[0]})"
        ) from err
    return actor.eval()


def policy_action(actor: ClippedMLPModel, obs: np.ndarray, *, stochastic: bool = False) -> np.ndarray:
    """The actor's action for one observation.

    Args:
        actor: The rebuilt actor.
        obs: Shape: (obs_dim,).
        stochastic: Sample from the action distribution instead of taking its mean (rsl-rl turns torch's argument
            validation off, so a NaN std samples NaN rather than raising).

    Returns:
        Shape: (action_dim,), float32.
    """
    td = TensorDict({"policy": torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(1, -1)}, batch_size=[1])
    with torch.inference_mode():
        out = actor(td, stochastic_output=stochastic)
    return out[0].numpy().astype(np.float32)
