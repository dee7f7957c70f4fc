"""A policy's act function for a rollout: what ``act`` returns, bit for bit, with what depends
on the parameters alone computed once; a collector takes a new one for every rollout."""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from rlplat import keys
from rlplat.collectors.base import act_function
from rlplat.collectors.sync import SyncCollector
from rlplat.envs.vector import VectorEnv
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.mlp import MLP
from rlplat.trainer import evaluate_policy

OBSERVATION_SPACE = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACES = {
    "box": gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "discrete": gymnasium.spaces.Discrete(4),
}


class Torso(nn.Module):
    """A torso without ``forward_function``: the act function calls the module."""

    def __init__(self, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(3, out_features)

    def forward(self, observation: Tensor) -> Tensor:
        return torch.relu(self.linear(observation))


def mlp(activation: str, out_features: int) -> MLP:
    return MLP(OBSERVATION_SPACE, out_features, hidden_sizes=[16], activation=activation)


TORSOS = {
    "mlp-tanh": functools.partial(mlp, "tanh"),
    "mlp-relu": functools.partial(mlp, "relu"),
    "mlp-elu": functools.partial(mlp, "elu"),
    "module": Torso,
}


@pytest.mark.parametrize("torso", sorted(TORSOS))
@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
@pytest.mark.parametrize("deterministic", [False, True])
def test_act_function_returns_what_act_returns_bit_for_bit(torso, space, deterministic):
    torch.manual_seed(0)
    agent = ActorCritic(OBSERVATION_SPACE, ACTION_SPACES[space], TORSOS[torso], features=8, log_std_init=-0.3)
    observation = torch.randn(5, 3)
    with torch.inference_mode():
        torch.manual_seed(1)
        expected = [agent.act(observation, deterministic) for _ in range(3)]
        torch.manual_seed(1)
        act = act_function(agent, deterministic)
        got = [act(observation) for _ in range(3)]
    for (action, log_prob), (want_action, want_log_prob) in zip(got, expected):
        assert torch.equal(action, want_action) and torch.equal(log_prob, want_log_prob)
    assert len({tuple(a.flatten().tolist()) for a, _ in got}) == (1 if deterministic else 3)


def test_mlp_forward_function_equals_forward_and_flattens_observations():
    torch.manual_seed(0)
    space = gymnasium.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    for activation in ("tanh", "relu", "silu"):
        torso = MLP(space, 8, hidden_sizes=[16, 16], activation=activation)
        observation = torch.randn(7, 2, 3)
        with torch.inference_mode():
            assert torch.equal(torso.forward_function()(observation), torso(observation))


class CountingPolicy:
    """A policy without ``act_function``: act_function falls back to ``act``."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        self.calls.append(deterministic)
        return torch.zeros(len(observation), dtype=torch.int64), torch.zeros(len(observation))


def test_act_function_falls_back_to_act_with_deterministic_bound():
    policy = CountingPolicy()
    for deterministic in (False, True):
        action, log_prob = act_function(policy, deterministic)(torch.zeros(2, 4))
        assert action.shape == log_prob.shape == (2,)
    assert policy.calls == [False, True]


def pendulum_collector(agent: ActorCritic) -> SyncCollector:
    make = lambda n, vectorization: VectorEnv(lambda: gymnasium.make("Pendulum-v1"), n)  # noqa: E731
    return SyncCollector(make, agent, 10_000, torch.device("cpu"), seed=0, num_envs=2, steps_per_env=4)


def test_each_rollout_acts_with_the_parameters_as_they_are_then():
    """An optimizer changes the parameters in place between rollouts; the std and the
    log-density of the mode, computed once per rollout, must follow."""
    torch.manual_seed(0)
    space = gymnasium.make("Pendulum-v1").observation_space
    agent = ActorCritic(space, gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32), lambda n: MLP(space, n))
    collector = pendulum_collector(agent)
    first = collector.rollout()
    with torch.no_grad():
        agent.head.log_std.fill_(-3.0)  # in place, as an optimizer step
    second = collector.rollout()
    for rollout, log_std in ((first, 0.0), (second, -3.0)):
        with torch.inference_mode():
            mean = agent.head.mean(agent.actor_torso(rollout[keys.OBSERVATION].flatten(0, 1)))
        noise = (rollout[keys.ACTION].flatten(0, 1) - mean) / np.exp(log_std)
        expected = -0.5 * np.log(2 * np.pi) - log_std - 0.5 * noise.square().sum(-1)
        torch.testing.assert_close(rollout[keys.ACTION_LOG_PROB].flatten(), expected)
    spread = [float(r[keys.ACTION].std()) for r in (first, second)]
    assert spread[1] < spread[0] / 5


def test_evaluation_acts_with_the_mode():
    torch.manual_seed(0)
    space = gymnasium.make("Pendulum-v1").observation_space
    agent = ActorCritic(space, gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32), lambda n: MLP(space, n))
    env = VectorEnv(lambda: gymnasium.make("Pendulum-v1", max_episode_steps=20), 2)
    first = evaluate_policy(agent, env, torch.device("cpu"), seed=3)
    with torch.no_grad():
        agent.head.log_std.fill_(2.0)  # a wide policy: sampling would change the returns
    second = evaluate_policy(agent, env, torch.device("cpu"), seed=3)
    assert [e.return_ for e in first] == [e.return_ for e in second]
    assert [e.length for e in first] == [20, 20]


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
@pytest.mark.parametrize("deterministic", [False, True])
def test_on_the_cpu_the_act_function_computes_in_numpy_what_torch_computes(activation, space, deterministic):
    """The numpy path draws the same random numbers as the torch path (the head's
    ``sample``) and returns the same values to float32 rounding."""
    torch.manual_seed(0)
    agent = ActorCritic(OBSERVATION_SPACE, ACTION_SPACES[space], TORSOS[f"mlp-{activation}"], 8, log_std_init=-0.3)
    observation = torch.randn(64, 3)
    assert agent.actor_torso.numpy_forward_function() is not None
    assert agent.head.numpy_act_function(deterministic) is not None
    with torch.inference_mode():
        torch.manual_seed(1)
        action, log_prob = agent.act_function(deterministic)(observation)
        torch.manual_seed(1)
        want_action, want_log_prob = agent.head.sample(agent.actor_torso(observation), deterministic)
    assert action.dtype == want_action.dtype and log_prob.dtype == torch.float32
    assert action.shape == want_action.shape and log_prob.shape == want_log_prob.shape == (64,)
    if space == "discrete":
        assert torch.equal(action, want_action)
    else:
        torch.testing.assert_close(action, want_action)
    torch.testing.assert_close(log_prob, want_log_prob)


def test_the_act_function_stays_in_torch_where_numpy_does_not_apply():
    """An activation without a numpy form, or parameters that are not float32: torch acts."""
    torch.manual_seed(0)
    box = ACTION_SPACES["box"]
    assert mlp("elu", 8).numpy_forward_function() is None
    agent = ActorCritic(OBSERVATION_SPACE, box, TORSOS["mlp-tanh"], features=8).double()
    assert agent.actor_torso.numpy_forward_function() is None and agent.head.numpy_act_function(False) is None
    with torch.inference_mode():
        action, log_prob = agent.act(torch.randn(5, 3, dtype=torch.float64))
    assert action.dtype == log_prob.dtype == torch.float64


def test_the_sac_actor_acts_in_numpy_as_it_does_in_torch():
    from rlplat.networks.actors import SquashedGaussianActor

    torch.manual_seed(0)
    actor = SquashedGaussianActor(TORSOS["mlp-relu"], 2, 8)
    observation = torch.randn(64, 3) * 3.0
    for deterministic in (False, True):
        act = actor.numpy_act_function(deterministic)
        assert act is not None
        with torch.inference_mode():
            torch.manual_seed(1)
            action, log_prob = act(observation.numpy())
            torch.manual_seed(1)
            want_action, want_log_prob = actor(observation, deterministic)
        torch.testing.assert_close(action, want_action)
        torch.testing.assert_close(log_prob, want_log_prob)
