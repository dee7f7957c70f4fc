"""Multi-layer perceptron torso."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import gymnasium
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.registry import ConfigError

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}
FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "relu": F.relu,
    "elu": F.elu,
    "gelu": F.gelu,
    "silu": F.silu,
}


def check_widths(out_features: int, hidden_sizes: Sequence[int]) -> None:
    """Raise ConfigError for a torso width or a hidden layer size below 1 (every network's rule).

    Args:
        out_features: The torso's output width, the loss's ``loss.features``.
        hidden_sizes: ``network.hidden_sizes``, widths of the hidden layers.

    Raises:
        ConfigError: ``loss.features=0: must be >= 1``, ``network.hidden_sizes=[0]: sizes must be >= 1``.
    """
    if out_features < 1:
        raise ConfigError(f"loss.features={out_features}: must be >= 1")
    if min(hidden_sizes, default=1) < 1:
        raise ConfigError(f"network.hidden_sizes={list(hidden_sizes)}: sizes must be >= 1")


class MLP(nn.Module):
    """Flatten the observation, then Linear + activation layers up to ``out_features``.

    With ``hidden_sizes=[64]`` and ``out_features=64`` the torso is
    ``obs -> 64 -> 64``, each Linear followed by the activation: the two 64-unit layers of
    Stable-Baselines3's default MlpPolicy.

    Args:
        observation_space: A Box space; observations ``[N, *obs_shape]`` are flattened (and
            made float32 when they are integers).
        out_features: Width of the output features ``[N, out_features]``.
        hidden_sizes: Widths of the hidden layers before the output layer.
        activation: One of ``tanh``, ``relu``, ``elu``, ``gelu``, ``silu``.
        orthogonal_init: Orthogonal weights with gain sqrt(2) and zero biases (as in
            Stable-Baselines3 and CleanRL); False keeps PyTorch's default init.

    Attributes:
        linears: The Linear layers, first to last (each followed by the activation).
        activation: The activation's name.
        input_dtype: The observations' numpy dtype name; observations that are not floats
            (a uint8 or integer Box, kept so in rollouts) are converted to float32 first.
        float_input: Whether the observations are floats.

    Raises:
        ConfigError: for a non-Box space, an unknown activation or a size < 1.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        out_features: int,
        hidden_sizes: Sequence[int] = (64,),
        activation: str = "tanh",
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gymnasium.spaces.Box):
            raise ConfigError(f"network=mlp needs a Box observation space, got {observation_space}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"network.activation={activation!r}: valid: {', '.join(ACTIVATIONS)}")
        sizes = [int(np.prod(observation_space.shape)), *hidden_sizes, out_features]
        check_widths(out_features, hidden_sizes)
        layers: list[nn.Module] = [nn.Flatten(start_dim=1)]
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            linear = nn.Linear(n_in, n_out)
            if orthogonal_init:
                nn.init.orthogonal_(linear.weight, gain=math.sqrt(2.0))
                nn.init.zeros_(linear.bias)
            layers += [linear, ACTIVATIONS[activation]()]
        self.layers = nn.Sequential(*layers)
        # The forward pass calls the functions directly: a module call per layer costs more
        # than the layer's arithmetic at these sizes.
        self.linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        self.activation = activation
        self._activation = FUNCTIONS[activation]
        self.input_dtype = np.dtype(observation_space.dtype).name
        self.float_input = np.issubdtype(observation_space.dtype, np.floating)

    def forward(self, observation: Tensor) -> Tensor:
        """``[N, *obs_shape]`` float32 -> ``[N, out_features]``."""
        h = observation if observation.dim() == 2 else observation.flatten(1)
        if not self.float_input:  # uint8 or integer observations, kept so in rollouts
            h = h.float()
        for linear in self.linears:
            h = self._activation(F.linear(h, linear.weight, linear.bias))
        return h
