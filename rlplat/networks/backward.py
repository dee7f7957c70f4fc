"""Backward passes of Linear layers and activations, written out: closed-form gradients for
losses that compute their own (:meth:`rlplat.losses.ppo.PPOLoss.gradients`).

For the small networks of RL, autograd's bookkeeping (a graph node per operation, the engine
walking it) costs more than the arithmetic. A loss whose derivative is known in closed form
can skip it: it runs the forward pass keeping each layer's input, then applies these
functions from the last layer to the first. The arithmetic is the one autograd's backward
kernels do, so the gradients agree with autograd's to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

# d activation(x) / dx applied to a gradient, from the activation's output y alone: the ATen
# kernels autograd's backward of tanh and ReLU runs (torch.ops.aten is ATen's public operator
# namespace; torch.nn.functional has no name for these). One operation each instead of three.
OUTPUT_BACKWARD: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "tanh": lambda grad, y: torch.ops.aten.tanh_backward(grad, y),  # grad * (1 - y^2)
    "relu": lambda grad, y: torch.ops.aten.threshold_backward(grad, y, 0),  # grad * (y > 0)
}


def weight_and_bias(linear: nn.Linear) -> tuple[Tensor, Tensor]:
    """``(linear.weight, linear.bias)``, read from the layer's parameter dict.

    ``nn.Module`` resolves a parameter attribute in Python, ~0.4 us a name on the machines
    measured here; a closed-form update of two 64-unit MLPs reads ~40 of them, ~5% of its
    time. ``_parameters`` is the dict that lookup reads (``nn.Module`` has no public accessor
    this cheap), so these are the registered parameters, whatever replaced them.

    Raises:
        ValueError: for a layer without a bias (the closed-form passes assume one).
    """
    parameters = linear._parameters
    weight, bias = parameters["weight"], parameters["bias"]
    if weight is None or bias is None:
        raise ValueError(f"{linear}: the closed-form passes need a weight and a bias")
    return weight, bias


def write_grad(parameter: Tensor, compute: Callable[..., Tensor], *args: Tensor | int) -> None:
    """Set ``parameter.grad`` to ``compute(*args)``, written into the existing ``.grad`` (``out=``):
    a gradient that is a view of an optimizer's flat buffer stays one.

    Args:
        parameter: The parameter whose gradient is set (replaced, not accumulated).
        compute: A torch function that takes ``out=`` (``torch.mm``, ``torch.sum``, ``torch.mv``).
        args: Its positional arguments (tensors, a dim); the result has the parameter's shape.
    """
    if parameter.grad is None:
        parameter.grad = torch.zeros_like(parameter)
    compute(*args, out=parameter.grad)


def linear_grads(linear: nn.Linear, inputs: Tensor, grad_output: Tensor) -> None:
    """Parameter gradients of ``y = x W^T + b``: sets ``W.grad = g^T x`` and ``b.grad = sum_n g``.

    Args:
        linear: The layer (weight ``[out, in]``, bias ``[out]``).
        inputs: ``[N, in]`` float, the layer's input x in the forward pass.
        grad_output: ``[N, out]`` float, g = dL/dy.
    """
    weight, bias = weight_and_bias(linear)
    write_grad(weight, torch.mm, grad_output.t(), inputs)
    write_grad(bias, torch.sum, grad_output, 0)


def linear_backward(linear: nn.Linear, inputs: Tensor, grad_output: Tensor) -> Tensor:
    """Backward pass of ``y = x W^T + b``: :func:`linear_grads`, and dL/dx.

    Args:
        linear: The layer (weight ``[out, in]``, bias ``[out]``).
        inputs: ``[N, in]`` float, the layer's input x in the forward pass.
        grad_output: ``[N, out]`` float, g = dL/dy.

    Returns:
        ``[N, in]`` dL/dx = g W.
    """
    linear_grads(linear, inputs, grad_output)
    return grad_output.mm(weight_and_bias(linear)[0])
