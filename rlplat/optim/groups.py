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

Optimizer entries marked ``elementwise`` (Adam, RMSprop: each element's update depends on
that element alone) may be given their parameters laid out in flat buffers
(:class:`rlplat.optim.base.FlatLayout`, which :mod:`rlplat.accel.flat` builds for runs of the
exact built-in classes): zeroing, the gradient norm, the clip and the optimizer step are
then one operation each instead of one per parameter tensor. Without a layout each
optimizer steps the parameters one by one, as in plain PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rlplat.optim.base import FlatLayout, Flatten
from rlplat.optim.optimizers import SettingError
from rlplat.registry import OPTIMIZERS, ConfigError
from rlplat.settings import group_optimizer_settings

GRAD_CLIP_KEY = "max_grad_norm"


@dataclass
class OptimizerUnit:
    """An optimizer over one or more parameter groups, with their gradient clip.

    Attributes:
        label: Group name for a group with its own optimizer; ``""`` for the shared one.
        groups: Names of the parameter groups it steps.
        optimizer: The torch optimizer (over the flat buffers' leaves when ``flat`` is set);
            units of an elementwise optimizer with the same settings but the learning rate
            share one, each unit with param groups of its own (see :func:`merge_units`).
        parameters: Its trainable parameters.
        max_grad_norm: Clip of their joint gradient norm (L2); None does not clip.
        param_groups: The optimizer's param groups (dicts) that hold this unit's parameters.
        initial_lr: Learning rate of each of ``param_groups`` when built.
        elementwise: Whether the optimizer entry is marked elementwise.
        flat: The flat layout of the parameters, or None when the optimizer steps them one
            by one.
    """

    label: str
    groups: tuple[str, ...]
    optimizer: torch.optim.Optimizer
    parameters: list[nn.Parameter]
    max_grad_norm: float | None
    param_groups: list[dict[str, Any]]
    initial_lr: list[float]
    elementwise: bool = False
    flat: FlatLayout | None = None

    def metric(self, name: str) -> str:
        """``name`` for the shared optimizer, ``<group>/<name>`` for a group's own."""
        return f"{self.label}/{name}" if self.label else name

    def zero_grad(self) -> None:
        """Zero the gradients: in place in the flat buffers, else set to None."""
        if self.flat is not None:
            self.flat.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def clip_gradients(self) -> Tensor:
        """Clip the joint gradient norm to ``max_grad_norm`` (when it clips), as
        ``torch.nn.utils.clip_grad_norm_`` does; returns the norm before clipping (0-dim)."""
        if self.flat is not None:
            return self.flat.clip_gradients(self.max_grad_norm)
        if self.max_grad_norm is None:
            grads = [p.grad for p in self.parameters if p.grad is not None]
            return torch.nn.utils.get_total_norm(grads, foreach=True)
        return torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)


class Optimizers:
    """The optimizers of a loss's parameter groups, stepped together.

    Args:
        units: One entry per optimizer; each parameter belongs to exactly one.
    """

    def __init__(self, units: list[OptimizerUnit]) -> None:
        self.units = units
        self._steps = [optimizer.step for optimizer in self.optimizers]
        # the parameter groups each optimizer steps, in the order of _steps
        self._stepped_groups = [
            frozenset(g for unit in units if unit.optimizer is optimizer for g in unit.groups)
            for optimizer in self.optimizers
        ]

    def zero_grad(self) -> None:
        """Zero every gradient (in place where the parameters are flat)."""
        for unit in self.units:
            unit.zero_grad()

    def clip_gradients(self) -> dict[str, Tensor]:
        """Clip each optimizer's gradients to its ``max_grad_norm`` (when it clips).

        Returns:
            The L2 norm of each optimizer's gradients before clipping, 0-dim float tensors,
            keyed ``grad_norm`` (shared optimizer) or ``<group>/grad_norm``.
        """
        return {unit.metric("grad_norm"): unit.clip_gradients() for unit in self.units}

    def step(self, skip: Collection[str] = ()) -> None:
        """Step every optimizer once (after :meth:`clip_gradients`), but those that step only
        parameter groups named in ``skip`` (a loss's delayed groups between their updates;
        :func:`make_optimizers` gives each such group an optimizer of its own)."""
        if not skip:
            for step in self._steps:
                step()
            return
        for step, groups in zip(self._steps, self._stepped_groups):
            if not groups.issubset(skip):
                step()

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The distinct torch optimizers, in the units' order."""
        return list({id(unit.optimizer): unit.optimizer for unit in self.units}.values())

    def set_lr_factor(self, factor: float) -> None:
        """Set every learning rate to ``factor`` times its initial value (the schedule)."""
        for unit in self.units:
            for group, lr in zip(unit.param_groups, unit.initial_lr):
                group["lr"] = lr * factor

    def learning_rates(self) -> dict[str, float]:
        """The current learning rate of each unit: ``lr`` or ``<group>/lr``."""
        return {unit.metric("lr"): unit.param_groups[0]["lr"] for unit in self.units}

    def state_dict(self) -> dict[str, Any]:
        """The states of the distinct optimizers, in order, with the units' labels."""
        return {
            "labels": [unit.label or "shared" for unit in self.units],
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` of optimizers built from the same config.

        torch's ``Optimizer.load_state_dict`` replaces the optimizer's param group dicts with
        new ones: each unit's ``OptimizerUnit.param_groups`` is pointed at the new dicts
        in the same positions, or the learning-rate schedule (:meth:`set_lr_factor`) would
        set rates the optimizer no longer reads.
        """
        positions = [[_position(unit.optimizer, group) for group in unit.param_groups] for unit in self.units]
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for unit, indices in zip(self.units, positions, strict=True):
            unit.param_groups = [unit.optimizer.param_groups[i] for i in indices]


def _position(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> int:
    """The index of the param group dict ``group`` (that very dict) in ``optimizer``."""
    return next(i for i, candidate in enumerate(optimizer.param_groups) if candidate is group)


def make_optimizers(
    node: Mapping[str, Any],
    groups: Mapping[str, list[nn.Parameter]],
    delayed: Collection[str] = (),
    flatten: Flatten | None = None,
) -> Optimizers:
    """Build the optimizers of a loss's parameter groups from the ``optim`` node.

    Args:
        node: The resolved ``optim`` node: shared settings (``name``, ``max_grad_norm``, the
            optimizer's keyword arguments) and optional sub-nodes named after groups.
        groups: The loss's parameter groups, name -> parameters; parameters that take no
            gradient are left out, and a group left empty gets no optimizer.
        delayed: Groups stepped only on some updates (the loss's ``delayed_groups``): each
            gets an optimizer of its own, shared with no other group (the shared settings
            when it has no sub-node), so that :meth:`Optimizers.step` can leave it out.
        flatten: Lays out the parameters of each unit whose optimizer entry is marked
            ``elementwise`` in flat buffers; None steps every parameter on its own.

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
    apart = [g for g in groups if (g in own or g in delayed) and trainable[g]]
    units = [_unit(g, (g,), group_optimizer_settings(shared, own.get(g, {})), trainable[g], flatten) for g in apart]
    rest = tuple(g for g in groups if g not in apart and trainable[g])
    if rest:
        units.append(_unit("", rest, shared, [p for g in rest for p in trainable[g]], flatten))
    return Optimizers(merge_units(units, separate=delayed))


def _unit(
    label: str, groups: tuple[str, ...], settings: dict[str, Any], params: list[nn.Parameter], flatten: Flatten | None
) -> OptimizerUnit:
    key = f"optim.{label}" if label else "optim"
    settings = dict(settings)
    clip = settings.pop(GRAD_CLIP_KEY, None)
    if clip is not None and (
        isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0 or math.isinf(clip)
    ):
        raise ConfigError(f"{key}.{GRAD_CLIP_KEY}={clip!r}: must be a number > 0, or null to not clip")
    entry = OPTIMIZERS.get(str(settings.get("name")), key=f"{key}.name")
    elementwise = bool(getattr(entry, "elementwise", False))
    flat = flatten(params) if flatten is not None and elementwise else None
    stepped: list[Tensor] = list(params) if flat is None else list(flat.leaves)
    try:
        optimizer = OPTIMIZERS.build(key, settings, stepped, also_valid=(GRAD_CLIP_KEY,))
    except SettingError as error:  # named under optim.; this unit's node may be a group's
        raise error.at(key) from None
    param_groups = list(optimizer.param_groups)
    initial_lr = [group["lr"] for group in param_groups]
    return OptimizerUnit(label, groups, optimizer, params, clip, param_groups, initial_lr, elementwise, flat)


def merge_units(units: list[OptimizerUnit], separate: Collection[str] = ()) -> list[OptimizerUnit]:
    """Let units of an elementwise optimizer entry whose optimizers are of one class with the
    same settings but the learning rate share one optimizer, each unit keeping its param
    groups (and so its learning rate and schedule) and its own gradient clip. Units of the
    groups in ``separate`` keep theirs.

    For an elementwise optimizer (Adam, RMSprop) this changes no number: each element's
    update depends on that element's gradient and state alone. It saves the optimizer's
    per-call overhead, which for the small networks of RL is most of a step's cost (SAC's
    three groups: three steps become one).
    """

    def settings(optimizer: torch.optim.Optimizer) -> tuple[Any, ...]:
        group = optimizer.param_groups[0]
        return (type(optimizer), *sorted((k, repr(v)) for k, v in group.items() if k not in ("params", "lr")))

    by_settings: dict[tuple[Any, ...], list[OptimizerUnit]] = {}
    for unit in units:
        if unit.elementwise and len(unit.optimizer.param_groups) == 1 and unit.label not in separate:
            by_settings.setdefault(settings(unit.optimizer), []).append(unit)
    for same in by_settings.values():
        if len(same) < 2:
            continue
        first = same[0].optimizer
        merged = type(first)([unit.param_groups[0] for unit in same], **first.defaults)
        for unit in same:
            unit.optimizer = merged
    return units
