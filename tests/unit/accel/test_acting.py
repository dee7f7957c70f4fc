"""Acting in numpy (rlplat.accel): the same actions and log-probabilities as the policy's own
``act``, from the same random draws, for the exact built-in policies only."""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from rlplat.accel import Acceleration
from rlplat.accel.actor_critic import NumpyActingPolicy, NumpyActorCritic
from rlplat.accel.sac import NumpySACPolicy
from rlplat.collectors.base import act_function
from rlplat.losses.ppo import PPOLoss
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.actors import SquashedGaussianActor
from rlplat.networks.exploration import SquashedGaussianPolicy
from rlplat.networks.mlp import MLP

OBSERVATION_SPACE = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACES = {
    "box": gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "discrete": gymnasium.spaces.Discrete(4),
}


def mlp(activation: str, out_features: int, space: gymnasium.Space = OBSERVATION_SPACE) -> MLP:
    return MLP(space, out_features, hidden_sizes=[16], activation=activation)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
@pytest.mark.parametrize("deterministic", [False, True])
def test_the_agent_acts_in_numpy_as_it_does_in_torch(activation, space, deterministic):
    torch.manual_seed(0)
    agent = ActorCritic(
        OBSERVATION_SPACE, ACTION_SPACES[space], functools.partial(mlp, activation), 8, log_std_init=-0.3
    )
    observation = torch.randn(64, 3)
    with torch.inference_mode():
        torch.manual_seed(1)
        action, log_prob = NumpyActorCritic(agent, policy_only=True).act_function(deterministic)(observation)
        torch.manual_seed(1)
        want_action, want_log_prob = agent.act(observation, deterministic)
    assert action.dtype == want_action.dtype and log_prob.dtype == torch.float32
    assert action.shape == want_action.shape and log_prob.shape == want_log_prob.shape == (64,)
    if space == "discrete":
        assert torch.equal(action, want_action)
    else:
        torch.testing.assert_close(action, want_action)
    torch.testing.assert_close(log_prob, want_log_prob)


def test_the_sac_actor_acts_in_numpy_as_it_does_in_torch():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(functools.partial(mlp, "relu"), 2, 8)
    policy = NumpySACPolicy(SquashedGaussianPolicy(actor, 2, warmup_frames=0))
    observation = torch.randn(64, 3) * 3.0
    for deterministic in (False, True):
        with torch.inference_mode():
            torch.manual_seed(1)
            action, log_prob = policy.act(observation, deterministic)
            torch.manual_seed(1)
            want_action, want_log_prob = actor(observation, deterministic)
        torch.testing.assert_close(action, want_action)
        torch.testing.assert_close(log_prob, want_log_prob)


def test_the_sac_policy_in_numpy_warms_up_and_counts_as_the_policy_does():
    torch.manual_seed(0)
    policy = SquashedGaussianPolicy(SquashedGaussianActor(functools.partial(mlp, "relu"), 2, 8), 2, warmup_frames=8)
    fast = NumpySACPolicy(policy)
    with torch.inference_mode():
        action, log_prob = fast.act(torch.randn(8, 3))
    assert int(policy.frames) == 8 and bool((log_prob == 0).all()) and float(action.abs().max()) <= 1.0
    with torch.inference_mode():
        _, log_prob = fast.act(torch.randn(8, 3))
    assert int(policy.frames) == 16 and bool((log_prob != 0).all())  # warmed up: the actor's samples


class ScaledMLP(MLP):
    """An MLP subclass whose forward differs: acting must go through it."""

    def forward(self, observation: Tensor) -> Tensor:
        return 3.0 * super().forward(observation)


class Torso(nn.Module):
    def __init__(self, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(3, out_features)

    def forward(self, observation: Tensor) -> Tensor:
        return torch.relu(self.linear(observation))


@pytest.mark.parametrize(
    "network,reason",
    [
        (functools.partial(mlp, "elu"), "network.activation='elu'"),
        (lambda out: ScaledMLP(OBSERVATION_SPACE, out), "ScaledMLP, a subclass of MLP"),
        (Torso, "Torso, not MLP"),
    ],
    ids=["elu", "mlp-subclass", "other-torso"],
)
def test_the_policy_acts_itself_where_numpy_does_not_cover_it(network, reason):
    torch.manual_seed(0)
    loss = PPOLoss(OBSERVATION_SPACE, ACTION_SPACES["box"], network, features=8)
    acceleration = Acceleration(loss)
    assert acceleration.acting is None and reason in acceleration.summary
    assert acceleration.policy() is loss.policy


def test_the_policy_acts_itself_in_float64():
    loss = PPOLoss(OBSERVATION_SPACE, ACTION_SPACES["box"], functools.partial(mlp, "tanh"), features=8).double()
    acceleration = Acceleration(loss)
    assert acceleration.acting is None and acceleration.policy() is loss.policy
    assert "not float32 on the CPU" in acceleration.summary


def test_acting_in_numpy_is_checked_against_the_policy_when_built(monkeypatch):
    """A numpy policy that disagreed with the policy's act would give way to it, with a warning."""
    torch.manual_seed(0)
    loss = PPOLoss(OBSERVATION_SPACE, ACTION_SPACES["box"], functools.partial(mlp, "tanh"), features=8)
    acceleration = Acceleration(loss)
    assert isinstance(acceleration.policy(), NumpyActingPolicy) and acceleration.acting == "numpy"

    class Off(NumpyActorCritic):  # acts 1e-3 away from the policy
        def act_function(self, deterministic):
            act = super().act_function(deterministic)
            return lambda observation: (lambda a, p: (a + 1e-3, p))(*act(observation))

    monkeypatch.setattr("rlplat.accel.plan.NumpyActorCritic", Off)
    state = torch.get_rng_state()
    warnings: list[str] = []
    acceleration = Acceleration(loss, warn=warnings.append)
    assert acceleration.policy() is loss.policy and acceleration.acting is None
    assert len(warnings) == 1 and "acting in numpy disagrees with the policy: its action differs" in warnings[0]
    assert torch.equal(torch.get_rng_state(), state)  # the check draws nothing from the run's generator


def test_each_rollout_acts_with_the_parameters_as_they_are_then():
    torch.manual_seed(0)
    loss = PPOLoss(OBSERVATION_SPACE, ACTION_SPACES["box"], functools.partial(mlp, "tanh"), features=8)
    policy = Acceleration(loss).policy()
    observation = torch.randn(256, 3)
    with torch.inference_mode():
        before = act_function(policy)(observation)[0]
        with torch.no_grad():
            loss.agent.head.log_std.fill_(-3.0)  # in place, as an optimizer step
        after = act_function(policy)(observation)[0]
    assert float(after.std()) < float(before.std()) / 5
