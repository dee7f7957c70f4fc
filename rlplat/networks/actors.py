"""Actors for Box actions in the normalised space [-1, 1]: deterministic (DDPG, TD3) and
tanh-squashed Gaussian (SAC)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlplat.networks.actor_critic import NetworkFactory

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class DeterministicActor(nn.Module):
    """mu(s) = tanh(W h(s)): ``[N, *obs] -> [N, A]`` in [-1, 1]."""

    def __init__(self, network: NetworkFactory, action_dim: int, features: int) -> None:
        super().__init__()
        self.torso = network(features)
        self.mean = nn.Linear(features, action_dim)

    def forward(self, observation: Tensor) -> Tensor:
        return torch.tanh(F.linear(self.torso(observation), self.mean.weight, self.mean.bias))


class SquashedGaussianActor(nn.Module):
    """a = tanh(u), u ~ N(mu(s), sigma(s)) (Haarnoja et al. 2018, appendix C).

    ``log pi(a|s) = log N(u) - sum log(1 - tanh(u)^2)``, the second term computed stably as
    ``2 * (log 2 - u - softplus(-2u))``.
    """

    def __init__(self, network: NetworkFactory, action_dim: int, features: int) -> None:
        super().__init__()
        self.torso = network(features)
        self.mean = nn.Linear(features, action_dim)
        self.log_std = nn.Linear(features, action_dim)

    def forward(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> action ``[N, A]`` in (-1, 1) (reparameterised) and log pi ``[N]``."""
        h = self.torso(observation)
        mean = F.linear(h, self.mean.weight, self.mean.bias)
        log_std = F.linear(h, self.log_std.weight, self.log_std.bias).clamp(LOG_STD_MIN, LOG_STD_MAX)
        u = mean if deterministic else mean + torch.randn_like(mean) * log_std.exp()
        return torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)


def squashed_gaussian_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log-density of ``tanh(u)`` for ``u ~ N(mean, exp(log_std))``: ``[N, A] -> [N]``."""
    gaussian = (-0.5 * ((u - mean) * (-log_std).exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    correction = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return gaussian - correction
