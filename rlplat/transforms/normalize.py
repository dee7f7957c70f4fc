"""Running normalisation of observations; scaling and clipping of rewards."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from torch import Tensor

from rlplat.registry import ConfigError
from rlplat.transforms.base import Transform


class RunningMeanStd(torch.nn.Module):
    """Mean and variance over every sample seen, merged batch by batch (Chan et al. 1979).

    The statistics are float64 buffers (checkpointed with ``state_dict``), updated in place
    through numpy views: the env adapter calls this once per env step with a few rows, where
    numpy's per-call cost is a fraction of torch's.

    Args:
        shape: Shape of one sample.
    """

    mean: Tensor  # buffers, float64 on the CPU: [*shape], [*shape] and [] (samples seen)
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self._views: tuple[Tensor, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """numpy views of ``mean``, ``var`` and ``count``, made again only when the buffers
        were replaced (``.to()`` and kin replace them; loading a state copies in place)."""
        mean = self.mean
        if self._views is None or self._views[0] is not mean:
            self._views = (mean, (mean.numpy(), self.var.numpy(), self.count.numpy()))
        return self._views[1]

    def update(self, batch: Tensor | np.ndarray) -> None:
        """Merge ``[N, *shape]`` samples (a CPU tensor or an array) into the statistics."""
        x = (batch.numpy() if isinstance(batch, Tensor) else np.asarray(batch)).astype(np.float64)
        mean, var, count_array = self.arrays
        n, count = x.shape[0], float(count_array)
        batch_mean = np.add.reduce(x, 0) / n
        x -= batch_mean
        batch_var = np.add.reduce(x * x, 0) / n
        total = count + n
        delta = batch_mean - mean
        m2 = var * count + batch_var * n + delta * delta * (count * n / total)
        mean += delta * (n / total)
        np.divide(m2, total, out=var)
        count_array[...] = total


class ObservationNorm(Transform):
    """Normalise observations by a running mean and std, then clip.

    ``(obs - mean) / sqrt(var + eps)`` clipped to ``[-clip, clip]``, with statistics updated
    from every training observation (as Stable-Baselines3's VecNormalize). Observations are
    the env adapter's CPU tensors; the arithmetic runs on numpy views of them.

    Args:
        observation_space: The env's single observation space (a Box).
        clip: Bound on the normalised observation, in standard deviations.
        epsilon: Added to the variance before the square root.

    Raises:
        ConfigError: if the observation space is not a Box, or ``clip`` or ``epsilon`` <= 0.
    """

    def __init__(self, observation_space: gymnasium.Space, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        if not isinstance(observation_space, gymnasium.spaces.Box):
            raise ConfigError(f"transforms.obs_norm needs a Box observation space, got {observation_space}")
        for key, value in (("clip", clip), ("epsilon", epsilon)):
            if value <= 0:
                raise ConfigError(f"transforms.obs_norm.{key}={value}: must be > 0")
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd(tuple(observation_space.shape))
        self._refresh()
        self.register_load_state_dict_post_hook(lambda module, _: module._refresh())

    def _refresh(self) -> None:
        mean, var, _ = self.stats.arrays
        var = var + self.epsilon
        self._mean = mean.astype(np.float32)
        self._inv_std = np.reciprocal(np.sqrt(var, out=var), out=var).astype(np.float32)

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        if update:
            self.stats.update(observation)
            self._refresh()
        normalised = observation.numpy() - self._mean
        normalised *= self._inv_std
        return torch.from_numpy(np.clip(normalised, -self.clip, self.clip, out=normalised))


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
        ConfigError: if ``gamma`` is outside [0, 1], or ``clip`` or ``epsilon`` <= 0.
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
        for key, value in (("clip", clip), ("epsilon", epsilon)):
            if value <= 0:
                raise ConfigError(f"transforms.reward_scale.{key}={value}: must be > 0")
        self.gamma = float(gamma)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStd(())
        self._discounted: Tensor | None = None
        self.register_load_state_dict_pre_hook(_returns_default)

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        if update:
            if self._discounted is None or self._discounted.shape != reward.shape:
                self._discounted = torch.zeros_like(reward, dtype=torch.float64)
            self._discounted = self._discounted * self.gamma + reward
            self.stats.update(self._discounted.flatten())
            self._discounted[done] = 0.0
        scale = float(np.sqrt(self.stats.var.item() + self.epsilon))
        return (reward / scale).clamp_(-self.clip, self.clip)

    def get_extra_state(self) -> dict[str, Tensor | None]:
        """The per-env discounted returns (float64 ``[B, 1]``, None before the first
        reward), checkpointed with the statistics: a resumed run scales as one that never
        stopped."""
        return {"discounted": None if self._discounted is None else self._discounted.clone()}

    def set_extra_state(self, state: dict[str, Tensor | None]) -> None:
        """Restore :meth:`get_extra_state`."""
        discounted = state["discounted"]
        self._discounted = None if discounted is None else discounted.clone()


def _returns_default(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A checkpoint written before :class:`RewardScale` saved its returns has none: they
    start from zero (a load-state pre-hook; ``load_state_dict`` hands it its own copy)."""
    state_dict.setdefault(prefix + "_extra_state", {"discounted": None})


class RewardClip(Transform):
    """Clip rewards to ``[-bound, bound]`` (Mnih et al. 2015, for every Atari game alike).

    With the default bound of 1, Atari's integer rewards become their sign. Episode returns
    reported by rlplat stay the raw ones (transforms apply after they are summed).

    Args:
        observation_space: Unused; part of the transform constructor interface.
        bound: The clip bound, > 0.

    Raises:
        ConfigError: if ``bound`` <= 0.
    """

    def __init__(self, observation_space: gymnasium.Space, bound: float = 1.0) -> None:
        super().__init__()
        if not bound > 0:
            raise ConfigError(f"transforms.reward_clip.bound={bound!r}: must be > 0")
        self.bound = float(bound)

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        return reward.clamp(-self.bound, self.bound)
