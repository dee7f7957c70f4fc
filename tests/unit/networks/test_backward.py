"""Numbers: the written-out Linear backward against autograd, and the parameters it reads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlplat.networks.backward import linear_backward, weight_and_bias


def test_linear_backward_equals_autograds_gradients():
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(5, 3)
    inputs, grad_output = torch.randn(8, 5, generator=g, requires_grad=True), torch.randn(8, 3, generator=g)
    linear(inputs).backward(grad_output)
    expected = (linear.weight.grad.clone(), linear.bias.grad.clone(), inputs.grad.clone())
    linear.weight.grad, linear.bias.grad = torch.full((3, 5), 7.0), None  # replaced, not accumulated
    with torch.no_grad():
        grad_inputs = linear_backward(linear, inputs.detach(), grad_output)
    for got, want in zip((linear.weight.grad, linear.bias.grad, grad_inputs), expected):
        torch.testing.assert_close(got, want)


def test_weight_and_bias_are_the_registered_parameters_even_after_a_replacement():
    linear = nn.Linear(4, 2)
    weight, bias = weight_and_bias(linear)
    assert weight is linear.weight and bias is linear.bias
    linear.load_state_dict({"weight": torch.ones(2, 4), "bias": torch.zeros(2)}, assign=True)  # new Parameters
    weight, bias = weight_and_bias(linear)
    assert weight is linear.weight and bias is linear.bias and bool((weight == 1).all())


def test_weight_and_bias_of_a_layer_without_bias_says_so():
    with pytest.raises(ValueError, match="need a weight and a bias"):
        weight_and_bias(nn.Linear(4, 2, bias=False))
