"""Optimizers by name, and learning-rate schedules in frames."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from rlplat.registry import OPTIMIZERS, ConfigError

LR_SCHEDULES = ("constant", "linear")


@OPTIMIZERS.register("adam")
def adam(
    params: Iterable[nn.Parameter],
    lr: float = 3e-4,
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.999),
    weight_decay: float = 0.0,
    fused: bool = True,
) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba 2015). ``lr`` is the initial learning rate of the schedule;
    ``fused`` runs one kernel over all parameters (several times faster for small nets)."""
    return torch.optim.Adam(
        params, lr=lr, eps=eps, betas=tuple(betas), weight_decay=weight_decay, fused=fused
    )


@OPTIMIZERS.register("rmsprop")
def rmsprop(
    params: Iterable[nn.Parameter],
    lr: float = 7e-4,
    alpha: float = 0.99,
    eps: float = 1e-5,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """RMSprop as used by A2C (Mnih et al. 2016)."""
    return torch.optim.RMSprop(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)


def lr_factor(schedule: str, frames: int, total_frames: int) -> float:
    """Multiplier of the initial learning rate after ``frames`` of ``total_frames``.

    ``constant`` keeps 1; ``linear`` decays from 1 to 0 at ``total_frames`` (as
    Stable-Baselines3's linear schedule over the remaining progress).

    Raises:
        ConfigError: for an unknown schedule.
    """
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(0.0, 1.0 - frames / total_frames)
    raise ConfigError(f"trainer.lr_schedule={schedule!r}: valid: {', '.join(LR_SCHEDULES)}")
