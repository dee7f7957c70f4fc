"""Running normalisation of observations and scaling of rewards."""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import Tensor

from rlplat.registry import ConfigError
from rlplat.transforms.base import Transform


class RunningMeanStd(torch.nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al. 1979).

    Args:
        shape: Shape of one sample.
    """

    mean: Tensor  # buffers, float64: [*shape], [*shape] and [] (samples seen)
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    def update(self, batch: Tensor) -> None:
        """Merge ``[N, *shape]`` samples into the statistics."""
        batch = batch.to(torch.float64)
        batch_mean = batch.mean(0)
        batch_var = batch.var(0, unbiased=False)
        n = batch.shape[0]
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObservationNorm(Transform):
    """Normalise observations by a running mean and std, then clip.

    ``(obs - mean) / sqrt(var + eps)`` clipped to ``[-clip, clip]``, with statistics updated
    from every training observation (as Stable-Baselines3's VecNormalize).

    Args:
        observation_space: The env's single observation space (a Box).
        clip: Bound on the normalised observation, in standard deviations.
        epsilon: Added to the variance before the square root.

    Raises:
        ConfigError: if the observation space is not a Box or ``clip`` <= 0.
    """

    def __init__(self, observation_space: gymnasium.Space, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        if not isinstance(observation_space, gymnasium.spaces.Box):
            raise ConfigError(f"transforms.obs_norm needs a Box observation space, got {observation_space}")
        if clip <= 0:
            raise ConfigError(f"transforms.obs_norm.clip={clip}: must be > 0")
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd(tuple(observation_space.shape))
        self._refresh()
        self.register_load_state_dict_post_hook(lambda module, _: module._refresh())

    def _refresh(self) -> None:
        self._mean = self.stats.mean.float()
        self._inv_std = (self.stats.var + self.epsilon).rsqrt().float()

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        if update:
            self.stats.update(observation)
            self._refresh()
        normalised = (observation - self._mean) * self._inv_std
        return normalised.clamp_(-self.clip, self.clip)


class RewardScale(Transform):
    """Divide rewards by the running std of the discounted return (Engstrom et al. 2020).

    The return ``R <- gamma * R + r`` is accumulated per env, reset at episode ends, and
    its running variance scales the reward: ``r / sqrt(var(R) + eps)``, clipped to
    ``[-clip, clip]``. Rewards keep their sign and their mean is not subtracted.

    Args:
        observation_space: Unused; part of the transform constructor interface.
        gamma: Discount of the accumulated return; use the loss's gamma.
        clip: Bound on the scaled reward.
        epsilon: Added to the variance before the square root.

    Raises:
        ConfigError: if ``gamma`` is outside [0, 1] or ``clip`` <= 0.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        gamma: float = 0.99,
        clip: float = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"transforms.reward_scale.gamma={gamma}: must be in [0, 1]")
        if clip <= 0:
            raise ConfigError(f"transforms.reward_scale.clip={clip}: must be > 0")
        self.gamma = float(gamma)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd(())
        self._discounted: Tensor | None = None

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        if update:
            if self._discounted is None or self._discounted.shape != reward.shape:
                self._discounted = torch.zeros_like(reward, dtype=torch.float64)
            self._discounted = self._discounted * self.gamma + reward
            self.stats.update(self._discounted.flatten())
            self._discounted[done] = 0.0
        scale = float(np.sqrt(self.stats.var.item() + self.epsilon))
        return (reward / scale).clamp_(-self.clip, self.clip)
