"""Residual MLP torso with LayerNorm. rlplat entry ``residual_mlp``.

rlplat calls the entry point as ``ResidualMLP(observation_space, out_features, **yaml_kwargs)``
and puts its policy, value or Q heads on the ``[N, out_features]`` output.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
from torch import Tensor, nn

from rlplat.registry import ConfigError


class ResidualBlock(nn.Module):
    """Pre-norm residual block: ``x + Linear(ReLU(Linear(LayerNorm(x))))``, ``[N, width]`` -> ``[N, width]``.

    The last Linear starts at zero, so the block starts as the identity.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        nn.init.orthogonal_(self.fc1.weight, gain=math.sqrt(2.0))
        nn.init.zeros_(self.fc1.bias)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc2(nn.functional.relu(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    """Flatten, project to ``width``, ``num_blocks`` residual blocks, then LayerNorm, Linear, tanh.

    Args:
        observation_space: A Box space; observations ``[N, *obs_shape]`` (float32) are
            flattened.
        out_features: Width of the output features ``[N, out_features]``, in ``(-1, 1)``.
        width: Width of the residual stream.
        num_blocks: Number of residual blocks (0 is a two-layer MLP).

    Raises:
        ConfigError: for a non-Box observation space, ``width < 1`` or ``num_blocks < 0``.
    """

    def __init__(
        self, observation_space: gymnasium.Space, out_features: int, width: int = 64, num_blocks: int = 2
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gymnasium.spaces.Box):
            raise ConfigError(f"network=residual_mlp needs a Box observation space, got {observation_space}")
        if int(width) < 1:
            raise ConfigError(f"network.width={width!r}: must be an integer >= 1")
        if int(num_blocks) < 0:
            raise ConfigError(f"network.num_blocks={num_blocks!r}: must be an integer >= 0")
        self.inp = nn.Sequential(nn.Flatten(start_dim=1), nn.Linear(int(np.prod(observation_space.shape)), int(width)))
        self.blocks = nn.Sequential(*(ResidualBlock(int(width)) for _ in range(int(num_blocks))))
        self.out = nn.Sequential(nn.LayerNorm(int(width)), nn.Linear(int(width), out_features), nn.Tanh())

    def forward(self, observation: Tensor) -> Tensor:
        """``[N, *obs_shape]`` -> ``[N, out_features]``."""
        return self.out(self.blocks(self.inp(observation)))
