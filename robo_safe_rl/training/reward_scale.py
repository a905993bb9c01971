"""Reward scaling by the running spread of the discounted return (``runner.normalize_rewards``).

rsl-rl trains the critic on the env's own reward scale. On the Bullet locomotion tasks the discounted returns are in
the hundreds, and the critic shares PPO's one Adam optimizer, whose rate the adaptive schedule sets from the actor's
KL (often near 1e-4): an Adam step moves each weight by about the rate, so a critic whose targets are in the hundreds
needs hundreds of updates to reach them and feeds the advantages its lag meanwhile. Dividing each reward by the
running standard deviation of the discounted return puts the critic's targets near unit scale whatever the task.
This is the reward half of Stable-Baselines3's ``VecNormalize`` (``norm_reward=True``), which rl-baselines3-zoo's
``normalize: true`` turns on for its Bullet PPO recipes: per env a running discounted sum ``G <- gamma G + r``,
reset to 0 at every episode end; the variance of all envs' ``G`` over all steps so far; each reward divided by its
square root and clipped to ``+-clip``. The mean is not subtracted (a constant shift would change what ending an
episode is worth).

Only PPO sees the scaled rewards: the logged returns, the evaluation and the time-out bootstrap's scale follow from it
(rsl-rl adds ``gamma * V(s)`` to a timed-out step's reward, and V is learned on the scaled rewards). The statistics
are per process; under torchrun every rank keeps its own, as every Stable-Baselines3 process keeps its
``VecNormalize``.
"""

from __future__ import annotations

import torch

#: Stable-Baselines3's ``VecNormalize`` defaults: clip_reward=10, epsilon=1e-8, and its running statistics' starting
#: count of 1e-4 (the first batch all but replaces the starting variance of 1).
CLIP = 10.0
EPSILON = 1.0e-8
START_COUNT = 1.0e-4


class ReturnScaler(torch.nn.Module):
    """Divides rewards by the running standard deviation of the per-env discounted return.

    Args:
        num_envs: Envs stepped together (the length of every reward vector).
        gamma: The discount of the returns whose spread is measured (PPO's ``gamma``).
        clip: Scaled rewards are clipped to ``[-clip, clip]``.
        device: Where the statistics live (the policy's device).

    Its state dict holds the statistics (``mean``, ``var``, ``count``): saved in checkpoints, so that a resumed run
    scales as the run it continues, and in the runner's recovery snapshots. The per-env running ``returns`` are not in
    it: they belong to the episodes under way, which a resume does not continue (its envs start new episodes, and
    their number may differ), as Stable-Baselines3 zeroes them when it loads a ``VecNormalize``.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = CLIP, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.gamma = gamma
        self.clip = clip
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64, device=device), persistent=False)
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64, device=device))
        self.register_buffer("var", torch.ones((), dtype=torch.float64, device=device))
        self.register_buffer("count", torch.tensor(START_COUNT, dtype=torch.float64, device=device))

    @torch.no_grad()
    def forward(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """Scale one step's rewards and advance the returns.

        Args:
            rewards: The step's rewards, shape ``(num_envs,)``.
            dones: The step's episode ends (terminated or timed out), shape ``(num_envs,)``.

        Returns:
            ``rewards / sqrt(var + eps)`` clipped to ``+-clip``, in the rewards' dtype.
        """
        # A non-finite reward (possible only with runner.check_for_nan=false and no SafeStep) reaches PPO as it is,
        # where the gradient guard and the rollbacks deal with it; counted as 0 here, it cannot poison the statistics
        # of every later step. nan_to_num needs no host sync.
        finite = torch.nan_to_num(rewards.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
        self.returns.mul_(self.gamma).add_(finite)
        self._update(self.returns)
        scaled = (rewards.to(torch.float64) / self._divisor()).clamp(-self.clip, self.clip)
        self.returns.masked_fill_(dones.to(torch.bool), 0.0)
        return scaled.to(rewards.dtype)

    def scale(self) -> float:
        """The divisor now applied to rewards (logged as ``Train/reward_scale``; one host sync)."""
        return float(self._divisor())

    def _divisor(self) -> torch.Tensor:
        """``sqrt(var + eps)``, on the statistics' device."""
        return torch.sqrt(self.var + EPSILON)

    def _update(self, batch: torch.Tensor) -> None:
        """Merge a batch into the running mean and variance (Chan et al.'s parallel update, as SB3's
        ``RunningMeanStd``)."""
        batch_mean = batch.mean()
        batch_var = batch.var(unbiased=False)
        n = float(batch.numel())
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
