"""K multi-layer perceptrons of one shape evaluated as one network: the twin critics of TD3
and SAC.

An ensemble of K small networks costs K times the per-operation overhead of one, which is
most of their time at RL's sizes. :class:`StackedMLP` holds each layer's K weights as one
parameter ``[K, in, out]`` and evaluates all K with one batched matrix product per layer:
the same function as the K :class:`rlplat.networks.mlp.MLP` torsos (and their Linear heads)
it is built from (tested), with a fifth to a third less forward and backward time for twin
critics. :class:`rlplat.networks.q.ContinuousQEnsemble` stacks its critics only when every
torso is exactly an ``MLP``; any other torso, a subclass of ``MLP`` included, runs its own
``forward``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from rlplat.networks.mlp import FUNCTIONS, MLP


def stackable(modules: Sequence[nn.Module]) -> bool:
    """Whether ``modules`` are :class:`MLP` torsos, exactly that class, of one shape and
    activation (so that :class:`StackedMLP` computes what they compute)."""
    if not modules or not all(type(m) is MLP for m in modules):
        return False
    first = modules[0]
    assert isinstance(first, MLP)
    shape = [tuple(linear.weight.shape) for linear in first.linears]
    return all(
        isinstance(m, MLP) and m.activation == first.activation and [tuple(x.weight.shape) for x in m.linears] == shape
        for m in modules
    )


def per_member(rows: int, weight: Tensor) -> bool:
    """Whether the forward product of a stacked layer with ``weight`` ``[K, in, out]`` over
    ``rows`` rows runs network by network instead of as one batched product.

    torch's CPU ``bmm`` takes a slow path when the product has a single output column (a
    critic's value head): at 256 rows of 256 inputs, two networks, 141 us against 21 us for
    two ``mm`` (one thread). For every other layer shape measured (widths 32 to 256, 64 or
    256 rows) one batched product costs the same as K products or less, fewer calls.
    """
    return weight.shape[2] == 1 and rows * weight.shape[1] >= 8192


class StackedMLP(nn.Module):
    """K networks of one shape, each an :class:`MLP` torso and an optional Linear head,
    evaluated together: one batched matrix product per layer for all K (``torch.baddbmm``)
    instead of K products.

    Built from networks made one by one (their initial weights are kept). Each layer's
    weights are one parameter ``[K, in, out]``, so the K networks belong to one parameter
    group.

    Args:
        torsos: K torsos for which :func:`stackable` holds.
        heads: K Linear heads of one shape, applied to the torsos' features without an
            activation; empty for torsos alone.

    Attributes:
        weights: Each layer's ``[K, in, out]`` weights, first layer to last.
        biases: Each layer's ``[K, 1, out]`` biases.
        activated_layers: The layers followed by the activation (all but a head's).
        activation: The torsos' activation's name.

    Raises:
        ValueError: when the torsos are not stackable or the heads differ in shape.
    """

    def __init__(self, torsos: Sequence[nn.Module], heads: Sequence[nn.Linear] = ()) -> None:
        super().__init__()
        if not stackable(torsos):
            raise ValueError("StackedMLP needs MLP torsos of one shape and activation")
        if heads and (len(heads) != len(torsos) or len({tuple(h.weight.shape) for h in heads}) != 1):
            raise ValueError("StackedMLP needs one head per torso, all of one shape")
        members: list[list[nn.Linear]] = []  # each network's layers, first to last
        for index, torso in enumerate(torsos):
            assert isinstance(torso, MLP)
            members.append([*torso.linears, *([heads[index]] if heads else [])])
        layers = range(len(members[0]))
        with torch.no_grad():  # weights [K, in, out] and biases [K, 1, out] of each layer
            self.weights = nn.ParameterList(
                torch.stack([m[i].weight.t() for m in members]).contiguous() for i in layers
            )
            self.biases = nn.ParameterList(torch.stack([m[i].bias for m in members]).unsqueeze(1) for i in layers)
        # (weight, bias) of each layer: an nn.ParameterList index resolves the name in Python
        # (~4 us a parameter), and the parameter objects never change (.to() and loading a
        # state change their data in place)
        self.layers = list(zip(self.weights, self.biases))
        self.activated_layers = len(members[0]) - (1 if heads else 0)  # the head's layer has no activation
        self.activation: str = cast(MLP, torsos[0]).activation
        self._activation = FUNCTIONS[self.activation]

    def forward(self, x: Tensor, detach: bool = False, first: int | None = None) -> Tensor:
        """``[N, in]`` inputs, shared by the K networks -> ``[K, N, out]``.

        Args:
            x: ``[N, *in_shape]`` float32 (flattened to ``[N, in]``).
            detach: Use the weights without gradient (e.g. a critic in an actor's loss):
                gradients still flow to ``x``.
            first: Evaluate only the first ``first`` networks (``[first, N, out]``).
        """
        h = x if x.dim() == 2 else x.flatten(1)
        size = len(self.layers[0][0])
        k = size if first is None else first
        h = h.expand(k, *h.shape)
        for i, (weight, bias) in enumerate(self.layers):
            if k < size:  # a slice only when needed: its backward pass zero-fills and copies the whole weight
                weight, bias = weight[:k], bias[:k]
            if detach:
                weight, bias = weight.detach(), bias.detach()
            if per_member(h.shape[1], weight):  # bmm's slow path (a value head): one product per network
                h = torch.stack([torch.addmm(bias[m], h[m], weight[m]) for m in range(k)])
            else:
                h = torch.baddbmm(bias, h, weight)
            if i < self.activated_layers:
                h = self._activation(h)
        return h
