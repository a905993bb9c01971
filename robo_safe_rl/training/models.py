"""rsl-rl's MLP model with clipping of the normalised observations (the conservative presets use it).

rsl-rl's ``EmpiricalNormalization`` does not clip: one observation far outside the running statistics (a sensor
glitch, a physics spike that stayed finite) reaches the network as a huge input, and an overflow there turns the
policy's output non-finite. Clipping the normalised input to ``[-obs_clip, obs_clip]`` (Stable-Baselines3's
``VecNormalize`` default is 10) bounds what any single observation can do.

rsl-rl's exporters (``as_jit``, ``as_onnx``) do not call ``get_latent``: their wrappers copy ``obs_normalizer`` and
``mlp`` and run them in turn, so an exported ClippedMLPModel would silently lose its clip and act differently from
the trained policy on exactly the observations the clip is for. The exports here put the clip back, after the
normaliser, inside the exported graph.
"""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.models import MLPModel
from tensordict import TensorDict
from torch import nn

from robo_safe_rl.errors import ConfigError


class ClippedMLPModel(MLPModel):
    """:class:`rsl_rl.models.MLPModel` whose (normalised) input is clamped to ``[-obs_clip, obs_clip]``.

    Args:
        *args: rsl-rl's ``MLPModel`` arguments.
        obs_clip: Bound of the network input after normalisation; ``None`` disables clipping.
        **kwargs: rsl-rl's ``MLPModel`` keyword arguments.
    """

    def __init__(self, *args: Any, obs_clip: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if obs_clip is not None and not obs_clip > 0:
            node = args[2] if len(args) > 2 else kwargs.get("obs_set", "model")  # rsl-rl's obs_set: actor or critic
            raise ConfigError(f"invalid config value {node}.obs_clip={obs_clip!r}: expected a number > 0 or null")
        self.obs_clip = obs_clip

    def get_latent(self, obs: TensorDict, masks: torch.Tensor | None = None, hidden_state: Any = None) -> torch.Tensor:
        """The normalised observation, clamped. Shape: (batch, obs_dim)."""
        latent = super().get_latent(obs, masks, hidden_state)
        return latent if self.obs_clip is None else latent.clamp(-self.obs_clip, self.obs_clip)

    def as_jit(self) -> nn.Module:
        """rsl-rl's TorchScript-ready copy, with the clip in it. Input shape: (batch, obs_dim)."""
        return self._with_clip(super().as_jit())

    def as_onnx(self, verbose: bool = False) -> nn.Module:
        """rsl-rl's ONNX-ready copy, with the clip in it. Input shape: (batch, obs_dim)."""
        return self._with_clip(super().as_onnx(verbose))

    def _with_clip(self, exported: nn.Module) -> nn.Module:
        """``exported`` with ``obs_normalizer`` followed by the clip (the order of :meth:`get_latent`).

        Raises:
            ConfigError: If rsl-rl's export wrapper has no ``obs_normalizer`` to follow (another rsl-rl version):
                exporting without the clip would give a policy that acts differently.
        """
        if self.obs_clip is None:
            return exported
        normalizer = getattr(exported, "obs_normalizer", None)
        if not isinstance(normalizer, nn.Module):
            raise ConfigError(
                f"cannot export {type(self).__name__} with obs_clip={self.obs_clip}: rsl-rl's "
                f"{type(exported).__name__} has no obs_normalizer module to put the clip after (an rsl-rl version this "
                "code does not know)"
            )
        exported.obs_normalizer = nn.Sequential(normalizer, ObsClip(self.obs_clip))
        return exported


class ObsClip(nn.Module):
    """Clamp to ``[-bound, bound]``, as a module (TorchScript and ONNX export it as one clip operation).

    Args:
        bound: The clip bound, > 0.
    """

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = float(bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: any; the same out."""
        return x.clamp(-self.bound, self.bound)
