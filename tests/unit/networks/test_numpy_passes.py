"""The numpy passes' views of parameters and gradients follow the tensors' memory."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlplat.networks.numpy_passes import linear_arrays, linear_grad_arrays, numpy_linear_backward


def test_views_share_memory_and_follow_a_move_of_the_parameters():
    torch.manual_seed(0)
    linear = nn.Linear(3, 4)
    arrays = linear_arrays(linear)
    assert arrays is not None and linear_arrays(linear).weight is arrays.weight  # kept while the memory stays
    with torch.no_grad():
        linear.weight.mul_(2.0)  # in place, as an optimizer step
    np.testing.assert_array_equal(arrays.weight, linear.weight.detach().numpy())
    linear.weight.data = torch.randn(4, 3)  # moved, as an optimizer's flat buffer moves it
    moved = linear_arrays(linear)
    assert moved.weight is not arrays.weight and np.shares_memory(moved.weight, linear.weight.detach().numpy())
    assert linear_arrays(linear.double()) is None  # not float32: torch's passes apply


def test_gradients_are_written_into_the_parameters_grad():
    torch.manual_seed(0)
    linear = nn.Linear(3, 4)
    x, g = np.random.rand(5, 3).astype(np.float32), np.random.rand(5, 4).astype(np.float32)
    grad_input = numpy_linear_backward(linear, x, g)
    np.testing.assert_allclose(linear.weight.grad.numpy(), g.T @ x, rtol=1e-6)
    np.testing.assert_allclose(linear.bias.grad.numpy(), g.sum(0), rtol=1e-6)
    np.testing.assert_allclose(grad_input, g @ linear.weight.detach().numpy(), rtol=1e-6)
    linear.weight.grad = torch.zeros(4, 3)  # a new gradient tensor: the views follow it
    linear_grad_arrays(linear)[0][...] = 1.0
    assert float(linear.weight.grad.sum()) == 12.0
