"""The numpy passes' arrays share memory with the parameters and follow their gradients."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlplat.accel.arrays import LinearArrays


def test_arrays_share_the_parameters_memory():
    torch.manual_seed(0)
    linear = nn.Linear(3, 4)
    arrays = LinearArrays(linear)
    with torch.no_grad():
        linear.weight.mul_(2.0)  # in place, as an optimizer step
    np.testing.assert_array_equal(arrays.weight, linear.weight.detach().numpy())
    np.testing.assert_array_equal(arrays.weight_t, linear.weight.detach().numpy().T)


def test_gradients_are_written_into_the_parameters_grad_whichever_tensor_it_is():
    torch.manual_seed(0)
    linear = nn.Linear(3, 4)
    arrays = LinearArrays(linear)
    x, g = np.random.rand(5, 3).astype(np.float32), np.random.rand(5, 4).astype(np.float32)
    grad_input = arrays.backward(x, g)
    np.testing.assert_allclose(linear.weight.grad.numpy(), g.T @ x, rtol=1e-6)
    np.testing.assert_allclose(linear.bias.grad.numpy(), g.sum(0), rtol=1e-6)
    np.testing.assert_allclose(grad_input, g @ linear.weight.detach().numpy(), rtol=1e-6)
    linear.weight.grad = None  # set to None (zero_grad): the next pass creates and writes a new one
    arrays.grads(x, g)
    np.testing.assert_allclose(linear.weight.grad.numpy(), g.T @ x, rtol=1e-6)
    replaced = torch.zeros(4, 3)
    linear.weight.grad = replaced  # replaced: written into the new tensor
    arrays.grads(x, g)
    assert linear.weight.grad is replaced and float(replaced.abs().sum()) > 0
