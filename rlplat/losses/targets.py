"""Target networks: Polyak averaging and periodic hard copies."""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlplat.registry import ConfigError


def frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters take no gradient, for use as a target network."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``theta_target <- (1 - tau) * theta_target + tau * theta`` (tau = 1 copies)."""
    target_params = list(target.parameters())
    torch._foreach_lerp_(target_params, list(source.parameters()), tau)


class TargetSchedule:
    """When and how to update target networks, counted in gradient updates.

    Args:
        tau: Polyak coefficient in (0, 1]; 1 with ``interval`` K is a hard copy every K updates.
        interval: Update the targets every ``interval`` gradient updates.

    Raises:
        ConfigError: for tau outside (0, 1] or interval < 1.
    """

    def __init__(self, tau: float, interval: int) -> None:
        if not 0.0 < tau <= 1.0:
            raise ConfigError(f"loss.tau={tau}: must be in (0, 1]")
        if interval < 1:
            raise ConfigError(f"loss.target_update_interval={interval}: must be at least 1 update")
        self.tau = tau
        self.interval = interval
        self.updates = 0

    def step(self, *pairs: tuple[nn.Module, nn.Module]) -> None:
        """Count one gradient update; update each ``(target, source)`` pair when due."""
        self.updates += 1
        if self.updates % self.interval == 0:
            for target, source in pairs:
                polyak_update(target, source, self.tau)
