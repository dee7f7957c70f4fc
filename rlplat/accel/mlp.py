"""Closed-form passes of rlplat's MLP torso and of the stacked ensemble: a forward pass
outside autograd that keeps each layer's output, and the backward pass that sets the
parameters' gradients from them, in torch (any device) and in numpy (float32 on the CPU).

They compute what :meth:`rlplat.networks.mlp.MLP.forward` and
:meth:`rlplat.networks.ensemble.StackedMLP.forward` compute, for tanh and ReLU (the
activations whose derivative is written out), and are built only for modules of exactly
those classes (:mod:`rlplat.accel.plan`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from rlplat.accel.arrays import NUMPY_IN_PLACE, NUMPY_OUTPUT_BACKWARD, LinearArrays
from rlplat.accel.linear import IN_PLACE, OUTPUT_BACKWARD, gradient_of, layer_of, linear_backward, linear_grads
from rlplat.networks.ensemble import StackedMLP, per_member
from rlplat.networks.mlp import MLP

ACTIVATIONS = tuple(OUTPUT_BACKWARD)
"""The MLP activations the closed-form passes cover."""


def _flat(observation: Tensor) -> Tensor:
    return observation if observation.dim() == 2 else observation.flatten(1)


class MLPPasses:
    """The closed-form passes of an :class:`MLP` in torch.

    Args:
        mlp: The torso (exactly :class:`MLP`, activation in :data:`ACTIVATIONS`).
    """

    def __init__(self, mlp: MLP) -> None:
        self.layers = [layer_of(linear) for linear in mlp.linears]
        self.activation = IN_PLACE[mlp.activation]
        self.activation_backward = OUTPUT_BACKWARD[mlp.activation]

    def forward_saving(self, observation: Tensor) -> list[Tensor]:
        """:meth:`MLP.forward` without autograd (tanh through
        :func:`rlplat.accel.linear.tanh_`: the same values to one float32 ulp).

        Args:
            observation: ``[N, *obs_shape]`` float32.

        Returns:
            The flattened input ``[N, in]`` and each layer's activated output, the last one
            ``[N, out_features]`` (the torso's output).
        """
        h = _flat(observation)
        outputs = [h]
        for weight, bias in self.layers:
            h = self.activation(torch.addmm(bias, h, weight.t()))  # F.linear for [N, in]
            outputs.append(h)
        return outputs

    def backward(self, outputs: list[Tensor], grad_output: Tensor) -> None:
        """Back-propagate ``[N, out_features]`` dL/d(output) through the layers, setting every
        weight's and bias's ``.grad`` (replaced, not accumulated).

        Args:
            outputs: What :meth:`forward_saving` returned for this minibatch.
            grad_output: ``[N, out_features]`` float, dL/d(torso output).
        """
        grad = grad_output
        for i in range(len(self.layers) - 1, 0, -1):
            grad = linear_backward(self.layers[i], outputs[i], self.activation_backward(grad, outputs[i + 1]))
        linear_grads(self.layers[0], outputs[0], self.activation_backward(grad, outputs[1]))  # no input gradient


class NumpyMLP:
    """The passes of an :class:`MLP` in numpy (parameters float32 on the CPU).

    Args:
        mlp: The torso (exactly :class:`MLP`, activation in :data:`ACTIVATIONS`).
    """

    def __init__(self, mlp: MLP) -> None:
        self.layers = [LinearArrays(linear) for linear in mlp.linears]
        self.activation = NUMPY_IN_PLACE[mlp.activation]
        self.activation_backward = NUMPY_OUTPUT_BACKWARD[mlp.activation]

    def forward(self, observation: np.ndarray) -> np.ndarray:
        """:meth:`MLP.forward` on an array: ``[N, *obs_shape]`` float32 -> ``[N, out_features]``."""
        h = observation.reshape(len(observation), -1)
        for layer in self.layers:
            h = h @ layer.weight_t
            h += layer.bias
            self.activation(h)
        return h

    def forward_saving(self, observation: np.ndarray) -> list[np.ndarray]:
        """:meth:`MLPPasses.forward_saving` on arrays: the flattened input and each layer's
        activated output."""
        h = observation.reshape(len(observation), -1)
        outputs = [h]
        for layer in self.layers:
            h = h @ layer.weight_t
            h += layer.bias
            self.activation(h)
            outputs.append(h)
        return outputs

    def backward(self, outputs: list[np.ndarray], grad_output: np.ndarray) -> None:
        """:meth:`MLPPasses.backward` on arrays: sets every weight's and bias's ``.grad``
        (replaced) from ``[N, out_features]`` dL/d(output)."""
        grad = grad_output
        for i in range(len(self.layers) - 1, 0, -1):
            grad = self.layers[i].backward(outputs[i], self.activation_backward(grad, outputs[i + 1]))
        self.layers[0].grads(outputs[0], self.activation_backward(grad, outputs[1]))


class StackedPasses:
    """The closed-form passes of a :class:`StackedMLP` (K networks of one shape) in torch.

    Args:
        stacked: The ensemble (its torsos' activation in :data:`ACTIVATIONS`).
    """

    def __init__(self, stacked: StackedMLP) -> None:
        self.layers = list(stacked.layers)
        self.activated_layers = stacked.activated_layers
        self.activation = IN_PLACE[stacked.activation]
        self.activation_backward = OUTPUT_BACKWARD[stacked.activation]

    def forward_saving(self, x: Tensor) -> list[Tensor]:
        """:meth:`StackedMLP.forward` of all K networks without autograd, keeping what
        :meth:`backward` needs.

        Args:
            x: ``[N, *in_shape]`` float32, shared by the K networks.

        Returns:
            The flattened input ``[N, in]`` and each layer's (activated) output
            ``[K, N, width]``, the last one ``[K, N, out]``.
        """
        h = _flat(x)
        outputs = [h]
        for i, (weight, bias) in enumerate(self.layers):
            h = stacked_addmm(bias, h, weight)
            if i < self.activated_layers:
                h = self.activation(h)
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
        """
        grad = grad_output
        for i in range(len(self.layers) - 1, -1, -1):
            weight, bias = self.layers[i]
            if i < self.activated_layers:
                grad = self.activation_backward(grad, outputs[i + 1])
            if trained:
                stacked_linear_grads(weight, bias, outputs[i], grad)
            if i > 0 or input_grad:  # the input's gradient only where something needs it
                grad = stacked_input_grad(weight, grad)
        return grad if input_grad else None


def stacked_addmm(bias: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """``inputs @ weight + bias`` for K stacked networks at once: one batched product
    (``torch.baddbmm``), or K products into the rows of one output where that is faster
    (:func:`rlplat.networks.ensemble.per_member`).

    Args:
        bias: ``[K, 1, out]``.
        inputs: ``[K, N, in]``, or ``[N, in]`` shared by the K networks.
        weight: ``[K, in, out]``.

    Returns:
        ``[K, N, out]``.
    """
    k, rows = weight.shape[0], inputs.shape[-2]
    if not per_member(rows, weight):
        return torch.baddbmm(bias, inputs.expand(k, *inputs.shape[-2:]), weight)
    out = inputs.new_empty(k, rows, weight.shape[2])
    for member in range(k):
        x = inputs if inputs.dim() == 2 else inputs[member]
        torch.addmm(bias[member], x, weight[member], out=out[member])
    return out


def stacked_linear_grads(weight: Tensor, bias: Tensor, inputs: Tensor, grad_output: Tensor) -> None:
    """Parameter gradients of :func:`stacked_addmm`: sets ``weight.grad = x^T g`` and
    ``bias.grad = sum_n g`` for each of the K networks (replaced, written in place). A value
    head's (one output column) runs as ``[K, 1, in]`` rows, avoiding ``bmm``'s slow path.

    Args:
        weight: ``[K, in, out]`` parameter.
        bias: ``[K, 1, out]`` parameter.
        inputs: ``[K, N, in]`` or shared ``[N, in]``, the layer's input in the forward pass.
        grad_output: ``[K, N, out]``, dL/d(output).
    """
    k, width = weight.shape[0], weight.shape[1]
    weight_grad, bias_grad = gradient_of(weight), gradient_of(bias)
    inputs = inputs.expand(k, *inputs.shape[-2:])
    if weight.shape[2] == 1:
        torch.bmm(grad_output.transpose(1, 2), inputs, out=weight_grad.view(k, 1, width))
    else:
        torch.bmm(inputs.transpose(1, 2), grad_output, out=weight_grad)
    torch.sum(grad_output, 1, keepdim=True, out=bias_grad)


def stacked_input_grad(weight: Tensor, grad_output: Tensor) -> Tensor:
    """dL/d(input) of :func:`stacked_addmm`: ``g @ weight^T``, ``[K, N, out] -> [K, N, in]``; for a
    single output column (a value head) the outer product ``g * weight^T``, one broadcast
    multiplication instead of bmm's slow path, with the same values."""
    if weight.shape[2] == 1:
        return torch.mul(grad_output, weight.transpose(1, 2))
    return torch.bmm(grad_output, weight.transpose(1, 2))
