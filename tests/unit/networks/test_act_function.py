"""A policy's act function for a rollout (its ``act`` with ``deterministic`` bound, unless it
has one of its own); a collector takes a new one for every rollout, acting with the
parameters as they are then; evaluation acts with the mode."""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import Tensor

from rlplat import keys
from rlplat.collectors.base import act_function
from rlplat.collectors.sync import SyncCollector
from rlplat.envs.vector import VectorEnv
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.mlp import MLP
from rlplat.trainer import evaluate_policy


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
