"""One optimizer (and one gradient clip) per parameter group of a loss.

A loss names its parameter groups (``actor``, ``critic``, ``temperature``, ``q`` ...; see
:meth:`rlplat.losses.base.Loss.param_groups`). The YAML node ``optim`` holds the shared
settings; a sub-node named after a group gives that group its own optimizer and gradient
clip, with the shared settings as defaults::

    optim: {name: adam, lr: 3e-4, eps: 1e-5, max_grad_norm: 0.5, actor: {lr: 1e-4}}

Groups without a sub-node share one optimizer, and ``optim.max_grad_norm`` clips their joint
gradient norm, as a single-optimizer agent does (Stable-Baselines3, CleanRL). Adam and
RMSprop act on each parameter alone, so sharing an optimizer changes nothing but the joint
clip. SAC, TD3 and DDPG name every group in their presets: separate optimizers, as in their
papers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rlplat.registry import OPTIMIZERS, ConfigError

GRAD_CLIP_KEY = "max_grad_norm"


@dataclass
class OptimizerUnit:
    """An optimizer over one or more parameter groups, with their gradient clip.

    Attributes:
        label: Group name for a group with its own optimizer; ``""`` for the shared one.
        groups: Names of the parameter groups it steps.
        optimizer: The torch optimizer.
        parameters: Its trainable parameters.
        max_grad_norm: Clip of their joint gradient norm (L2); None does not clip.
        initial_lr: Learning rate of each of the optimizer's ``param_groups`` when built.
    """

    label: str
    groups: tuple[str, ...]
    optimizer: torch.optim.Optimizer
    parameters: list[nn.Parameter]
    max_grad_norm: float | None
    initial_lr: list[float]

    def metric(self, name: str) -> str:
        """``name`` for the shared optimizer, ``<group>/<name>`` for a group's own."""
        return f"{self.label}/{name}" if self.label else name


class Optimizers:
    """The optimizers of a loss's parameter groups, stepped together.

    Args:
        units: One entry per optimizer; each parameter belongs to exactly one.
    """

    def __init__(self, units: list[OptimizerUnit]) -> None:
        self.units = units

    def zero_grad(self) -> None:
        """Drop every gradient (set to None)."""
        for unit in self.units:
            unit.optimizer.zero_grad(set_to_none=True)

    def clip_gradients(self) -> dict[str, Tensor]:
        """Clip each optimizer's gradients to its ``max_grad_norm`` (when it clips).

        Returns:
            The L2 norm of each optimizer's gradients before clipping, 0-dim float tensors,
            keyed ``grad_norm`` (shared optimizer) or ``<group>/grad_norm``.
        """
        norms = {}
        for unit in self.units:
            if unit.max_grad_norm is None:
                grads = [p.grad for p in unit.parameters if p.grad is not None]
                norm = torch.nn.utils.get_total_norm(grads, foreach=True)
            else:
                norm = torch.nn.utils.clip_grad_norm_(unit.parameters, unit.max_grad_norm, foreach=True)
            norms[unit.metric("grad_norm")] = norm
        return norms

    def step(self) -> None:
        """Step every optimizer (after :meth:`clip_gradients`)."""
        for unit in self.units:
            unit.optimizer.step()

    def set_lr_factor(self, factor: float) -> None:
        """Set every learning rate to ``factor`` times its initial value (the schedule)."""
        for unit in self.units:
            for group, lr in zip(unit.optimizer.param_groups, unit.initial_lr):
                group["lr"] = lr * factor

    def learning_rates(self) -> dict[str, float]:
        """The current learning rate of each optimizer: ``lr`` or ``<group>/lr``."""
        return {unit.metric("lr"): unit.optimizer.param_groups[0]["lr"] for unit in self.units}

    def state_dict(self) -> dict[str, Any]:
        """Each optimizer's state, keyed by its label (``shared`` for the shared one)."""
        return {unit.label or "shared": unit.optimizer.state_dict() for unit in self.units}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        for unit in self.units:
            unit.optimizer.load_state_dict(state[unit.label or "shared"])


def make_optimizers(node: Mapping[str, Any], groups: Mapping[str, list[nn.Parameter]]) -> Optimizers:
    """Build the optimizers of a loss's parameter groups from the ``optim`` node.

    Args:
        node: The resolved ``optim`` node: shared settings (``name``, ``max_grad_norm``, the
            optimizer's keyword arguments) and optional sub-nodes named after groups.
        groups: The loss's parameter groups, name -> parameters; parameters that take no
            gradient are left out, and a group left empty gets no optimizer.

    Raises:
        ConfigError: for a sub-node naming no group of the loss (lists the groups), a bad
            ``max_grad_norm``, or an optimizer setting its entry rejects.
    """
    shared = {k: v for k, v in node.items() if not isinstance(v, Mapping)}
    own = {k: dict(v) for k, v in node.items() if isinstance(v, Mapping)}
    for name in own:
        if name not in groups:
            raise ConfigError(
                f"optim.{name}: the loss has no parameter group {name!r}. Its groups: {', '.join(groups)}."
            )
    trainable = {g: [p for p in ps if p.requires_grad] for g, ps in groups.items()}
    units = [_unit(g, (g,), {**shared, **own[g]}, trainable[g]) for g in own if trainable[g]]
    rest = tuple(g for g in groups if g not in own and trainable[g])
    if rest:
        units.append(_unit("", rest, shared, [p for g in rest for p in trainable[g]]))
    return Optimizers(units)


def _unit(label: str, groups: tuple[str, ...], settings: dict[str, Any], params: list[nn.Parameter]) -> OptimizerUnit:
    key = f"optim.{label}" if label else "optim"
    settings = dict(settings)
    clip = settings.pop(GRAD_CLIP_KEY, None)
    if clip is not None and (
        isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0 or math.isinf(clip)
    ):
        raise ConfigError(f"{key}.{GRAD_CLIP_KEY}={clip!r}: must be a number > 0, or null to not clip")
    optimizer = OPTIMIZERS.build(key, settings, params)
    initial_lr = [group["lr"] for group in optimizer.param_groups]
    return OptimizerUnit(label, groups, optimizer, params, clip, initial_lr)
