"""Parameters and their gradients as numpy arrays, for the closed-form passes in numpy.

A torch operation costs a few microseconds of overhead on the CPUs rlplat is measured on, a
numpy operation on the same small arrays a third to a fifth of that. For the networks of
classic-control RL (two 64-unit layers, minibatches of 64, one env step's batch) that
overhead is nearly all of an update's time and of a policy's forward pass, so on the CPU
:mod:`rlplat.accel` computes them in numpy, on arrays that share memory with the
parameters and their gradients (``Tensor.numpy()``); torch's optimizer then steps the
parameters as usual. The arithmetic is that of the torch passes (:mod:`rlplat.accel.linear`);
values agree to float32 rounding (numpy's matrix products may sum in another order).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from rlplat.accel.linear import gradient_of, layer_of

# in-place activations of arrays
NUMPY_IN_PLACE: dict[str, Callable[[np.ndarray], object]] = {
    "tanh": lambda h: np.tanh(h, out=h),
    "relu": lambda h: np.maximum(h, 0.0, out=h),
}

# d activation(x) / dx applied to a gradient, from the activation's output y alone
NUMPY_OUTPUT_BACKWARD: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "tanh": lambda grad, y: grad * (1.0 - y * y),
    "relu": lambda grad, y: grad * (y > 0.0),
}


def on_cpu_float32(*tensors: Tensor) -> bool:
    """Whether every tensor is float32 on the CPU (what numpy can share memory with)."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


class ParameterArrays:
    """A float32 CPU parameter and its gradient as numpy arrays sharing their memory.

    The parameter's array is made once (its memory stays where it is: see
    :mod:`rlplat.accel.linear`); the gradient's is made again whenever ``.grad`` is another
    tensor than the one it was made from (set to None and recreated, or replaced).

    Args:
        parameter: A float32 parameter on the CPU.
    """

    def __init__(self, parameter: Tensor) -> None:
        self.parameter = parameter
        self.value = parameter.detach().numpy()
        self._grad: Tensor | None = None
        self._grad_array = self.value  # replaced before first use (grad() checks _grad)

    def grad(self) -> np.ndarray:
        """``parameter.grad`` (created as zeros if missing) as an array sharing its memory: a
        gradient written into it stays in place, e.g. in a flat buffer."""
        grad = gradient_of(self.parameter)
        if grad is not self._grad:
            self._grad, self._grad_array = grad, grad.numpy()
        return self._grad_array


class LinearArrays:
    """A Linear layer's parameters as arrays: ``x @ weight_t + bias`` is the layer.

    Args:
        linear: A Linear layer with a bias, float32 on the CPU.

    Attributes:
        weight: ``[out, in]`` array of the weight.
        weight_t: ``[in, out]``, its transposed view.
        bias: ``[out]`` array of the bias.
    """

    def __init__(self, linear: nn.Linear) -> None:
        weight, bias = layer_of(linear)
        self._weight, self._bias = ParameterArrays(weight), ParameterArrays(bias)
        self.weight, self.bias = self._weight.value, self._bias.value
        self.weight_t = self.weight.T

    def grads(self, inputs: np.ndarray, grad_output: np.ndarray) -> None:
        """Parameter gradients of the layer, as :func:`rlplat.accel.linear.linear_grads`:
        ``W.grad = g^T x``, ``b.grad = sum_n g`` (replaced), for ``[N, in]`` inputs and
        ``[N, out]`` g."""
        np.matmul(grad_output.T, inputs, out=self._weight.grad())
        grad_output.sum(0, out=self._bias.grad())

    def backward(self, inputs: np.ndarray, grad_output: np.ndarray) -> np.ndarray:
        """:meth:`grads`, and dL/dx = ``g W`` (``[N, in]``)."""
        self.grads(inputs, grad_output)
        return grad_output @ self.weight
