"""PPO loss against a hand-computed two-sample case, and its preprocess against GAE."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.functional import generalized_advantage_estimate
from rlplat.losses.ppo import PPOLoss
from rlplat.registry import ConfigError

BOX = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def make_loss(**kwargs) -> PPOLoss:
    """Identity torso of width 1; mean = obs, log std = 0, V = 2 * obs."""
    loss = PPOLoss(BOX, BOX, lambda out: nn.Flatten(), features=1, **kwargs)
    with torch.no_grad():
        loss.agent.head.mean.weight.fill_(1.0)
        loss.agent.head.mean.bias.zero_()
        loss.agent.value_head.weight.fill_(2.0)
        loss.agent.value_head.bias.zero_()
    return loss


def batch() -> TensorDict:
    return TensorDict(
        {
            keys.OBSERVATION: torch.tensor([[0.5], [-1.0]]),
            keys.ACTION: torch.tensor([[1.0], [-0.5]]),
            keys.ACTION_LOG_PROB: torch.tensor([-1.0, -1.2]),
            keys.ADVANTAGE: torch.tensor([[1.0], [-2.0]]),
            keys.VALUE_TARGET: torch.tensor([[1.5], [-1.0]]),
            keys.STATE_VALUE: torch.tensor([[0.5], [-1.5]]),
        },
        batch_size=[2],
    )


def test_ppo_loss_hand_computed():
    loss = make_loss(clip_epsilon=0.1, value_clip=0.2, normalize_advantage=False, entropy_coef=0.01, value_coef=0.5)
    out = loss(batch())
    # new log-probs: both actions are 0.5 from their means under N(mean, 1)
    new_log_prob = -0.5 * 0.25 - HALF_LOG_2PI
    r0, r1 = math.exp(new_log_prob + 1.0), math.exp(new_log_prob + 1.2)
    s0 = min(r0 * 1.0, min(max(r0, 0.9), 1.1) * 1.0)
    s1 = min(r1 * -2.0, min(max(r1, 0.9), 1.1) * -2.0)  # r1 = 1.169 is clipped to 1.1
    assert out["loss_objective"].item() == pytest.approx(-(s0 + s1) / 2, rel=1e-5)
    # V = [1.0, -2.0]; old V = [0.5, -1.5]; clipped V = [0.7, -1.7]; targets [1.5, -1.0]
    v_loss = 0.5 * (max(0.25, 0.64) + max(1.0, 0.49)) / 2
    assert out["loss_critic"].item() == pytest.approx(0.5 * v_loss, rel=1e-5)
    assert out["loss_entropy"].item() == pytest.approx(-0.01 * (0.5 + HALF_LOG_2PI), rel=1e-5)
    assert out["clip_fraction"].item() == pytest.approx(0.5)
    log_ratios = [new_log_prob + 1.0, new_log_prob + 1.2]
    approx_kl = sum(math.exp(x) - 1 - x for x in log_ratios) / 2
    assert out["approx_kl"].item() == pytest.approx(approx_kl, rel=1e-5)


def test_ppo_loss_normalizes_advantages_per_minibatch():
    loss = make_loss(clip_epsilon=10.0, normalize_advantage=True)
    out = loss(batch())
    # with a huge clip range the objective is -mean(ratio * normalised advantage)
    new_log_prob = -0.5 * 0.25 - HALF_LOG_2PI
    r0, r1 = math.exp(new_log_prob + 1.0), math.exp(new_log_prob + 1.2)
    a = 1.0 / math.sqrt(2.0)  # [1, -2] -> [0.707, -0.707] with the unbiased std
    assert out["loss_objective"].item() == pytest.approx(-(r0 * a - r1 * a) / 2, rel=1e-4)


def test_ppo_loss_terms_carry_gradients_and_diagnostics_do_not():
    out = make_loss()(batch())
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    assert all(out[k].requires_grad for k in ("loss_objective", "loss_critic"))
    assert not any(out[k].requires_grad for k in ("entropy", "approx_kl", "clip_fraction", "ratio"))


def test_an_entropy_term_of_weight_zero_is_a_constant_and_the_entropy_still_a_diagnostic():
    entropy = 0.5 + HALF_LOG_2PI  # of N(mean, 1) in one action dim
    for coef in (0.0, 0.01):
        loss = make_loss(entropy_coef=coef, value_clip=None)
        out = loss(batch())
        assert out["entropy"].item() == pytest.approx(entropy, rel=1e-6) and not out["entropy"].requires_grad
        assert out["loss_entropy"].item() == pytest.approx(-coef * entropy, rel=1e-6)
        assert out["loss_entropy"].requires_grad == (coef != 0)  # weight 0: no backward through the entropy
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
        assert loss.agent.head.log_std.grad is not None  # the objective's gradient reaches it either way
    # without value clipping the critic term is 0.5 * c_v * mean((V - V_target)^2): V = [1, -2], targets [1.5, -1]
    assert out["loss_critic"].item() == pytest.approx(0.5 * 0.5 * (0.25 + 1.0) / 2, rel=1e-6)


def test_preprocess_uses_values_of_true_next_observations():
    loss = make_loss(gamma=0.9, gae_lambda=0.7)
    T, B = 4, 3
    g = torch.Generator().manual_seed(0)
    rollout = TensorDict(
        {
            keys.OBSERVATION: torch.randn(T, B, 1, generator=g),
            keys.NEXT: {
                keys.OBSERVATION: torch.randn(T, B, 1, generator=g),
                keys.REWARD: torch.randn(T, B, 1, generator=g),
                keys.TERMINATED: torch.tensor([0, 1, 0, 0]).bool().view(T, 1, 1).expand(T, B, 1).clone(),
                keys.DONE: torch.tensor([1, 1, 0, 0]).bool().view(T, 1, 1).expand(T, B, 1).clone(),
            },
        },
        batch_size=[T, B],
    )
    out = loss.preprocess(rollout)
    value = 2.0 * rollout[keys.OBSERVATION]
    next_value = 2.0 * rollout[keys.NEXT_OBSERVATION]
    advantage, target = generalized_advantage_estimate(
        rollout[keys.NEXT_REWARD], value, next_value, rollout[keys.NEXT_DONE], rollout[keys.NEXT_TERMINATED], 0.9, 0.7
    )
    torch.testing.assert_close(out[keys.STATE_VALUE], value)
    torch.testing.assert_close(out[keys.ADVANTAGE], advantage)
    torch.testing.assert_close(out[keys.VALUE_TARGET], target)


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"gamma": 1.5}, "loss.gamma"),
        ({"clip_epsilon": 0.0}, "loss.clip_epsilon"),
        ({"value_clip": -1.0}, "loss.value_clip"),
    ],
)
def test_ppo_loss_rejects_bad_coefficients(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        make_loss(**kwargs)
