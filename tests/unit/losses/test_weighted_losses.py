"""Value-based losses with a prioritized replay's importance weights: the weighted mean of the
per-sample losses, unchanged without weights, and the per-sample TD errors they return."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlplat import keys
from rlplat.testing._common import subject
from rlplat.testing.losses import DEFAULT_NETWORK, _build, _minibatch, _rollout

OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = gymnasium.spaces.Discrete(3)
N = 16

CASES = [
    # name, kwargs, action space, per-sample loss from |delta| (None: bounds only, twin critics)
    pytest.param("dqn", {}, DISCRETE, lambda d: F.smooth_l1_loss(d, torch.zeros_like(d), reduction="none"), id="dqn"),
    pytest.param(
        "dqn", {"n_step": 3}, DISCRETE, lambda d: F.smooth_l1_loss(d, torch.zeros_like(d), reduction="none"), id="dqn3"
    ),
    pytest.param("ddpg", {}, BOX, lambda d: d**2, id="ddpg"),
    pytest.param("td3", {}, BOX, None, id="td3"),
    pytest.param("sac", {}, BOX, None, id="sac"),
]


def outputs(loss, batch, weight=None):
    """The loss output (same random draws each call) for ``batch`` with ``weight`` ([N])."""
    if weight is not None:
        batch = batch.clone()
        L = batch.batch_size[1] if batch.batch_dims == 2 else None
        batch[keys.IMPORTANCE_WEIGHT] = weight if L is None else weight.unsqueeze(1).expand(-1, L)
    torch.manual_seed(0)
    return loss(batch)


@pytest.mark.parametrize("name,kwargs,space,per_sample", CASES)
def test_weighted_loss_is_the_weighted_mean_of_the_per_sample_losses(name, kwargs, space, per_sample):
    torch.manual_seed(0)
    loss = _build(subject("loss", name), kwargs, OBS, space, DEFAULT_NETWORK)
    processed = loss.preprocess(_rollout(loss, OBS, (8, 4), seed=0))
    batch = _minibatch(processed, N, loss.sequence_length, torch.Generator().manual_seed(0))
    plain = outputs(loss, batch)
    td_error = plain[keys.TD_ERROR]
    assert td_error.shape == (N,) and td_error.dtype == torch.float32 and not td_error.requires_grad
    assert bool((td_error >= 0).all())
    ones = outputs(loss, batch, torch.ones(N))
    torch.testing.assert_close(ones["loss_qvalue"], plain["loss_qvalue"], rtol=1e-6, atol=0)
    torch.testing.assert_close(ones[keys.TD_ERROR], td_error, rtol=0, atol=0)
    # linear in the weights: L(w) = sum_j w_j L(e_j), and L(N e_j) is sample j's own loss
    own = torch.stack([outputs(loss, batch, N * torch.eye(N)[j])["loss_qvalue"].detach() for j in range(N)])
    weight = torch.rand(N, generator=torch.Generator().manual_seed(1))
    weighted = outputs(loss, batch, weight)["loss_qvalue"]
    torch.testing.assert_close(weighted.detach(), (weight * own).sum() / N, rtol=1e-5, atol=1e-7)
    if per_sample is not None:
        torch.testing.assert_close(own, per_sample(td_error), rtol=1e-5, atol=1e-7)
    else:  # K = 2 critics: 0.5 * sum_k (Q_k - y)^2 (SAC) or sum_k (TD3), td_error the largest |Q_k - y|
        scale = 0.5 if name == "sac" else 1.0
        assert bool(
            (own >= scale * td_error**2 * (1 - 1e-5)).all() and (own <= 2 * scale * td_error**2 * (1 + 1e-5)).all()
        )
