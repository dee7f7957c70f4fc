"""Numbers: the written-out Linear backward and tanh of rlplat.accel against torch's own."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlplat.accel.linear import layer_of, linear_backward, tanh_


def test_linear_backward_equals_autograds_gradients():
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(5, 3)
    inputs, grad_output = torch.randn(8, 5, generator=g, requires_grad=True), torch.randn(8, 3, generator=g)
    linear(inputs).backward(grad_output)
    expected = (linear.weight.grad.clone(), linear.bias.grad.clone(), inputs.grad.clone())
    linear.weight.grad, linear.bias.grad = torch.full((3, 5), 7.0), None  # replaced, not accumulated
    with torch.no_grad():
        grad_inputs = linear_backward(layer_of(linear), inputs.detach(), grad_output)
    for got, want in zip((linear.weight.grad, linear.bias.grad, grad_inputs), expected):
        torch.testing.assert_close(got, want)


def test_a_layer_without_bias_says_so():
    with pytest.raises(ValueError, match="need a weight and a bias"):
        layer_of(nn.Linear(4, 2, bias=False))


def test_numpy_tanh_matches_torch_to_one_ulp():
    x = torch.linspace(-6.0, 6.0, 4097)
    expected = torch.tanh(x.double())
    assert torch.allclose(tanh_(x.clone()).double(), expected, rtol=0, atol=2 * torch.finfo(torch.float32).eps)
