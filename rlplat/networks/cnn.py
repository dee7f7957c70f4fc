"""Convolutional torso for image observations."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium
import torch
from torch import Tensor, nn

from rlplat.registry import ConfigError


class NatureCNN(nn.Module):
    """The convolutional torso of the DQN of Mnih et al. (2015), "Human-level control through
    deep reinforcement learning": convolutions with ReLU, flattened, then a Linear + ReLU
    layer of ``out_features`` (512 in the paper, Stable-Baselines3's ``CnnPolicy`` and
    CleanRL's Atari agents).

    With the defaults on ``[4, 84, 84]`` frames: 32 filters 8x8 stride 4, 64 filters 4x4
    stride 2, 64 filters 3x3 stride 1 (a ``[64, 7, 7]`` map), then ``3136 -> out_features``.

    Args:
        observation_space: A ``Box`` of images ``[channels, height, width]`` (channels first,
            as ``FrameStackObservation`` of grayscale frames gives them).
        out_features: Width of the output features.
        channels: Filters of each convolution.
        kernel_sizes: Kernel size of each convolution, in pixels.
        strides: Stride of each convolution, in pixels.
        normalize_images: Divide the observations by 255 first (uint8 pixels -> [0, 1]),
            as Stable-Baselines3 does.
        orthogonal_init: Orthogonal weights (gain sqrt 2) and zero biases.

    Raises:
        ConfigError: when the space is not a 3-dimensional ``Box``, the three lists differ in
            length, or the image is too small for the convolutions, naming ``network.<key>``.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        out_features: int,
        channels: Sequence[int] = (32, 64, 64),
        kernel_sizes: Sequence[int] = (8, 4, 3),
        strides: Sequence[int] = (4, 2, 1),
        normalize_images: bool = True,
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        shape = observation_space.shape
        if not isinstance(observation_space, gymnasium.spaces.Box) or shape is None or len(shape) != 3:
            raise ConfigError(
                f"network=cnn needs image observations, a Box [channels, height, width] (e.g. env=pong); "
                f"got {observation_space}"
            )
        if not len(channels) == len(kernel_sizes) == len(strides) >= 1:
            raise ConfigError(
                f"network.channels={list(channels)}, network.kernel_sizes={list(kernel_sizes)} and "
                f"network.strides={list(strides)}: need one entry per convolution, the same number in each"
            )
        if out_features < 1 or min(channels) < 1:
            raise ConfigError(f"network.channels={list(channels)}, features {out_features}: sizes must be >= 1")
        height, width = int(shape[1]), int(shape[2])
        layers: list[nn.Module] = []
        in_channels = int(shape[0])
        for out_channels, kernel, stride in zip(channels, kernel_sizes, strides):
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            if height < 1 or width < 1:
                raise ConfigError(
                    f"network.kernel_sizes={list(kernel_sizes)}, network.strides={list(strides)}: the "
                    f"{shape[1]}x{shape[2]} image is too small for these convolutions"
                )
            layers += [nn.Conv2d(in_channels, int(out_channels), int(kernel), int(stride)), nn.ReLU()]
            in_channels = int(out_channels)
        layers += [nn.Flatten(), nn.Linear(in_channels * height * width, out_features), nn.ReLU()]
        self.layers = nn.Sequential(*layers)
        self.scale = 1.0 / 255.0 if normalize_images else 1.0
        if orthogonal_init:
            for module in self.layers:
                if isinstance(module, nn.Conv2d | nn.Linear):
                    nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def forward(self, observation: Tensor) -> Tensor:
        """``[N, C, H, W]`` float32 -> ``[N, out_features]`` float32."""
        if self.scale != 1.0:
            observation = torch.mul(observation, self.scale)
        return self.layers(observation)
