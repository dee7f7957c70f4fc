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


def gradient_of(parameter: Tensor) -> Tensor:
    """``parameter.grad``, first set to zeros where it is None.

    The zeros are an ordinary tensor even under ``torch.inference_mode`` (where closed-form
    gradients run, see :meth:`rlplat.losses.sac.SACLoss.gradients`): a tensor created there
    may not be changed in place outside it, as an optimizer's gradient clip does.
    """
    if parameter.grad is None:
        with torch.inference_mode(False):
            parameter.grad = torch.zeros_like(parameter)
    return parameter.grad


def write_grad(parameter: Tensor, compute: Callable[..., Tensor], *args: Tensor | int) -> None:
    """Set ``parameter.grad`` to ``compute(*args)``, written into the existing ``.grad`` (``out=``):
    a gradient that is a view of an optimizer's flat buffer stays one.

    Args:
        parameter: The parameter whose gradient is set (replaced, not accumulated).
        compute: A torch function that takes ``out=`` (``torch.mm``, ``torch.sum``, ``torch.mv``).
        args: Its positional arguments (tensors, a dim); the result has the parameter's shape.
    """
    compute(*args, out=gradient_of(parameter))


THIN_INPUTS = 8
"""Input width up to which a layer's weight gradient on the CPU is computed transposed (see
:func:`linear_grads`)."""


def linear_grads(linear: nn.Linear, inputs: Tensor, grad_output: Tensor) -> None:
    """Parameter gradients of ``y = x W^T + b``: sets ``W.grad = g^T x`` and ``b.grad = sum_n g``.

    torch's CPU product takes a slow path when its right operand is a contiguous matrix of
    a few columns, as ``x`` is for a first layer on a small observation: at 256 rows and 256
    outputs, ``g^T x`` with 3 inputs takes 80 us, ``(x^T g)^T`` and its copy into the
    gradient 18 us (one thread; up to 8 inputs it pays, at 16 they are even). So for at most
    :data:`THIN_INPUTS` inputs on the CPU the product runs transposed; the values are the same
    sums of the same products.

    Args:
        linear: The layer (weight ``[out, in]``, bias ``[out]``).
        inputs: ``[N, in]`` float, the layer's input x in the forward pass.
        grad_output: ``[N, out]`` float, g = dL/dy.
    """
    weight, bias = weight_and_bias(linear)
    if inputs.shape[1] <= THIN_INPUTS and inputs.device.type == "cpu":
        gradient_of(weight).copy_(torch.mm(inputs.t(), grad_output).t())
    else:
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


def per_member(rows: int, weight: Tensor) -> bool:
    """Whether the forward product of a stacked layer (K networks of one shape) with
    ``weight`` ``[K, in, out]`` over ``rows`` rows runs network by network instead of as one
    batched product.

    torch's CPU ``bmm`` takes a slow path when the product has a single output column (a
    critic's value head): at 256 rows of 256 inputs, two networks, 141 us against 21 us for
    two ``mm`` (one thread). For every other layer shape measured (widths 32 to 256, 64 or
    256 rows) one batched product costs the same as K products or less, fewer calls. The
    gradients of such a layer avoid that path without a loop (:func:`stacked_linear_grads`,
    :func:`stacked_input_grad`).
    """
    return weight.shape[2] == 1 and rows * weight.shape[1] >= 8192


def stacked_addmm(bias: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """``inputs @ weight + bias`` for K stacked networks at once, without autograd: one batched
    product (``torch.baddbmm``), or K products into the rows of one output where that is
    faster (:func:`per_member`).

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
    ``bias.grad = sum_n g`` for each of the K networks (replaced, written in place).

    Args:
        weight: ``[K, in, out]`` parameter.
        bias: ``[K, 1, out]`` parameter.
        inputs: ``[K, N, in]`` or shared ``[N, in]``, the layer's input in the forward pass.
        grad_output: ``[K, N, out]``, dL/d(output).
    """
    k, width = weight.shape[0], weight.shape[1]
    weight_grad, bias_grad = gradient_of(weight), gradient_of(bias)
    inputs = inputs.expand(k, *inputs.shape[-2:])
    if weight.shape[2] == 1:  # a value head: g^T x as [K, 1, in] rows, bmm's fast path (per_member)
        torch.bmm(grad_output.transpose(1, 2), inputs, out=weight_grad.view(k, 1, width))
    else:
        torch.bmm(inputs.transpose(1, 2), grad_output, out=weight_grad)
    torch.sum(grad_output, 1, keepdim=True, out=bias_grad)


def stacked_input_grad(weight: Tensor, grad_output: Tensor) -> Tensor:
    """dL/d(input) of :func:`stacked_addmm`: ``g @ weight^T``, ``[K, N, out] -> [K, N, in]``; for a
    single output column (a value head) the outer product ``g * weight^T``, one broadcast
    multiplication instead of bmm's slow path (:func:`per_member`), with the same values."""
    if weight.shape[2] == 1:
        return torch.mul(grad_output, weight.transpose(1, 2))
    return torch.bmm(grad_output, weight.transpose(1, 2))
