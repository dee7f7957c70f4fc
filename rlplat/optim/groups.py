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

Flat parameters: an optimizer entry marked ``elementwise`` (Adam, RMSprop: each element's
update depends on that element alone) steps its parameters laid out in one contiguous
buffer, and their gradients in a second one. The modules keep their ``nn.Parameter``
objects, now views into the buffer; autograd accumulates into the gradient views in place.
Zeroing, the gradient norm, the clip and the optimizer step are then one operation each
instead of one per parameter tensor: for the small networks of RL, where the per-operation
overhead dominates, this makes the whole step several times cheaper. Entries that are not
marked (e.g. per-layer trust ratios) get the parameters one by one, as usual.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

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
        optimizer: The torch optimizer (over the flat buffers when ``grads`` is not empty);
            units with flat parameters and the same optimizer settings but the learning rate
            share one, each unit with param groups of its own (see :func:`merge_units`).
        parameters: Its trainable parameters.
        max_grad_norm: Clip of their joint gradient norm (L2); None does not clip.
        param_groups: The optimizer's param groups (dicts) that hold this unit's parameters.
        initial_lr: Learning rate of each of ``param_groups`` when built.
        grads: The flat gradient buffers (one per device and dtype) that the parameters'
            ``.grad`` are views of; empty when the optimizer steps the parameters one by one.
    """

    label: str
    groups: tuple[str, ...]
    optimizer: torch.optim.Optimizer
    parameters: list[nn.Parameter]
    max_grad_norm: float | None
    param_groups: list[dict[str, Any]]
    initial_lr: list[float]
    grads: list[Tensor] = field(default_factory=list)
    _max_norm: Tensor | None = field(default=None, repr=False)  # max_grad_norm on the grads' device

    def metric(self, name: str) -> str:
        """``name`` for the shared optimizer, ``<group>/<name>`` for a group's own."""
        return f"{self.label}/{name}" if self.label else name

    def zero_grad(self) -> None:
        """Zero the gradients: in place in the flat buffers, else set to None."""
        if self.grads:
            for grad in self.grads:
                grad.zero_()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def clip_gradients(self) -> Tensor:
        """Clip the joint gradient norm to ``max_grad_norm`` (when it clips), as
        ``torch.nn.utils.clip_grad_norm_`` does; returns the norm before clipping (0-dim)."""
        if not self.grads:
            if self.max_grad_norm is None:
                grads = [p.grad for p in self.parameters if p.grad is not None]
                return torch.nn.utils.get_total_norm(grads, foreach=True)
            return torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        if len(self.grads) == 1 and self.grads[0].device.type == "cpu" and self.grads[0].dtype == torch.float32:
            return self._clip_in_numpy(self.grads[0])
        if len(self.grads) == 1:
            norm = torch.linalg.vector_norm(self.grads[0])
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in self.grads]))
        if self.max_grad_norm is not None:
            if self._max_norm is None:  # the bound as a tensor: a number over a tensor is two operations
                self._max_norm = torch.tensor(self.max_grad_norm, dtype=norm.dtype, device=norm.device)
            coefficient = torch.div(self._max_norm, norm + 1e-6).clamp_(max=1.0)
            for grad in self.grads:
                grad.mul_(coefficient)
        return norm

    def _clip_in_numpy(self, grad: Tensor) -> Tensor:
        """:meth:`clip_gradients` of one flat float32 buffer on the CPU, in numpy: a norm (one
        BLAS dot product) and, only when it clips, a scaling, against torch's four operations
        of a few microseconds' overhead each, which weigh on the small networks' updates."""
        array = grad.numpy()
        norm = np.sqrt(np.dot(array, array), dtype=np.float32)
        if self.max_grad_norm is not None:
            coefficient = self.max_grad_norm / (float(norm) + 1e-6)
            if coefficient < 1.0:
                array *= np.float32(coefficient)
        return torch.from_numpy(np.asarray(norm))


class EagerStep:
    """``optimizer.step()`` without the wrappers torch.optim puts around every step.

    ``Optimizer.step`` runs inside two wrappers: one for profiling and step hooks, one that
    switches gradients off and inserts a graph break for torch.compile, importing
    ``torch._dynamo`` on the first step (0.7 s and 70 MB here; see
    :mod:`rlplat.deferred_dynamo`). This calls the optimizer's own step function under
    ``torch.no_grad()``: the same update, without them.

    Args:
        optimizer: A torch optimizer for which :meth:`supports` holds.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self._step = inspect.unwrap(type(optimizer).step)

    @staticmethod
    def supports(optimizer: torch.optim.Optimizer) -> bool:
        """Whether the wrappers do nothing for ``optimizer`` but switch gradients off: no
        differentiable param group, no step hook registered (on it or for all optimizers)."""
        from torch.optim import optimizer as module

        hooks = (
            getattr(optimizer, "_optimizer_step_pre_hooks", None),
            getattr(optimizer, "_optimizer_step_post_hooks", None),
            getattr(module, "_global_optimizer_pre_hooks", None),
            getattr(module, "_global_optimizer_post_hooks", None),
        )
        return all(h is not None and not h for h in hooks) and not any(
            group.get("differentiable", False) for group in optimizer.param_groups
        )

    @torch.no_grad()
    def __call__(self) -> None:
        """One step of every param group."""
        self._step(self.optimizer)


class FusedAdamStep:
    """``optimizer.step()`` of a fused Adam, with its kernel called directly once its state exists.

    ``torch.optim.Optimizer.step`` spends about 40 us per call in Python (profiling hooks,
    checks, grouping tensors by device and dtype) around a kernel that takes a few
    microseconds on the flat parameters of an RL agent: a tenth of a PPO minibatch update.
    torch exposes no public entry to the kernel alone, so this calls ``torch._fused_adam_``
    with the optimizer's own state and settings, as ``Adam.step`` does for ``fused=True``
    (one call per param group, the step count incremented first); the numbers are the same
    (tests/unit/optim/test_groups.py compares them). The first step, which creates the state,
    is Adam's own (:class:`EagerStep`).

    Args:
        optimizer: A ``torch.optim.Adam`` for which :meth:`supports` holds, over flat
            parameters (:func:`flatten_parameters`), whose gradients are never None.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self._first_step = EagerStep(optimizer)

    @staticmethod
    def supports(optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` is a fused Adam this step reproduces: plain (no amsgrad,
        maximize, decoupled weight decay or capturable step) with float learning rates, and
        what :meth:`EagerStep.supports` asks (no differentiable group, no step hooks)."""
        return (
            type(optimizer) is torch.optim.Adam
            and EagerStep.supports(optimizer)
            and all(
                group["fused"]
                and not any(group[k] for k in ("amsgrad", "maximize", "capturable"))
                and not group.get("decoupled_weight_decay", False)
                and isinstance(group["lr"], float)
                for group in optimizer.param_groups
            )
        )

    @torch.no_grad()
    def __call__(self) -> None:
        """One Adam step of every param group."""
        optimizer, state = self.optimizer, self.optimizer.state
        if not state:  # flat parameters all have gradients: the first step creates every state
            self._first_step()
            return
        for group in optimizer.param_groups:
            params = group["params"]
            states = [state[p] for p in params]
            steps = [s["step"] for s in states]
            torch._foreach_add_(steps, 1)
            beta1, beta2 = group["betas"]
            torch._fused_adam_(
                params,
                [p.grad for p in params],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
            )


class Optimizers:
    """The optimizers of a loss's parameter groups, stepped together.

    Args:
        units: One entry per optimizer; each parameter belongs to exactly one.
    """

    def __init__(self, units: list[OptimizerUnit]) -> None:
        self.units = units
        # the direct step needs every parameter's gradient present: flat parameters only
        not_flat = {id(unit.optimizer) for unit in units if not unit.grads}
        self._steps = [_step(optimizer, flat=id(optimizer) not in not_flat) for optimizer in self.optimizers]
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
        new ones: each unit's :attr:`OptimizerUnit.param_groups` is pointed at the new dicts
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


def _step(optimizer: torch.optim.Optimizer, flat: bool) -> Callable[[], Any]:
    """The fastest of :class:`FusedAdamStep`, :class:`EagerStep` and ``optimizer.step``
    that gives ``optimizer``'s update."""
    if flat and FusedAdamStep.supports(optimizer):
        return FusedAdamStep(optimizer)
    if EagerStep.supports(optimizer):
        return EagerStep(optimizer)
    return optimizer.step


def make_optimizers(
    node: Mapping[str, Any], groups: Mapping[str, list[nn.Parameter]], delayed: Collection[str] = ()
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
    units = [_unit(g, (g,), group_optimizer_settings(shared, own.get(g, {})), trainable[g]) for g in apart]
    rest = tuple(g for g in groups if g not in apart and trainable[g])
    if rest:
        units.append(_unit("", rest, shared, [p for g in rest for p in trainable[g]]))
    return Optimizers(merge_units(units, separate=delayed))


def _unit(label: str, groups: tuple[str, ...], settings: dict[str, Any], params: list[nn.Parameter]) -> OptimizerUnit:
    key = f"optim.{label}" if label else "optim"
    settings = dict(settings)
    clip = settings.pop(GRAD_CLIP_KEY, None)
    if clip is not None and (
        isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0 or math.isinf(clip)
    ):
        raise ConfigError(f"{key}.{GRAD_CLIP_KEY}={clip!r}: must be a number > 0, or null to not clip")
    entry = OPTIMIZERS.get(str(settings.get("name")), key=f"{key}.name")
    grads: list[Tensor] = []
    stepped: list[Tensor] = list(params)
    if getattr(entry, "elementwise", False):
        stepped, grads = flatten_parameters(params)
    try:
        optimizer = OPTIMIZERS.build(key, settings, stepped, also_valid=(GRAD_CLIP_KEY,))
    except SettingError as error:  # named under optim.; this unit's node may be a group's
        raise error.at(key) from None
    param_groups = list(optimizer.param_groups)
    initial_lr = [group["lr"] for group in param_groups]
    return OptimizerUnit(label, groups, optimizer, params, clip, param_groups, initial_lr, grads)


def merge_units(units: list[OptimizerUnit], separate: Collection[str] = ()) -> list[OptimizerUnit]:
    """Let units with flat parameters whose optimizers are of one class with the same
    settings but the learning rate share one optimizer, each unit keeping its param groups
    (and so its learning rate and schedule) and its own gradient clip. Units of the groups
    in ``separate`` keep theirs.

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
        if unit.grads and len(unit.optimizer.param_groups) == 1 and unit.label not in separate:
            by_settings.setdefault(settings(unit.optimizer), []).append(unit)
    for same in by_settings.values():
        if len(same) < 2:
            continue
        first = same[0].optimizer
        merged = type(first)([unit.param_groups[0] for unit in same], **first.defaults)
        for unit in same:
            unit.optimizer = merged
    return units


@torch.no_grad()
def flatten_parameters(params: list[nn.Parameter]) -> tuple[list[Tensor], list[Tensor]]:
    """Lay ``params`` out in contiguous buffers, one per device and dtype, and their gradients
    in a second set of buffers.

    Each parameter keeps its object (modules and checkpoints still see it) but becomes a view
    into its buffer (``param.data``), and its ``.grad`` a view into the gradient buffer, zeroed;
    autograd accumulates into that view in place as long as it is never set to None.

    Args:
        params: Trainable parameters, each in one group only.

    Returns:
        The flat parameter buffers (leaf tensors, each with its ``.grad`` set to the matching
        gradient buffer) and the gradient buffers.
    """
    layouts: dict[tuple[torch.device, torch.dtype], list[nn.Parameter]] = {}
    for p in params:
        layouts.setdefault((p.device, p.dtype), []).append(p)
    flats: list[Tensor] = []
    grads: list[Tensor] = []
    for (device, dtype), members in layouts.items():
        flat = torch.empty(sum(p.numel() for p in members), device=device, dtype=dtype)
        grad = torch.zeros_like(flat)
        offset = 0
        for p in members:
            n = p.numel()
            flat[offset : offset + n].copy_(p.reshape(-1))
            p.data = flat[offset : offset + n].view_as(p)
            p.grad = grad[offset : offset + n].view_as(p)
            offset += n
        leaf = nn.Parameter(flat)
        leaf.grad = grad
        flats.append(leaf)
        grads.append(grad)
    return flats, grads
