"""Numbers: the exact KL formulas of functional/ and of the policy heads against
torch.distributions, and a hand-computed case each."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical, Independent, Normal, kl_divergence

from rlplat.functional import categorical_kl, normal_kl
from rlplat.networks.heads import CategoricalHead, GaussianHead, MultiCategoricalHead


def test_categorical_kl_matches_torch_distributions():
    g = torch.Generator().manual_seed(0)
    logits_p, logits_q = torch.randn(7, 5, generator=g) * 3, torch.randn(7, 5, generator=g) * 3
    expected = kl_divergence(Categorical(logits=logits_p), Categorical(logits=logits_q))
    torch.testing.assert_close(categorical_kl(logits_p, logits_q), expected)


def test_categorical_kl_by_hand_and_zero_for_equal_distributions():
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    by_hand = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert categorical_kl(p.log(), q.log()).item() == pytest.approx(by_hand, rel=1e-6)
    logits = torch.randn(3, 4)
    assert torch.allclose(categorical_kl(logits, logits + 2.0), torch.zeros(3), atol=1e-6)  # logits shift alike


@pytest.mark.parametrize("log_std_shape", [(3,), (6, 3)], ids=["state-independent std", "per-state std"])
def test_normal_kl_matches_torch_distributions(log_std_shape):
    g = torch.Generator().manual_seed(1)
    mean_p, mean_q = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    log_std_p, log_std_q = torch.randn(*log_std_shape, generator=g), torch.randn(*log_std_shape, generator=g)
    p = Independent(Normal(mean_p, log_std_p.exp().expand(6, 3)), 1)
    q = Independent(Normal(mean_q, log_std_q.exp().expand(6, 3)), 1)
    torch.testing.assert_close(normal_kl(mean_p, log_std_p, mean_q, log_std_q), kl_divergence(p, q))


def test_normal_kl_by_hand():
    # N(1, 1) against N(0, 2^2): log 2 + (1 + 1) / 8 - 1/2
    kl = normal_kl(torch.tensor([[1.0]]), torch.tensor([0.0]), torch.tensor([[0.0]]), torch.tensor([math.log(2.0)]))
    assert kl.item() == pytest.approx(math.log(2.0) + 2.0 / 8.0 - 0.5, rel=1e-6)


def test_the_kl_is_not_symmetric_and_the_heads_compute_kl_of_pi_to_the_reference():
    """KL(pi || pi_ref), the policy first: the heads' direction, as kl_to_reference documents it."""
    torch.manual_seed(0)
    head, reference = CategoricalHead(4, 3), CategoricalHead(4, 3)
    with torch.no_grad():
        reference.logits.weight.mul_(300.0)  # a near-deterministic reference
    features = torch.randn(5, 4)
    logits = head.logits(features)
    reference_logits = reference.logits(features)
    forward = kl_divergence(Categorical(logits=logits), Categorical(logits=reference_logits))
    backward = kl_divergence(Categorical(logits=reference_logits), Categorical(logits=logits))
    got = head.kl_divergence(features, reference, features)
    torch.testing.assert_close(got, forward)
    assert not torch.allclose(got, backward, rtol=0.1)


def test_gaussian_head_kl_matches_torch_distributions_and_reaches_its_parameters():
    torch.manual_seed(0)
    head, reference = GaussianHead(4, 2, log_std_init=-0.5), GaussianHead(6, 2, log_std_init=0.3)
    features, reference_features = torch.randn(5, 4), torch.randn(5, 6)
    got = head.kl_divergence(features, reference, reference_features)
    p = Independent(Normal(head.mean(features), head.log_std.exp().expand(5, 2)), 1)
    q = Independent(Normal(reference.mean(reference_features), reference.log_std.exp().expand(5, 2)), 1)
    torch.testing.assert_close(got, kl_divergence(p, q))
    got.sum().backward()
    assert head.log_std.grad is not None and head.mean.weight.grad is not None


def test_multi_categorical_head_kl_is_the_sum_over_independent_dims():
    torch.manual_seed(0)
    head, reference = MultiCategoricalHead(4, [3, 2, 4]), MultiCategoricalHead(4, [3, 2, 4])
    with torch.no_grad():
        reference.logits.weight.normal_()
    features = torch.randn(6, 4)
    pairs = zip(head.logits(features).split([3, 2, 4], -1), reference.logits(features).split([3, 2, 4], -1))
    expected = sum(kl_divergence(Categorical(logits=p), Categorical(logits=q)) for p, q in pairs)
    torch.testing.assert_close(head.kl_divergence(features, reference, features), expected)


@pytest.mark.parametrize(
    "head,reference",
    [
        (CategoricalHead(4, 3), CategoricalHead(4, 2)),
        (CategoricalHead(4, 3), GaussianHead(4, 3)),
        (MultiCategoricalHead(4, [3, 2]), MultiCategoricalHead(4, [2, 3])),
    ],
    ids=["other action count", "other kind", "other nvec"],
)
def test_heads_over_other_actions_have_no_kl(head, reference):
    with pytest.raises(TypeError, match="same kind over the same actions"):
        head.kl_divergence(torch.randn(2, 4), reference, torch.randn(2, 4))
