"""The transform interface."""

from __future__ import annotations

from torch import Tensor, nn


class Transform(nn.Module):
    """Base of env transforms; identity on both observations and rewards.

    A transform is an ``nn.Module`` so that its running statistics are buffers: they move
    with ``.to(device)`` and are saved with the checkpoint through ``state_dict()``.
    Constructors receive ``observation_space`` as their first argument, then the YAML keys.
    """

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        """Map ``[B, *obs_shape]`` observations; ``update`` allows updating statistics."""
        return observation

    def transform_reward(self, reward: Tensor, done: Tensor, update: bool) -> Tensor:
        """Map ``[B, 1]`` rewards given ``[B, 1]`` bool episode ends."""
        return reward
