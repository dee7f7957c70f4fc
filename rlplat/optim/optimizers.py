"""Optimizer entries (``optim.name``). Their defaults live in ``conf/optim/<name>.yaml`` only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rlplat.registry import ConfigError, RangeError, check_non_negative, check_positive


class SettingError(ConfigError):
    """A bad optimizer setting; the message names it under ``optim.`` until the caller, which
    knows the node it came from (``optim.critic`` for a group's own), names it there
    (:meth:`at`)."""

    def __init__(self, setting: str, value: Any, rule: str) -> None:
        self.setting, self.value, self.rule = setting, value, rule
        super().__init__(self._text("optim"))

    def _text(self, node: str) -> str:
        return f"{node}.{self.setting}={self.value!r}: {self.rule}"

    def at(self, node: str) -> ConfigError:
        """The same error, naming the setting under ``node``."""
        return ConfigError(self._text(node))


def _check(name: str, lr: float, eps: float, weight_decay: float, **unit_interval: Any) -> None:
    """Raise SettingError for a non-positive lr or eps, a negative weight decay (null and NaN
    included), or a value of ``unit_interval`` (a number, or a list of them, e.g. Adam's
    betas) outside [0, 1)."""
    try:
        check_positive("lr", lr, note=name, show=repr)
        check_positive("eps", eps, note=name, show=repr)
        check_non_negative("weight_decay", weight_decay, note=name, show=repr)
    except RangeError as error:  # the rule's words, the setting named under its node later
        raise SettingError(error.key, error.value, error.rule) from None
    for key, value in unit_interval.items():
        values = value if isinstance(value, list | tuple) else [value]
        if key == "betas" and len(values) != 2:
            raise SettingError(key, value, f"must be two numbers in [0, 1), e.g. [0.9, 0.999] ({name})")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v < 1.0 for v in values):
            raise SettingError(key, value, f"must be {'numbers' if key == 'betas' else 'a number'} in [0, 1) ({name})")


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
        ConfigError: for lr or eps <= 0, a negative weight decay, or betas that are not two
            numbers in [0, 1).
    """
    _check("adam", lr, eps, weight_decay, betas=betas)
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
        ConfigError: for lr or eps <= 0, a negative weight decay, or alpha outside [0, 1).
    """
    _check("rmsprop", lr, eps, weight_decay, alpha=alpha)
    return torch.optim.RMSprop(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)


rmsprop.elementwise = True  # type: ignore[attr-defined]  # as adam
