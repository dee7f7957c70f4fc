"""Target networks: Polyak averaging and periodic hard copies."""

from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import Tensor, nn

from rlplat.registry import check_at_least, check_in_range

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def frozen_copy(module: ModuleT) -> ModuleT:
    """A copy of ``module`` whose parameters take no gradient, for use as a target network."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


class TargetSchedule:
    """Polyak updates of target networks, every ``interval`` gradient updates.

    ``theta_target <- (1 - tau) * theta_target + tau * theta``; tau = 1 with interval K is a
    hard copy every K updates (DQN), tau = 0.005 with interval 1 is soft tracking (SAC).

    Args:
        tau: Polyak coefficient in (0, 1].
        interval: Gradient updates between target updates.
        pairs: ``(target, source)`` modules with matching parameters.

    Raises:
        ConfigError: for tau outside (0, 1] or interval < 1.
    """

    def __init__(self, tau: float, interval: int, *pairs: tuple[nn.Module, nn.Module]) -> None:
        check_in_range("loss.tau", tau, 0, 1, low_open=True)
        check_at_least("loss.target_update_interval", interval, unit="update")
        self.tau = tau
        self.interval = interval
        self.updates = 0
        self._targets: list[Tensor] = [p for target, _ in pairs for p in target.parameters()]
        self._sources: list[Tensor] = [p for _, source in pairs for p in source.parameters()]

    @torch.no_grad()
    def step(self) -> None:
        """Count one gradient update; move the targets when due."""
        self.updates += 1
        if self.updates % self.interval == 0:
            polyak_update(self._targets, self._sources, self.tau)


@torch.no_grad()
def polyak_update(targets: list[Tensor], sources: list[Tensor], tau: float) -> None:
    """``target <- target + tau * (source - target)`` for every pair, in place (Polyak
    averaging; ``tau = 1`` copies).

    Args:
        targets: The target network's tensors.
        sources: The online network's tensors, of the same shapes, in the same order.
        tau: The Polyak coefficient in (0, 1].
    """
    for target, source in zip(targets, sources, strict=True):
        target.lerp_(source, tau)
