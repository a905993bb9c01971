"""Generalized state-dependent exploration (gSDE) as an rsl-rl output distribution.

rsl-rl's Gaussian policy adds fresh, independent noise to every action of every step. On the PyBullet walkers that
noise is the policy's enemy: a Hopper shaken by a new random torque every 16 ms learns first that standing still pays
its alive bonus, and stays there (BENCHMARKS.md, "Exploration on the walkers"). gSDE (Raffin, Kober and Stulp, "Smooth
Exploration for Robotic Reinforcement Learning", CoRL 2021; Stable-Baselines3's ``use_sde``, which rl-baselines3-zoo
uses for every PyBullet locomotion recipe) draws a noise *function* instead and holds it for a few steps:

    action = mean(s) + f(s) @ eps,  eps ~ N(0, sigma^2) of shape (features, actions), redrawn every ``interval`` samples

so the perturbation changes smoothly with the state, as a motor's error would, and an exploring walker sways instead of
shaking. Given the state, the action is Gaussian with a state-dependent diagonal variance,
``std_i(s)^2 = sum_j f_j(s)^2 sigma_ji^2``, and that marginal is what PPO's ratio, KL and entropy use (as
Stable-Baselines3 does): the correlation in time changes which actions are tried, not their probabilities.

The features: rsl-rl's distributions see only the MLP's output, so the last layer grows ``features`` outputs beside the
mean (a linear map of the last hidden layer, where Stable-Baselines3 takes the hidden layer itself), detached so that
only the mean's loss shapes the hidden layers (Stable-Baselines3's ``learn_features=False``), and scaled to unit norm.
With unit-norm features each std is a weighted mean of its column of ``sigma``, between the column's smallest and
largest entry: ``init_std`` is then the initial action std exactly, whatever the state, and ``std_range`` bounds it.
"""

from __future__ import annotations

import math

import torch
from rsl_rl.modules.distribution import Distribution
from torch import nn
from torch.distributions import Normal

from robo_safe_rl.errors import ConfigError


class StateDependentNoiseDistribution(Distribution):
    """gSDE (module docstring) with rsl-rl's distribution interface.

    Args:
        output_dim: Action dimensions.
        init_std: Initial action std (every entry of ``sigma``).
        std_range: ``[min, max]`` that each entry of ``sigma``, and so each action std, is clamped into.
        std_type: ``"scalar"``: ``sigma`` is the learned parameter; ``"log"``: ``log(sigma)`` is (rsl-rl's choices).
        noise_features: Features of the noise function (the extra outputs of the MLP's last layer).
        noise_interval: Samples a noise matrix is held for: during a rollout, env steps. Any caller of
            :meth:`sample` shares the draw (``LoadedPolicy.act(..., stochastic=True)`` too: called again on the same
            state within the interval, it returns the same action).
    """

    def __init__(
        self,
        output_dim: int,
        init_std: float = 1.0,
        std_range: tuple[float, float] | list[float] = (1e-6, 1e6),
        std_type: str = "scalar",
        noise_features: int = 64,
        noise_interval: int = 4,
    ) -> None:
        super().__init__(output_dim)
        if std_type not in ("scalar", "log"):
            raise ConfigError(
                f"invalid config value actor.distribution_cfg.std_type={std_type!r}: expected scalar or log"
            )
        for key, value in (("noise_features", noise_features), ("noise_interval", noise_interval)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"invalid config value actor.distribution_cfg.{key}={value!r}: expected an integer >= 1"
                )
        self.std_type = std_type
        self.noise_features = noise_features
        self.noise_interval = noise_interval
        self.std_range = [max(float(std_range[0]), 1e-6), float(std_range[1])]
        shape = (noise_features, output_dim)
        if std_type == "scalar":
            self.sigma_param = nn.Parameter(torch.full(shape, float(init_std)))
        else:
            self.log_sigma_param = nn.Parameter(torch.full(shape, math.log(init_std)))
        self._distribution: Normal | None = None
        self._features: torch.Tensor | None = None
        self._noise: torch.Tensor | None = None  # (batch, features, actions): the held draw of eps
        self._samples = 0  # samples drawn with the held noise
        Normal.set_default_validate_args(False)

    @property
    def input_dim(self) -> int:
        """The MLP's output: the mean, then the features."""
        return self.output_dim + self.noise_features

    def sigma(self) -> torch.Tensor:
        """The noise scales, clamped to ``std_range``. Shape: (features, actions)."""
        low, high = self.std_range
        if self.std_type == "scalar":
            return self.sigma_param.clamp(low, high)
        return self.log_sigma_param.clamp(math.log(low), math.log(high)).exp()

    def update(self, mlp_output: torch.Tensor) -> None:
        """The mean and the unit-norm features of ``mlp_output`` (shape (batch, actions + features)), and the
        Gaussian with the std they give."""
        mean = mlp_output[..., : self.output_dim]
        features = mlp_output[..., self.output_dim :].detach()
        self._features = features / features.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        sigma = self.sigma()
        variance = (self._features * self._features) @ (sigma * sigma)
        self._distribution = Normal(mean, variance.clamp_min(1e-12).sqrt())

    def sample(self) -> torch.Tensor:
        """``mean + features @ eps`` with the held ``eps``, drawn anew every ``noise_interval`` samples and whenever
        the batch changes (a rollout after an update, whose mini-batches sample too)."""
        features = self._features
        assert features is not None and self._distribution is not None, "update() comes first"
        batch = features.shape[:-1]
        if self._noise is None or self._noise.shape[:-2] != batch or self._samples >= self.noise_interval:
            eps = torch.randn(*batch, self.noise_features, self.output_dim, device=features.device)
            self._noise = eps * self.sigma().detach()
            self._samples = 0
        self._samples += 1
        return self._distribution.mean + torch.einsum("...k,...ka->...a", features, self._noise)

    def deterministic_output(self, mlp_output: torch.Tensor) -> torch.Tensor:
        """The mean."""
        return mlp_output[..., : self.output_dim]

    def as_deterministic_output_module(self) -> nn.Module:
        """The mean's slice as a module (TorchScript and ONNX export it)."""
        return MeanSlice(self.output_dim)

    @property
    def mean(self) -> torch.Tensor:
        return self._distribution.mean  # type: ignore[union-attr]

    @property
    def std(self) -> torch.Tensor:
        return self._distribution.stddev  # type: ignore[union-attr]

    @property
    def entropy(self) -> torch.Tensor:
        """Of the Gaussian given the state, summed over the actions."""
        return self._distribution.entropy().sum(dim=-1)  # type: ignore[union-attr]

    @property
    def params(self) -> tuple[torch.Tensor, ...]:
        return (self.mean, self.std)

    def log_prob(self, outputs: torch.Tensor) -> torch.Tensor:
        """Of the Gaussian given the state, summed over the actions."""
        return self._distribution.log_prob(outputs).sum(dim=-1)  # type: ignore[union-attr]

    def kl_divergence(self, old_params: tuple[torch.Tensor, ...], new_params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """KL(old || new) of the two Gaussians, summed over the actions."""
        (old_mean, old_std), (new_mean, new_std) = old_params, new_params
        return torch.distributions.kl_divergence(Normal(old_mean, old_std), Normal(new_mean, new_std)).sum(dim=-1)


class MeanSlice(nn.Module):
    """The first ``n`` entries of the last dimension (the mean of :class:`StateDependentNoiseDistribution`'s input).

    Args:
        n: Action dimensions.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = int(n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: (..., n + features) in, (..., n) out."""
        return x.narrow(-1, 0, self.n)
