"""Losses other than PPO-clip against small hand-computed cases."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from conftest import TINY, make_trainer
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.losses.a2c import A2CLoss
from rlplat.losses.base import LossModule, declared, undeclared_reason
from rlplat.losses.dqn import DQNLoss
from rlplat.losses.ppo_kl import PPOKLLoss
from rlplat.losses.reinforce import ReinforceLoss
from rlplat.losses.td3 import TD3Loss
from rlplat.networks.actors import squashed_gaussian_log_prob
from rlplat.networks.exploration import linear_schedule

BOX1 = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def identity_torso(out_features, space=None):
    return nn.Flatten()


def set_actor_critic(loss, mean_weight=1.0, value_weight=2.0):
    with torch.no_grad():
        loss.agent.head.mean.weight.fill_(mean_weight)
        loss.agent.head.mean.bias.zero_()
        loss.agent.value_head.weight.fill_(value_weight)
        loss.agent.value_head.bias.zero_()
    return loss


def on_policy_batch():
    return TensorDict(
        {
            keys.OBSERVATION: torch.tensor([[0.5], [-1.0]]),
            keys.ACTION: torch.tensor([[1.0], [-0.5]]),
            keys.ACTION_LOG_PROB: torch.tensor([-1.0, -1.2]),
            keys.ADVANTAGE: torch.tensor([[1.0], [-2.0]]),
            keys.VALUE_TARGET: torch.tensor([[1.5], [-1.0]]),
        },
        batch_size=[2],
    )


def test_a2c_loss_hand_computed():
    loss = set_actor_critic(A2CLoss(BOX1, BOX1, identity_torso, features=1, entropy_coef=0.1, value_coef=0.25))
    out = loss(on_policy_batch())
    log_prob = -0.125 - HALF_LOG_2PI  # both actions are 0.5 from their means, std 1
    assert out["loss_objective"].item() == pytest.approx(-(log_prob * 1.0 + log_prob * -2.0) / 2, rel=1e-5)
    # V = [1, -2], targets [1.5, -1]: squared errors 0.25 and 1
    assert out["loss_critic"].item() == pytest.approx(0.25 * (0.25 + 1.0) / 2, rel=1e-5)
    assert out["loss_entropy"].item() == pytest.approx(-0.1 * (0.5 + HALF_LOG_2PI), rel=1e-5)


def test_reinforce_uses_reward_to_go_minus_baseline():
    loss = set_actor_critic(ReinforceLoss(BOX1, BOX1, identity_torso, features=1, gamma=0.5))
    T = 3
    rollout = TensorDict(
        {
            keys.OBSERVATION: torch.tensor([1.0, 2.0, 3.0]).view(T, 1, 1),
            keys.NEXT: {
                keys.OBSERVATION: torch.tensor([2.0, 3.0, 9.0]).view(T, 1, 1),
                keys.REWARD: torch.tensor([1.0, 2.0, 4.0]).view(T, 1, 1),
                keys.DONE: torch.tensor([False, False, True]).view(T, 1, 1),
                keys.TERMINATED: torch.tensor([False, False, True]).view(T, 1, 1),
            },
        },
        batch_size=[T, 1],
    )
    out = loss.preprocess(rollout)
    returns = [1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4.0]  # episode terminates: no bootstrap
    torch.testing.assert_close(out[keys.VALUE_TARGET].flatten(), torch.tensor(returns))
    torch.testing.assert_close(out[keys.ADVANTAGE].flatten(), torch.tensor(returns) - torch.tensor([2.0, 4.0, 6.0]))


def test_ppo_kl_penalty_and_the_papers_beta_rule():
    loss = set_actor_critic(
        PPOKLLoss(BOX1, BOX1, identity_torso, features=1, kl_target=0.01, kl_beta_init=2.0, normalize_advantage=False)
    )
    out = loss(on_policy_batch())
    log_prob = -0.125 - HALF_LOG_2PI
    log_ratios = [log_prob + 1.0, log_prob + 1.2]
    kl = sum(math.exp(x) - 1 - x for x in log_ratios) / 2
    surrogate = (math.exp(log_ratios[0]) * 1.0 + math.exp(log_ratios[1]) * -2.0) / 2
    assert out["kl"].item() == pytest.approx(kl, rel=1e-5)
    assert out["loss_objective"].item() == pytest.approx(-surrogate + 2.0 * kl, rel=1e-5)
    loss.adapt_beta(0.001)  # below d_targ / 1.5: halve
    assert loss.kl_beta.item() == 1.0
    loss.adapt_beta(0.012)  # inside the band: keep
    assert loss.kl_beta.item() == 1.0
    loss.adapt_beta(0.02)  # above d_targ * 1.5: double
    assert loss.kl_beta.item() == 2.0


def dqn_batch(next_observation):
    return TensorDict(
        {
            keys.OBSERVATION: torch.tensor([[1.0, 0.0]]),
            keys.ACTION: torch.tensor([0]),
            keys.NEXT: {
                keys.OBSERVATION: next_observation,
                keys.REWARD: torch.tensor([[1.0]]),
                keys.DONE: torch.tensor([[False]]),
                keys.TERMINATED: torch.tensor([[False]]),
            },
        },
        batch_size=[1],
    )


@pytest.mark.parametrize("double,expected_next", [(True, 5.0), (False, 7.0)])
def test_dqn_target_takes_the_online_argmax_when_double(double, expected_next):
    space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    loss = DQNLoss(space, gymnasium.spaces.Discrete(2), identity_torso, gamma=0.5, double=double, features=2)
    with torch.no_grad():
        # online Q(s') = [1, 0] prefers action 0; target Q(s') = [5, 7] prefers action 1
        loss.q.advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
        loss.q.advantage.bias.zero_()
        loss.q_target.advantage.weight.copy_(torch.tensor([[5.0, 0.0], [7.0, 0.0]]))
        loss.q_target.advantage.bias.zero_()
    out = loss(dqn_batch(torch.tensor([[1.0, 0.0]])))
    assert out["target_mean"].item() == pytest.approx(1.0 + 0.5 * expected_next)
    # Q(s, a=0) = 1; Huber loss of the error (target - 1)
    error = 1.0 + 0.5 * expected_next - 1.0
    assert out["loss_qvalue"].item() == pytest.approx(error - 0.5 if error > 1 else 0.5 * error**2)


def eye_torso(out_features, space=BOX1):
    """A linear torso copying its (flattened) input into the first features."""
    linear = nn.Linear(int(np.prod(space.shape)), out_features)
    with torch.no_grad():
        linear.weight.copy_(torch.eye(out_features, linear.in_features))
        linear.bias.zero_()
    return nn.Sequential(nn.Flatten(), linear)


def test_td3_target_policy_smoothing_noise_is_clipped():
    loss = TD3Loss(BOX1, BOX1, eye_torso, gamma=0.5, target_policy_noise=1e6, target_noise_clip=0.3, features=2)
    with torch.no_grad():
        loss.actor_target.mean.weight.zero_()  # mu_target(s') = tanh(0) = 0
        loss.actor_target.mean.bias.zero_()
        for target, online in zip(loss.critics_target.critics, loss.critics.critics):
            target[1].weight.copy_(torch.tensor([[0.0, 1.0]]))  # Q_target(s, a) = a
            target[1].bias.zero_()
            online[1].weight.zero_()  # Q(s, a) = 0
            online[1].bias.zero_()
    n = 512
    zeros = torch.zeros(n, 1)
    batch = TensorDict(
        {
            keys.OBSERVATION: zeros,
            keys.ACTION: zeros,
            keys.NEXT: {keys.OBSERVATION: zeros, keys.REWARD: zeros, keys.TERMINATED: zeros.bool()},
        },
        batch_size=[n],
    )
    out = loss(batch)
    # sigma = 1e6 saturates the clip: each a' is exactly -0.3 or 0.3, so y = 0.5 * a' = +-0.15
    # and each of the two critics' squared error is 0.0225 (unclipped noise would give ~0.25)
    assert out["loss_qvalue"].item() == pytest.approx(2 * 0.15**2, rel=1e-5)


def test_tanh_log_prob_correction_matches_torch_transformed_distribution():
    g = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(64, 3, generator=g), torch.randn(64, 3, generator=g) * 0.5
    noise = torch.randn(64, 3, generator=g)
    u = mean + noise * log_std.exp()
    base = torch.distributions.Normal(mean, log_std.exp())
    squashed = torch.distributions.TransformedDistribution(base, [torch.distributions.TanhTransform(cache_size=1)])
    expected = squashed.log_prob(torch.tanh(u)).sum(-1)
    torch.testing.assert_close(squashed_gaussian_log_prob(u, log_std, noise), expected, rtol=1e-4, atol=1e-4)


def test_tanh_log_prob_is_stable_where_tanh_saturates():
    # float32 |u| up to 15, where 1 - tanh(u)^2 underflows: against float64 with sech(u)^2 = 4 / (e^u + e^-u)^2
    u = torch.linspace(-15.0, 15.0, 61).unsqueeze(-1)
    log_std, noise = torch.full_like(u, -0.5), torch.full_like(u, 0.7)
    u64, log_std64 = u.double(), log_std.double()
    sech_squared = 4.0 / (u64.exp() + (-u64).exp()) ** 2
    expected = -0.5 * 0.7**2 - log_std64 - 0.5 * math.log(2 * math.pi) - sech_squared.log()
    got = squashed_gaussian_log_prob(u, log_std, noise)
    torch.testing.assert_close(got.double(), expected.squeeze(-1), rtol=1e-6, atol=1e-5)


def test_linear_schedule():
    assert linear_schedule(1.0, 0.1, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 100, 1000) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("algo", "overrides", "extra"),
    [
        ("ppo", [], {keys.ACTION_LOG_PROB}),
        ("ppo", ["loss.value_clip=0.2"], {keys.ACTION_LOG_PROB, keys.STATE_VALUE}),
        ("ppo_kl", [], {keys.ACTION_LOG_PROB}),
        ("a2c", [], set()),
        ("reinforce", [], set()),
        ("impala", ["collector=sync"], set()),  # its preset's workers would not show the rollout here
    ],
)
def test_on_policy_minibatches_hold_the_keys_the_loss_reads_and_it_learns_from_them(tmp_path, algo, overrides, extra):
    """The trainer buffers only the loss's in_keys; an update on such a minibatch runs (a
    key the loss reads but does not declare would raise here)."""
    trainer = make_trainer([f"algo={algo}", "env=pendulum", "tracking.enabled=false", *TINY, *overrides], tmp_path)
    trainer._buffer(trainer.parts.collector.rollout())
    batch = next(iter(trainer.parts.buffer.batches()))
    expected = {keys.OBSERVATION, keys.ACTION, keys.ADVANTAGE, keys.VALUE_TARGET} | extra
    assert set(batch.keys(True, True)) == expected
    assert trainer._update(batch, frames=0) is not None
    trainer.parts.close()


def test_a_ppo_kl_state_without_its_rollout_loads_and_adapts_from_the_next():
    """A checkpoint written before PPO-KL saved the latest rollout holds none: it loads."""
    loss = PPOKLLoss(BOX1, BOX1, identity_torso, features=1)
    old = {k: v for k, v in loss.state_dict().items() if not k.endswith("_extra_state")}
    loss.load_state_dict(old)
    assert loss.get_extra_state() == {}


def test_loss_module_declares_the_optional_members_at_their_defaults():
    class Structural(nn.Module):  # implements Loss structurally, say: not a LossModule
        pass

    class Delayed(nn.Module):
        delayed_groups = ("actor",)

    loss = Structural()
    assert declared(loss) is LossModule and declared(Structural) is LossModule
    assert declared(LossModule).action_spaces == (gymnasium.spaces.Box, gymnasium.spaces.Discrete)
    members = declared(loss)
    assert members.in_keys is None and members.delayed_groups == () and members.delayed_due is True
    assert not members.recurrent and not members.recurrent_cores and not members.corrects_policy_lag
    assert undeclared_reason(loss) is None
    assert "Delayed defines delayed_groups without subclassing" in str(undeclared_reason(Delayed()))
    td3 = TD3Loss(BOX1, BOX1, eye_torso, features=2)
    assert declared(td3) is td3 and declared(TD3Loss) is TD3Loss and undeclared_reason(td3) is None
    assert td3.delayed_groups == ("actor",) and DQNLoss.action_spaces == (gymnasium.spaces.Discrete,)
