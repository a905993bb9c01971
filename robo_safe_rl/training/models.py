"""rsl-rl's MLP model with clipping of the normalised observations (the conservative presets use it).

rsl-rl's ``EmpiricalNormalization`` does not clip: one observation far outside the running statistics (a sensor
glitch, a physics spike that stayed finite) reaches the network as a huge input, and an overflow there turns the
policy's output non-finite. Clipping the normalised input to ``[-obs_clip, obs_clip]`` (Stable-Baselines3's
``VecNormalize`` default is 10) bounds what any single observation can do.
"""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.models import MLPModel
from tensordict import TensorDict

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
