"""Optimizer entries (``optim.name``). Their defaults live in ``conf/optim/<name>.yaml`` only."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from rlplat.registry import ConfigError


def _check(name: str, lr: float, eps: float, weight_decay: float) -> None:
    """Raise ConfigError for a non-positive lr or eps or a negative weight decay."""
    if lr <= 0:
        raise ConfigError(f"optim.lr={lr}: must be > 0 ({name})")
    if eps <= 0:
        raise ConfigError(f"optim.eps={eps}: must be > 0 ({name})")
    if weight_decay < 0:
        raise ConfigError(f"optim.weight_decay={weight_decay}: must be >= 0 ({name})")


def adam(
    params: Iterable[nn.Parameter],
    /,
    *,
    lr: float,
    eps: float,
    betas: tuple[float, float],
    weight_decay: float,
    fused: bool,
) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization").

    Args:
        params: Parameters to optimise (supplied by rlplat).
        lr: Initial learning rate of the schedule.
        eps: Denominator epsilon.
        betas: Decay rates of the first and second moment estimates.
        weight_decay: L2 penalty.
        fused: One kernel over all parameters (several times faster for small networks).

    Raises:
        ConfigError: for lr or eps <= 0, or a negative weight decay.
    """
    _check("adam", lr, eps, weight_decay)
    b1, b2 = betas
    return torch.optim.Adam(params, lr=lr, eps=eps, betas=(b1, b2), weight_decay=weight_decay, fused=fused)


adam.elementwise = True  # type: ignore[attr-defined]  # each element's update is its own: flat parameters


def rmsprop(
    params: Iterable[nn.Parameter],
    /,
    *,
    lr: float,
    alpha: float,
    eps: float,
    weight_decay: float,
) -> torch.optim.Optimizer:
    """RMSprop (Tieleman & Hinton 2012), as A2C uses it (Mnih et al. 2016).

    Args:
        params: Parameters to optimise (supplied by rlplat).
        lr: Initial learning rate of the schedule.
        alpha: Smoothing constant of the squared-gradient average.
        eps: Denominator epsilon.
        weight_decay: L2 penalty.

    Raises:
        ConfigError: for lr or eps <= 0, or a negative weight decay.
    """
    _check("rmsprop", lr, eps, weight_decay)
    return torch.optim.RMSprop(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)


rmsprop.elementwise = True  # type: ignore[attr-defined]  # as adam
