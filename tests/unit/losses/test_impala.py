"""IMPALA (rlplat.losses.impala): the conformance kit; on-policy data reduces it to A2C with
GAE(gamma, 1) targets; a stale behaviour policy makes V-trace's clipping bind; bad values and a
recurrent core are refused naming the key."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from conftest import TINY, make_trainer
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.functional import vtrace
from rlplat.losses.a2c import A2CLoss
from rlplat.losses.impala import ImpalaLoss
from rlplat.registry import ConfigError
from rlplat.testing import check_loss
from rlplat.trainer import loss_total

BOX = gymnasium.spaces.Box(-10.0, 10.0, (3,), np.float32)
DISCRETE = gymnasium.spaces.Discrete(3)
T, B = 12, 4


def torso(out_features: int, space: gymnasium.Space = BOX) -> nn.Module:
    """A small MLP torso over a flat Box, as the network factory gives one."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(space.shape)), out_features), nn.Tanh())


def rollout(loss: ImpalaLoss, seed: int) -> TensorDict:
    """A ``[T, B]`` rollout acted by ``loss``'s current policy, with a termination and a
    truncation inside it; a truncated step's next observation is its own (not the next step's)."""
    g = torch.Generator().manual_seed(seed)
    observation = torch.randn(T + 1, B, 3, generator=g)
    next_observation = observation[1:].clone()
    terminated = torch.zeros(T, B, 1, dtype=torch.bool)
    truncated = torch.zeros(T, B, 1, dtype=torch.bool)
    terminated[4, 0], truncated[7, 1], terminated[2, 3], truncated[9, 3] = True, True, True, True
    next_observation[7, 1] = torch.randn(3, generator=g)
    next_observation[9, 3] = torch.randn(3, generator=g)
    with torch.no_grad():
        action, log_prob = loss.policy.act(observation[:T].flatten(0, 1))
    return TensorDict(
        {
            keys.OBSERVATION: observation[:T],
            keys.ACTION: action.view(T, B, *action.shape[1:]),
            keys.ACTION_LOG_PROB: log_prob.view(T, B),
            keys.NEXT: {
                keys.OBSERVATION: next_observation,
                keys.REWARD: torch.randn(T, B, 1, generator=g),
                keys.DONE: terminated | truncated,
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
            },
        },
        batch_size=[T, B],
    )


def own_log_prob(loss: ImpalaLoss, data: TensorDict) -> torch.Tensor:
    """``[T, B]`` log pi(a|s) of the rollout's actions under ``loss``'s current parameters."""
    with torch.no_grad():
        log_prob, _ = loss.agent.log_prob_entropy(data[keys.OBSERVATION].flatten(0, 1), data[keys.ACTION].flatten(0, 1))
    return log_prob.view(T, B)


@pytest.mark.parametrize("action_space", [DISCRETE, gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)])
def test_on_policy_impala_is_a2c_with_gae_lambda_1(action_space):
    """mu = pi: v-trace's targets and advantages are GAE(gamma, 1)'s, so each term equals A2C's
    (IMPALA weighs half the squared error: value_coef c is A2C's c / 2) and so do the gradients."""
    torch.manual_seed(0)
    impala = ImpalaLoss(BOX, action_space, torso, gamma=0.95, entropy_coef=0.01, value_coef=0.5, features=8)
    a2c = A2CLoss(BOX, action_space, torso, gamma=0.95, gae_lambda=1.0, entropy_coef=0.01, value_coef=0.25, features=8)
    a2c.load_state_dict(impala.state_dict())
    data = rollout(impala, seed=1)
    data[keys.ACTION_LOG_PROB] = own_log_prob(impala, data)  # exactly pi's
    ours, theirs = impala.preprocess(data.clone()), a2c.preprocess(data.clone())
    for key in (keys.STATE_VALUE, keys.VALUE_TARGET, keys.ADVANTAGE):
        torch.testing.assert_close(ours[key], theirs[key])
    out_ours, out_theirs = impala(ours.reshape(-1)), a2c(theirs.reshape(-1))
    for key in ("loss_objective", "loss_critic", "loss_entropy", "entropy", "explained_variance"):
        torch.testing.assert_close(out_ours[key], out_theirs[key])
    assert out_ours["rho_mean"].item() == 1.0 and out_ours["rho_clip_fraction"].item() == 0.0
    loss_total(out_ours).backward()
    loss_total(out_theirs).backward()
    for (name, p), q in zip(impala.named_parameters(), a2c.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_a_stale_behaviour_policy_is_corrected_with_clipped_importance_weights():
    """The rollout is acted by older parameters: preprocess is v-trace on pi's log-probs and
    values now, rho_bar = c_bar = 1 bind (the targets differ from unclipped importance
    sampling's), and the policy gradient's weights are at most 1."""
    torch.manual_seed(2)
    loss = ImpalaLoss(BOX, DISCRETE, torso, gamma=0.9, features=8)
    data = rollout(loss, seed=3)  # acted by mu, the parameters before the change below
    with torch.no_grad():
        for p in loss.agent.head.parameters():
            p.add_(torch.randn_like(p))  # pi: a policy some updates later
    processed = loss.preprocess(data.clone())
    pi = own_log_prob(loss, data)
    value, next_value = loss.state_values(data)
    flags = data[keys.NEXT_REWARD], value, next_value, data[keys.NEXT_DONE], data[keys.NEXT_TERMINATED]
    expected = vtrace(data[keys.ACTION_LOG_PROB], pi, *flags, 0.9)
    torch.testing.assert_close(processed[keys.VALUE_TARGET], expected[0])
    torch.testing.assert_close(processed[keys.ADVANTAGE], expected[1])
    unclipped = vtrace(data[keys.ACTION_LOG_PROB], pi, *flags, 0.9, 1e9, 1e9, 1e9)
    assert not torch.allclose(processed[keys.VALUE_TARGET], unclipped[0])
    ratio = (pi - data[keys.ACTION_LOG_PROB]).exp().unsqueeze(-1)
    assert (ratio > 1.01).any() and (ratio < 0.99).any()
    pg_unclipped = vtrace(data[keys.ACTION_LOG_PROB], pi, *flags, 0.9, 1.0, 1e9, 1.0)[1]  # weights pi / mu
    torch.testing.assert_close(processed[keys.ADVANTAGE] * ratio, pg_unclipped * ratio.clamp(max=1.0))

    out = loss(processed.reshape(-1))
    clipped = (ratio > 1.0).float().mean()
    torch.testing.assert_close(out["rho_clip_fraction"], clipped)
    torch.testing.assert_close(out["rho_mean"], ratio.clamp(max=1.0).mean())
    assert 0 < out["rho_clip_fraction"].item() < 1 and out["rho_mean"].item() < 1.0


def test_the_conformance_kit_passes():
    check_loss("impala", {"features": 16})


def test_it_declares_that_it_corrects_for_policy_lag_and_takes_no_recurrent_core():
    assert ImpalaLoss.corrects_policy_lag is True and ImpalaLoss.recurrent_cores is False
    assert A2CLoss.corrects_policy_lag is False  # the default of LossModule


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("clip_rho_threshold", 0.0, "loss.clip_rho_threshold=0.0: must be > 0"),
        ("clip_pg_rho_threshold", -1.0, "loss.clip_pg_rho_threshold=-1.0: must be > 0"),
        ("clip_c_threshold", 0.0, "loss.clip_c_threshold=0.0: must be > 0"),
        ("vtrace_lambda", 1.5, "loss.vtrace_lambda=1.5: must be in [0, 1]"),
        ("gamma", -0.1, "loss.gamma=-0.1: must be in [0, 1]"),
        ("entropy_coef", -0.01, "loss.entropy_coef=-0.01: must be >= 0"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_valid(key, value, needle):
    with pytest.raises(ConfigError) as error:
        ImpalaLoss(BOX, DISCRETE, torso, **{key: value})
    assert needle in str(error.value)


def test_a_recurrent_core_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="network.core='lstm': loss 'impala' takes no recurrent core"):
        make_trainer(["algo=impala", "env=cartpole", "network.core=lstm", "tracking.enabled=false", *TINY], tmp_path)
