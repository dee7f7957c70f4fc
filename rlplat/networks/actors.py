"""Actors for Box actions in the normalised space [-1, 1]: deterministic (DDPG, TD3) and
tanh-squashed Gaussian (SAC)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlplat.networks.base import NetworkFactory

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
LOG_PROB_CONSTANT = 2.0 * math.log(2.0) + 0.5 * math.log(2.0 * math.pi)  # per action dim


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

    def forward(
        self, observation: Tensor, deterministic: bool = False, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> action ``[N, A]`` in (-1, 1) (reparameterised) and log pi ``[N]``.

        Args:
            observation: ``[N, *obs]`` float32.
            deterministic: Take ``u = mu(s)`` instead of sampling.
            noise: ``[N, A]`` standard normal draws for ``u = mu + sigma * noise``; None draws them.
        """
        h = self.torso(observation)
        mean = F.linear(h, self.mean.weight, self.mean.bias)
        log_std = F.linear(h, self.log_std.weight, self.log_std.bias).clamp(LOG_STD_MIN, LOG_STD_MAX)
        if deterministic:
            noise = torch.zeros_like(mean)
        elif noise is None:
            noise = torch.randn_like(mean)
        u = mean + noise * log_std.exp()
        return torch.tanh(u), squashed_gaussian_log_prob(u, log_std, noise)


def squashed_gaussian_log_prob(u: Tensor, log_std: Tensor, noise: Tensor) -> Tensor:
    """log-density of ``tanh(u)`` for ``u = mean + exp(log_std) * noise``, ``noise ~ N(0, I)``:
    ``[N, A]`` each -> ``[N]``.

    Per dim, ``log N(u; mean, sigma) = -noise^2 / 2 - log_std - log(2 pi) / 2`` (from the
    draw itself, which ``(u - mean) / sigma`` only recomputes with rounding) and the tanh
    correction ``-log(1 - tanh(u)^2) = 2 (u + softplus(-2u) - log 2)``, stable for large ``|u|``.
    """
    log_density = 2.0 * (u + F.softplus(-2.0 * u)) - torch.addcmul(log_std, noise, noise, value=0.5)
    return log_density.sum(-1) - u.shape[-1] * LOG_PROB_CONSTANT
