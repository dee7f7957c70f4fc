"""Backward passes of Linear layers and activations in torch, written out, for the
closed-form gradients of :mod:`rlplat.accel`.

For the small networks of RL, autograd's bookkeeping (a graph node per operation, the engine
walking it) costs more than the arithmetic. A loss whose derivative is known in closed form
can skip it: its networks run forward keeping each layer's output, then these functions
apply the chain rule from the last layer to the first. The arithmetic is the one autograd's
backward kernels do, so the gradients agree with autograd's to float rounding.

A layer is a ``(weight, bias)`` pair of parameters (``[out, in]``, ``[out]``), taken from the
module once when the accelerated update is built: the parameter objects stay the same for a
module's life (``.to()``, loading a state and the flat buffers of :mod:`rlplat.accel.flat`
change their data in place).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

Layer = tuple[Tensor, Tensor]
"""A Linear layer's ``(weight [out, in], bias [out])`` parameters."""

# d activation(x) / dx applied to a gradient, from the activation's output y alone: the ATen
# kernels autograd's backward of tanh and ReLU runs (torch.ops.aten, the operator namespace
# of torch's documented Core ATen IR; torch.nn.functional has no name for these). One
# operation each instead of three.
OUTPUT_BACKWARD: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "tanh": lambda grad, y: torch.ops.aten.tanh_backward(grad, y),  # grad * (1 - y^2)
    "relu": lambda grad, y: torch.ops.aten.threshold_backward(grad, y, 0),  # grad * (y > 0)
}


def layer_of(linear: nn.Linear) -> Layer:
    """``(linear.weight, linear.bias)``.

    Raises:
        ValueError: for a layer without a bias (the closed-form passes assume one).
    """
    if linear.bias is None:
        raise ValueError(f"{linear}: the closed-form passes need a weight and a bias")
    return linear.weight, linear.bias


def tanh_(x: Tensor) -> Tensor:
    """tanh in place on a tensor outside autograd; on the CPU through numpy's ``tanh``.

    torch 2.13's CPU tanh is slow on the machines measured here: 8.8 us for a ``[64, 64]``
    float32 tensor (sigmoid takes 1.7 us) against 0.9 us for numpy's (2.2 us with the
    wrapping), at the same accuracy (within one float32 ulp of the float64 value, as torch's
    is). It was the largest single operation of a 64-unit MLP's update.

    Args:
        x: A float tensor (torch's own tanh for other dtypes and devices, and under
            ``torch.compile``, whose generated code has a fast tanh of its own).

    Returns:
        ``x``, holding tanh of its old values.
    """
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and not torch.compiler.is_compiling():
        array = x.numpy()
        np.tanh(array, out=array)
        return x
    return x.tanh_()


# in-place activations for forward passes outside autograd
IN_PLACE: dict[str, Callable[[Tensor], Tensor]] = {"tanh": tanh_, "relu": torch.relu_}


def gradient_of(parameter: Tensor) -> Tensor:
    """``parameter.grad``, first set to zeros where it is None.

    The zeros are an ordinary tensor even under ``torch.inference_mode`` (where closed-form
    gradients run): a tensor created there may not be changed in place outside it, as an
    optimizer's gradient clip does.
    """
    if parameter.grad is None:
        with torch.inference_mode(False):
            parameter.grad = torch.zeros_like(parameter)
    return parameter.grad


def write_grad(parameter: Tensor, compute: Callable[..., Tensor], *args: Tensor | int) -> None:
    """Set ``parameter.grad`` to ``compute(*args)``, written into the existing ``.grad``
    (``out=``): a gradient that is a view of a flat buffer stays one.

    Args:
        parameter: The parameter whose gradient is set (replaced, not accumulated).
        compute: A torch function that takes ``out=`` (``torch.mm``, ``torch.sum``, ``torch.mv``).
        args: Its positional arguments (tensors, a dim); the result has the parameter's shape.
    """
    compute(*args, out=gradient_of(parameter))


THIN_INPUTS = 8
"""Input width up to which a layer's weight gradient on the CPU is computed transposed (see
:func:`linear_grads`)."""


def linear_grads(layer: Layer, inputs: Tensor, grad_output: Tensor) -> None:
    """Parameter gradients of ``y = x W^T + b``: sets ``W.grad = g^T x`` and ``b.grad = sum_n g``.

    torch's CPU product takes a slow path when its right operand is a contiguous matrix of
    a few columns, as ``x`` is for a first layer on a small observation: at 256 rows and 256
    outputs, ``g^T x`` with 3 inputs takes 80 us, ``(x^T g)^T`` and its copy into the
    gradient 18 us (one thread; up to 8 inputs it pays, at 16 they are even). So for at most
    :data:`THIN_INPUTS` inputs on the CPU the product runs transposed; the values are the same
    sums of the same products.

    Args:
        layer: The layer's ``(weight [out, in], bias [out])``.
        inputs: ``[N, in]`` float, the layer's input x in the forward pass.
        grad_output: ``[N, out]`` float, g = dL/dy.
    """
    weight, bias = layer
    if inputs.shape[1] <= THIN_INPUTS and inputs.device.type == "cpu":
        gradient_of(weight).copy_(torch.mm(inputs.t(), grad_output).t())
    else:
        write_grad(weight, torch.mm, grad_output.t(), inputs)
    write_grad(bias, torch.sum, grad_output, 0)


def linear_backward(layer: Layer, inputs: Tensor, grad_output: Tensor) -> Tensor:
    """Backward pass of ``y = x W^T + b``: :func:`linear_grads`, and dL/dx.

    Args:
        layer: The layer's ``(weight [out, in], bias [out])``.
        inputs: ``[N, in]`` float, the layer's input x in the forward pass.
        grad_output: ``[N, out]`` float, g = dL/dy.

    Returns:
        ``[N, in]`` dL/dx = g W.
    """
    linear_grads(layer, inputs, grad_output)
    return grad_output.mm(layer[0])
