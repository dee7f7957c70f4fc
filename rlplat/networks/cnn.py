"""Convolutional torso for image observations."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium
import torch
from torch import Tensor, nn

from rlplat.networks.mlp import ACTIVATIONS, check_widths
from rlplat.registry import ConfigError


def conv_layers(
    shape: Sequence[int], channels: Sequence[int], kernel_sizes: Sequence[int], strides: Sequence[int], key: str
) -> tuple[list[nn.Module], int]:
    """Convolutions with ReLU over images ``[channels, height, width]`` of ``shape``, flattened:
    the layers and the width of their flat output.

    Raises:
        ConfigError: when the three lists differ in length, a size is < 1, or the image is too
            small for the convolutions, naming ``<key>.channels`` and its siblings.
    """
    if not len(channels) == len(kernel_sizes) == len(strides) >= 1:
        raise ConfigError(
            f"{key}.channels={list(channels)}, {key}.kernel_sizes={list(kernel_sizes)} and "
            f"{key}.strides={list(strides)}: need one entry per convolution, the same number in each"
        )
    if min(channels) < 1 or min(kernel_sizes) < 1 or min(strides) < 1:
        raise ConfigError(
            f"{key}.channels={list(channels)}, {key}.kernel_sizes={list(kernel_sizes)}, "
            f"{key}.strides={list(strides)}: sizes must be >= 1"
        )
    height, width = int(shape[1]), int(shape[2])
    layers: list[nn.Module] = []
    in_channels = int(shape[0])
    for out_channels, kernel, stride in zip(channels, kernel_sizes, strides):
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        if height < 1 or width < 1:
            raise ConfigError(
                f"{key}.kernel_sizes={list(kernel_sizes)}, {key}.strides={list(strides)}: the "
                f"{shape[1]}x{shape[2]} image is too small for these convolutions"
            )
        layers += [nn.Conv2d(in_channels, int(out_channels), int(kernel), int(stride)), nn.ReLU()]
        in_channels = int(out_channels)
    return [*layers, nn.Flatten()], in_channels * height * width


def orthogonal_(modules: Sequence[nn.Module]) -> None:
    """Orthogonal weights (gain sqrt 2) and zero biases for the convolutions and Linear layers."""
    for module in modules:
        if isinstance(module, nn.Conv2d | nn.Linear):
            nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def pixels_as_float(observation: Tensor, scale: float) -> Tensor:
    """``observation`` (uint8 pixels, or floats) as float32, multiplied by ``scale`` unless it is 1."""
    if scale != 1.0:
        return torch.mul(observation, scale)  # uint8 * float -> float32, one kernel
    return observation if observation.is_floating_point() else observation.float()


class NatureCNN(nn.Module):
    """The convolutional torso of the DQN of Mnih et al. (2015), "Human-level control through
    deep reinforcement learning": convolutions with ReLU, flattened, then a Linear + ReLU
    layer of ``out_features`` (512 in the paper, Stable-Baselines3's ``CnnPolicy`` and
    CleanRL's Atari agents). ``hidden_sizes`` adds Linear layers between the flattened
    convolutions and that last layer (none in the paper).

    With the defaults on ``[4, 84, 84]`` frames: 32 filters 8x8 stride 4, 64 filters 4x4
    stride 2, 64 filters 3x3 stride 1 (a ``[64, 7, 7]`` map), then ``3136 -> out_features``.

    Args:
        observation_space: A ``Box`` of images ``[channels, height, width]`` (channels first,
            as ``FrameStackObservation`` of grayscale frames gives them, or the
            ``to_tensor_image`` transform), uint8 (kept so in rollouts and replay) or float.
        out_features: Width of the output features.
        channels: Filters of each convolution.
        kernel_sizes: Kernel size of each convolution, in pixels.
        strides: Stride of each convolution, in pixels.
        normalize_images: Divide the observations by 255 first (uint8 pixels -> [0, 1]),
            as Stable-Baselines3 does.
        orthogonal_init: Orthogonal weights (gain sqrt 2) and zero biases.
        hidden_sizes: Widths of Linear layers between the flattened convolutions and the
            output layer (none in Mnih et al.).
        activation: Activation of those hidden layers (``relu``, ``tanh``, ``elu``, ``gelu``,
            ``silu``); the convolutions and the output layer use ReLU.

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
        hidden_sizes: Sequence[int] = (),
        activation: str = "relu",
    ) -> None:
        super().__init__()
        shape = observation_space.shape
        if not isinstance(observation_space, gymnasium.spaces.Box) or shape is None or len(shape) != 3:
            raise ConfigError(
                f"network=cnn needs image observations, a Box [channels, height, width] (e.g. env=pong); "
                f"got {observation_space}"
            )
        if activation not in ACTIVATIONS:
            raise ConfigError(f"network.activation={activation!r}: valid: {', '.join(ACTIVATIONS)}")
        check_widths(out_features, hidden_sizes)
        layers, width = conv_layers(shape, channels, kernel_sizes, strides, "network")
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), ACTIVATIONS[activation]()]
            width = int(size)
        layers += [nn.Linear(width, out_features), nn.ReLU()]
        self.layers = nn.Sequential(*layers)
        self.scale = 1.0 / 255.0 if normalize_images else 1.0
        if orthogonal_init:
            orthogonal_(list(self.layers))

    def forward(self, observation: Tensor) -> Tensor:
        """``[N, C, H, W]`` uint8 or float32 -> ``[N, out_features]`` float32."""
        return self.layers(pixels_as_float(observation, self.scale))
