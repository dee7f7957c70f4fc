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
    write_grad(linear.weight, torch.mm, grad_output.t(), inputs)
    write_grad(linear.bias, torch.sum, grad_output, 0)


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
    return grad_output.mm(linear.weight)
