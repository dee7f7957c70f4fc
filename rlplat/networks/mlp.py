"""Multi-layer perceptron torso."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

import gymnasium
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.networks.backward import (
    OUTPUT_BACKWARD,
    linear_backward,
    linear_grads,
    per_member,
    stacked_addmm,
    stacked_input_grad,
    stacked_linear_grads,
    weight_and_bias,
)
from rlplat.networks.numpy_passes import (
    NUMPY_IN_PLACE,
    NUMPY_OUTPUT_BACKWARD,
    numpy_linear,
    numpy_linear_backward,
    numpy_linear_grads,
    on_cpu_float32,
)
from rlplat.registry import ConfigError

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}
FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "relu": F.relu,
    "elu": F.elu,
    "gelu": F.gelu,
    "silu": F.silu,
}
IN_PLACE: dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh_, "relu": torch.relu_}


_NUMPY_FLOATS = (torch.float32, torch.float64)


def tanh_(x: Tensor) -> Tensor:
    """tanh in place on a tensor outside autograd; on the CPU through numpy's ``tanh``.

    torch 2.13's CPU tanh is slow on the machines measured here: 8.8 us for a ``[64, 64]``
    float32 tensor (whatever ``ATEN_CPU_CAPABILITY``; sigmoid takes 1.7 us) against 0.9 us
    for numpy's (2.2 us with the wrapping), at the same accuracy (within one float32 ulp of
    the float64 value, as torch's is). It was the largest single operation of a 64-unit
    MLP's update.

    Args:
        x: A float tensor (torch's own tanh for other dtypes and devices, and under
            ``torch.compile``, whose generated code has a fast tanh of its own).

    Returns:
        ``x``, holding tanh of its old values.
    """
    if (
        x.device.type == "cpu"
        and x.dtype in _NUMPY_FLOATS
        and not x.requires_grad
        and not torch.compiler.is_compiling()
    ):
        array = x.numpy()
        np.tanh(array, out=array)
        return x
    return x.tanh_()


# in-place activations for forward passes outside autograd (MLP.forward_saving)
NO_GRAD_IN_PLACE: dict[str, Callable[[Tensor], Tensor]] = {"tanh": tanh_, "relu": torch.relu_}


class MLP(nn.Module):
    """Flatten the observation, then Linear + activation layers up to ``out_features``.

    With ``hidden_sizes=[64]`` and ``out_features=64`` the torso is
    ``obs -> 64 -> 64``, each Linear followed by the activation: the two 64-unit layers of
    Stable-Baselines3's default MlpPolicy.

    Args:
        observation_space: A Box space; observations ``[N, *obs_shape]`` are flattened.
        out_features: Width of the output features ``[N, out_features]``.
        hidden_sizes: Widths of the hidden layers before the output layer.
        activation: One of ``tanh``, ``relu``, ``elu``, ``gelu``, ``silu``.
        orthogonal_init: Orthogonal weights with gain sqrt(2) and zero biases (as in
            Stable-Baselines3 and CleanRL); False keeps PyTorch's default init.

    Raises:
        ConfigError: for a non-Box space, an unknown activation or a size < 1.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        out_features: int,
        hidden_sizes: Sequence[int] = (64,),
        activation: str = "tanh",
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gymnasium.spaces.Box):
            raise ConfigError(f"network=mlp needs a Box observation space, got {observation_space}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"network.activation={activation!r}: valid: {', '.join(ACTIVATIONS)}")
        sizes = [int(np.prod(observation_space.shape)), *hidden_sizes, out_features]
        if min(hidden_sizes, default=1) < 1:
            raise ConfigError(f"network.hidden_sizes={list(hidden_sizes)}: sizes must be >= 1")
        if out_features < 1:  # the loss's torso width (loss.features)
            raise ConfigError(f"loss.features={out_features}: must be >= 1")
        layers: list[nn.Module] = [nn.Flatten(start_dim=1)]
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            linear = nn.Linear(n_in, n_out)
            if orthogonal_init:
                nn.init.orthogonal_(linear.weight, gain=math.sqrt(2.0))
                nn.init.zeros_(linear.bias)
            layers += [linear, ACTIVATIONS[activation]()]
        self.layers = nn.Sequential(*layers)
        # The forward pass calls the functions directly: a module call per layer costs more
        # than the layer's arithmetic at these sizes.
        self._linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        self._activation = FUNCTIONS[activation]
        self.activation = activation

    def forward(self, observation: Tensor) -> Tensor:
        """``[N, *obs_shape]`` -> ``[N, out_features]``."""
        h = observation if observation.dim() == 2 else observation.flatten(1)
        for linear in self._linears:
            h = self._activation(F.linear(h, linear.weight, linear.bias))
        return h

    def forward_function(self) -> Callable[[Tensor], Tensor]:
        """:meth:`forward` for acting, without gradients, while the parameters do not change
        (see :func:`rlplat.collectors.base.act_function`): the weights' transposes are taken
        once, and tanh and ReLU act in place on each layer's output. The same values as
        :meth:`forward`, bit for bit (``F.linear`` is this ``addmm`` for 2-D inputs).

        Returns:
            ``[N, *obs_shape]`` float32 -> ``[N, out_features]``; valid under
            ``torch.inference_mode`` or ``torch.no_grad`` until the next parameter update.
        """
        layers = [(linear.bias, linear.weight.t()) for linear in self._linears]
        activation = IN_PLACE.get(self.activation, self._activation)

        def forward(observation: Tensor) -> Tensor:
            h = observation if observation.dim() == 2 else observation.flatten(1)
            for bias, weight in layers:
                h = activation(torch.addmm(bias, h, weight))
            return h

        return forward

    def numpy_forward_function(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`forward_function` in numpy, for acting on the CPU: numpy's call overhead is
        a fraction of torch's, which dominates a small network's forward pass at one env
        step's batch (see :meth:`rlplat.networks.actor_critic.ActorCritic.act_function`).
        Equal to :meth:`forward` to float32 rounding (numpy's matrix product may sum in
        another order).

        Returns:
            ``[N, *obs_shape]`` float32 array -> ``[N, out_features]`` float32 array, valid
            until the next parameter update; None where it does not apply: parameters not
            float32 on the CPU, or an activation other than tanh and ReLU.
        """
        activation = NUMPY_IN_PLACE.get(self.activation)
        layers = [numpy_linear(linear) for linear in self._linears]
        if activation is None or any(layer is None for layer in layers):
            return None
        arrays = cast(list[tuple[np.ndarray, np.ndarray]], layers)

        def forward(observation: np.ndarray) -> np.ndarray:
            return _numpy_layers(observation.reshape(len(observation), -1), arrays, activation)

        return forward

    @property
    def has_backward(self) -> bool:
        """Whether :meth:`backward` can back-propagate through the activation (tanh, ReLU)."""
        return self.activation in OUTPUT_BACKWARD

    def forward_saving(self, observation: Tensor) -> list[Tensor]:
        """:meth:`forward` without autograd, keeping what :meth:`backward` needs (tanh
        through :func:`tanh_`: the same values to one float32 ulp).

        Args:
            observation: ``[N, *obs_shape]`` float32.

        Returns:
            The flattened input ``[N, in]`` and each layer's activated output, the last one
            ``[N, out_features]`` (the torso's output).
        """
        h = observation if observation.dim() == 2 else observation.flatten(1)
        outputs = [h]
        activation = NO_GRAD_IN_PLACE.get(self.activation, self._activation)
        for linear in self._linears:
            weight, bias = weight_and_bias(linear)
            h = activation(torch.addmm(bias, h, weight.t()))  # F.linear for [N, in]
            outputs.append(h)
        return outputs

    def backward(self, outputs: list[Tensor], grad_output: Tensor) -> None:
        """Back-propagate dL/d(output) through the layers, setting every weight's and bias's
        ``.grad`` (replaced, not accumulated; see :mod:`rlplat.networks.backward`).

        Args:
            outputs: What :meth:`forward_saving` returned for this minibatch.
            grad_output: ``[N, out_features]`` float, dL/d(torso output).

        Raises:
            ValueError: when the activation has no written-out backward (:attr:`has_backward`).
        """
        if not self.has_backward:
            raise ValueError(f"MLP.backward supports tanh and relu activations, not {self.activation!r}")
        activation_backward = OUTPUT_BACKWARD[self.activation]
        grad = grad_output
        for i in range(len(self._linears) - 1, 0, -1):
            grad = linear_backward(self._linears[i], outputs[i], activation_backward(grad, outputs[i + 1]))
        linear_grads(self._linears[0], outputs[0], activation_backward(grad, outputs[1]))  # no gradient for the input

    @property
    def numpy_passes(self) -> bool:
        """Whether :meth:`numpy_forward_saving` and :meth:`numpy_backward` apply: tanh or ReLU,
        parameters float32 on the CPU (:mod:`rlplat.networks.numpy_passes`)."""
        return self.activation in NUMPY_IN_PLACE and on_cpu_float32(*self.parameters())

    def numpy_forward_saving(self, observation: np.ndarray) -> list[np.ndarray]:
        """:meth:`forward_saving` on arrays (when :attr:`numpy_passes`): ``[N, *obs_shape]``
        float32 -> the flattened input and each layer's activated output."""
        h = observation.reshape(len(observation), -1)
        outputs = [h]
        layers = [cast(tuple[np.ndarray, np.ndarray], numpy_linear(linear)) for linear in self._linears]
        _numpy_layers(h, layers, NUMPY_IN_PLACE[self.activation], outputs)
        return outputs

    def numpy_backward(self, outputs: list[np.ndarray], grad_output: np.ndarray) -> None:
        """:meth:`backward` on arrays: sets every weight's and bias's ``.grad`` (replaced)
        from ``[N, out_features]`` dL/d(output)."""
        activation_backward = NUMPY_OUTPUT_BACKWARD[self.activation]
        grad = grad_output
        for i in range(len(self._linears) - 1, 0, -1):
            grad = numpy_linear_backward(self._linears[i], outputs[i], activation_backward(grad, outputs[i + 1]))
        numpy_linear_grads(self._linears[0], outputs[0], activation_backward(grad, outputs[1]))


def _numpy_layers(
    h: np.ndarray,
    layers: Sequence[tuple[np.ndarray, np.ndarray]],
    activation: Callable[[np.ndarray], object],
    outputs: list[np.ndarray] | None = None,
) -> np.ndarray:
    """``[N, in]`` through Linear layers ``(W^T, b)``, each activated in place; each layer's
    output appended to ``outputs`` when given. Returns the last layer's output."""
    for weight, bias in layers:
        h = h @ weight
        h += bias
        activation(h)
        if outputs is not None:
            outputs.append(h)
    return h


def stackable(modules: Sequence[nn.Module]) -> bool:
    """Whether ``modules`` are :class:`MLP` torsos of one shape and activation (so that
    :class:`StackedMLP` can evaluate them together)."""
    if not modules or not all(type(m) is MLP for m in modules):
        return False
    first = modules[0]
    assert isinstance(first, MLP)
    shape = [tuple(linear.weight.shape) for linear in first._linears]
    return all(
        isinstance(m, MLP) and m.activation == first.activation and [tuple(x.weight.shape) for x in m._linears] == shape
        for m in modules
    )


class StackedMLP(nn.Module):
    """K networks of one shape, each an :class:`MLP` torso and an optional Linear head,
    evaluated together: one batched matrix product per layer for all K (``torch.baddbmm``)
    instead of K products, and as many fewer operations in the backward pass. For the twin
    critics of TD3 and SAC this saves a fifth to a third of their forward and backward time.

    Built from networks made one by one (their initial weights are kept). Each layer's
    weights are one parameter ``[K, in, out]``, so the K networks belong to one parameter
    group.

    Args:
        torsos: K torsos for which :func:`stackable` holds.
        heads: K Linear heads of one shape, applied to the torsos' features without an
            activation; empty for torsos alone.

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
            members.append([*torso._linears, *([heads[index]] if heads else [])])
        layers = range(len(members[0]))
        with torch.no_grad():  # weights [K, in, out] and biases [K, 1, out] of each layer
            weights = [torch.stack([m[i].weight.t() for m in members]).contiguous() for i in layers]
            self.weights = nn.ParameterList(weights)
            self.biases = nn.ParameterList(torch.stack([m[i].bias for m in members]).unsqueeze(1) for i in layers)
        self.activated_layers = len(members[0]) - (1 if heads else 0)  # the head's layer has no activation
        self.activation = cast(MLP, torsos[0]).activation
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
        size = len(self.weights[0])
        k = size if first is None else first
        h = h.expand(k, *h.shape)
        for i, (weight, bias) in enumerate(self._layers()):
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

    @property
    def has_backward(self) -> bool:
        """Whether :meth:`backward` can back-propagate through the activation (tanh, ReLU)."""
        return self.activation in OUTPUT_BACKWARD

    def _layers(self) -> list[tuple[Tensor, Tensor]]:
        """Each layer's ``(weight, bias)``, read from the parameter lists' dicts (an
        ``nn.ParameterList`` index resolves the name in Python, ~4 us a parameter; see
        :func:`rlplat.networks.backward.weight_and_bias`)."""
        weights, biases = self.weights._parameters, self.biases._parameters
        return [(cast(Tensor, weights[key]), cast(Tensor, biases[key])) for key in weights]

    def forward_saving(self, x: Tensor) -> list[Tensor]:
        """:meth:`forward` of all K networks without autograd, keeping what :meth:`backward`
        needs; large layers run network by network
        (:func:`rlplat.networks.backward.stacked_addmm`).

        Args:
            x: ``[N, *in_shape]`` float32, shared by the K networks.

        Returns:
            The flattened input ``[N, in]`` and each layer's (activated) output
            ``[K, N, width]``, the last one ``[K, N, out]``.
        """
        h = x if x.dim() == 2 else x.flatten(1)
        outputs = [h]
        activation = NO_GRAD_IN_PLACE.get(self.activation, self._activation)
        for i, (weight, bias) in enumerate(self._layers()):
            h = stacked_addmm(bias, h, weight)
            if i < self.activated_layers:
                h = activation(h)
            outputs.append(h)
        return outputs

    def backward(
        self, outputs: list[Tensor], grad_output: Tensor, *, trained: bool = True, input_grad: bool = False
    ) -> Tensor | None:
        """Back-propagate dL/d(output) through the K networks.

        Args:
            outputs: What :meth:`forward_saving` returned.
            grad_output: ``[K, N, out]`` float, dL/d(each network's output).
            trained: Set every weight's and bias's ``.grad`` (replaced, not accumulated);
                False leaves them alone, for networks that the loss holds fixed (e.g.
                critics in an actor's loss).
            input_grad: Return dL/d(input).

        Returns:
            With ``input_grad``, ``[K, N, in]`` dL/d(input) through each network (the input is
            shared: its gradient is the sum over K); None otherwise.

        Raises:
            ValueError: when the activation has no written-out backward (:attr:`has_backward`).
        """
        if not self.has_backward:
            raise ValueError(f"StackedMLP.backward supports tanh and relu activations, not {self.activation!r}")
        activation_backward = OUTPUT_BACKWARD[self.activation]
        layers = self._layers()
        grad = grad_output
        for i in range(len(layers) - 1, -1, -1):
            weight, bias = layers[i]
            if i < self.activated_layers:
                grad = activation_backward(grad, outputs[i + 1])
            if trained:
                stacked_linear_grads(weight, bias, outputs[i], grad)
            if i > 0 or input_grad:  # the input's gradient only where something needs it
                grad = stacked_input_grad(weight, grad)
        return grad if input_grad else None
