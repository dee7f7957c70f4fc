"""The closed-form passes in numpy, for small networks on the CPU.

A torch operation costs a few microseconds of overhead on the CPUs rlplat is measured on, a
numpy operation on the same small arrays a third to a fifth of that. For the networks of
classic-control RL (two 64-unit layers, minibatches of 64, one env step's batch) that
overhead is nearly all of an update's time and of a policy's forward pass, so on the CPU
rlplat computes them in numpy, on arrays that share memory with the parameters and their
gradients; torch's optimizer then steps the parameters as usual. The arithmetic is that of
the torch passes (:mod:`rlplat.networks.backward`); values agree to float32 rounding (numpy's
matrix products may sum in another order).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import NamedTuple, cast

import numpy as np
import torch
from torch import Tensor, nn

from rlplat.networks.backward import gradient_of, weight_and_bias

# in-place activations of arrays outside autograd
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


# views cost about a microsecond each to make, a looked-up one a fifth of that: made once per
# tensor and kept while its memory stays where it was (an optimizer's flat buffers move it
# once, as ``.to()`` does; a view keeps the memory it shares alive, so an address seen again
# is the same memory). Keyed by the id of the parameter, which a weak reference confirms (a
# tensor cannot be a dict key: its ``==`` is elementwise).
_VIEWS: dict[int, tuple[weakref.ref[Tensor], int, np.ndarray]] = {}
_GRAD_VIEWS: dict[int, tuple[weakref.ref[Tensor], int, np.ndarray]] = {}


_Cache = dict[int, tuple[weakref.ref[Tensor], int, np.ndarray]]


def _cached(cache: _Cache, owner: Tensor, tensor: Tensor) -> np.ndarray:
    key, address = id(owner), tensor.data_ptr()
    entry = cache.get(key)
    if entry is not None and entry[0]() is owner and entry[1] == address:
        return entry[2]
    array = tensor.detach().numpy()

    def forget(_: weakref.ref[Tensor]) -> None:  # the owner is gone: so is its entry (and the memory it held)
        cache.pop(key, None)

    cache[key] = (weakref.ref(owner, forget), address, array)
    return array


def parameter_array(parameter: Tensor) -> np.ndarray:
    """A float32 CPU parameter as a numpy array sharing its memory (a cached view)."""
    return _cached(_VIEWS, parameter, parameter)


def grad_array(parameter: Tensor) -> np.ndarray:
    """``parameter.grad`` (created as zeros if missing) as a numpy array sharing its memory (a
    cached view): a gradient written into it stays in place, e.g. in an optimizer's flat buffer."""
    return _cached(_GRAD_VIEWS, parameter, gradient_of(parameter))


class LinearArrays(NamedTuple):
    """A Linear layer's parameters as numpy arrays sharing their memory."""

    weight: np.ndarray  # [out, in]
    weight_t: np.ndarray  # [in, out], the transposed view: x @ weight_t + bias is the layer
    bias: np.ndarray  # [out]


def linear_arrays(linear: nn.Linear) -> LinearArrays | None:
    """:class:`LinearArrays` of a layer; None unless its parameters are float32 on the CPU."""
    weight, bias = weight_and_bias(linear)
    if not on_cpu_float32(weight, bias):
        return None
    array = parameter_array(weight)
    return LinearArrays(array, array.T, parameter_array(bias))


def linear_grad_arrays(linear: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """The ``.grad`` of a layer's weight and bias as arrays (:func:`grad_array`)."""
    weight, bias = weight_and_bias(linear)
    return grad_array(weight), grad_array(bias)


def numpy_linear(linear: nn.Linear) -> tuple[np.ndarray, np.ndarray] | None:
    """``(W^T, b)`` of a Linear layer as numpy arrays sharing the parameters' memory (``[in,
    out]``, ``[out]``): ``x @ W^T + b`` is the layer. Valid until the parameters are replaced;
    None unless the parameters are float32 on the CPU."""
    arrays = linear_arrays(linear)
    return None if arrays is None else (arrays.weight_t, arrays.bias)


def numpy_linear_grads(linear: nn.Linear, inputs: np.ndarray, grad_output: np.ndarray) -> None:
    """:func:`rlplat.networks.backward.linear_grads` on arrays: ``W.grad = g^T x``,
    ``b.grad = sum_n g`` (replaced), for ``[N, in]`` inputs and ``[N, out]`` g."""
    weight_grad, bias_grad = linear_grad_arrays(linear)
    np.matmul(grad_output.T, inputs, out=weight_grad)
    grad_output.sum(0, out=bias_grad)


def numpy_linear_backward(linear: nn.Linear, inputs: np.ndarray, grad_output: np.ndarray) -> np.ndarray:
    """:func:`numpy_linear_grads`, and dL/dx = ``g W`` (``[N, in]``)."""
    numpy_linear_grads(linear, inputs, grad_output)
    return grad_output @ cast(LinearArrays, linear_arrays(linear)).weight
