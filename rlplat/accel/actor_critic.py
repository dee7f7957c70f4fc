"""The actor-critic agent (:class:`rlplat.networks.actor_critic.ActorCritic`) in closed form:
its policy and value passes for PPO's gradients, in torch and numpy, and its acting in numpy.

Built only for an agent of exactly that class with two torsos (not shared), each exactly
:class:`rlplat.networks.mlp.MLP` with tanh or ReLU, and a head of exactly one of the
built-in classes (:mod:`rlplat.accel.plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from torch import Tensor

from rlplat.accel.arrays import LinearArrays
from rlplat.accel.heads import (
    CategoricalPasses,
    GaussianPasses,
    HeadSaved,
    NumpyCategorical,
    NumpyGaussian,
    NumpySaved,
)
from rlplat.accel.linear import layer_of, linear_backward
from rlplat.accel.mlp import MLPPasses, NumpyMLP
from rlplat.collectors.base import ActFunction
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.heads import CategoricalHead, GaussianHead
from rlplat.networks.mlp import MLP


def _torso(module: object) -> MLP:
    assert type(module) is MLP, "rlplat.accel.plan builds these for MLP torsos only"
    return module


class ActorCriticPasses:
    """The agent's policy and value passes in torch, outside autograd.

    Args:
        agent: The agent (see the module's docstring for what it must be).
    """

    def __init__(self, agent: ActorCritic) -> None:
        self.actor = MLPPasses(_torso(agent.actor_torso))
        self.critic = MLPPasses(_torso(agent.critic_torso))
        self.head = (
            GaussianPasses(agent.head)
            if isinstance(agent.head, GaussianHead)
            else CategoricalPasses(cast(CategoricalHead, agent.head))
        )
        self.value_head = layer_of(agent.value_head)

    def log_prob_entropy_saving(
        self, observation: Tensor, action: Tensor
    ) -> tuple[Tensor, Tensor, tuple[list[Tensor], HeadSaved]]:
        """``[N]`` log pi(a|s), ``[N]`` entropy, and what :meth:`policy_backward` needs."""
        outputs = self.actor.forward_saving(observation)
        log_prob, entropy, head_saved = self.head.log_prob_entropy_saving(outputs[-1], action)
        return log_prob, entropy, (outputs, head_saved)

    def policy_backward(
        self, saved: tuple[list[Tensor], HeadSaved], grad_log_prob: Tensor, grad_entropy: float = 0.0
    ) -> None:
        """Set the ``.grad`` of the policy's parameters (actor torso and head; replaced) from
        ``[N]`` dL/d log pi(a_n|s_n) and dL/dH(pi(.|s_n)) (one value for every n)."""
        outputs, head_saved = saved
        self.actor.backward(outputs, self.head.backward(head_saved, grad_log_prob, grad_entropy))

    def value_saving(self, observation: Tensor) -> tuple[Tensor, list[Tensor]]:
        """``[N, 1]`` V(s) and what :meth:`value_backward` needs."""
        outputs = self.critic.forward_saving(observation)
        weight, bias = self.value_head
        return torch.addmm(bias, outputs[-1], weight.t()), outputs

    def value_backward(self, outputs: list[Tensor], grad_value: Tensor) -> None:
        """Set the ``.grad`` of the critic torso's and value head's parameters (replaced) from
        ``[N, 1]`` dL/dV(s_n)."""
        self.critic.backward(outputs, linear_backward(self.value_head, outputs[-1], grad_value))


class NumpyActorCritic:
    """The agent's passes in numpy (every parameter float32 on the CPU); with
    ``policy_only``, only the actor's (acting), for which the critic torso may be anything.

    Args:
        agent: The agent.
        policy_only: Build the actor's passes alone.
    """

    def __init__(self, agent: ActorCritic, policy_only: bool = False) -> None:
        self.actor = NumpyMLP(_torso(agent.actor_torso))
        self.head = (
            NumpyGaussian(agent.head)
            if isinstance(agent.head, GaussianHead)
            else NumpyCategorical(cast(CategoricalHead, agent.head))
        )
        if not policy_only:
            self.critic = NumpyMLP(_torso(agent.critic_torso))
            self.value_head = LinearArrays(agent.value_head)

    def act_function(self, deterministic: bool) -> ActFunction:
        """:meth:`ActorCritic.act` with ``deterministic`` bound, computed in numpy but for the
        random draws, taken from torch as the head takes them: the same actions (but where
        rounding moves a categorical draw across a cumulative probability) and
        log-probabilities to float32 rounding. Valid until the next parameter update."""
        features, head = self.actor.forward, self.head.act_function(deterministic)

        def act(observation: Tensor) -> tuple[Tensor, Tensor]:
            return head(features(observation.numpy()))

        return act

    def log_prob_entropy_saving(
        self, observation: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, tuple[list[np.ndarray], NumpySaved]]:
        """:meth:`ActorCriticPasses.log_prob_entropy_saving` on arrays."""
        outputs = self.actor.forward_saving(observation)
        log_prob, entropy, head_saved = self.head.log_prob_entropy_saving(outputs[-1], action)
        return log_prob, entropy, (outputs, head_saved)

    def policy_backward(
        self, saved: tuple[list[np.ndarray], NumpySaved], grad_log_prob: np.ndarray, grad_entropy: float = 0.0
    ) -> None:
        """:meth:`ActorCriticPasses.policy_backward` on arrays."""
        outputs, head_saved = saved
        self.actor.backward(outputs, self.head.backward(head_saved, grad_log_prob, grad_entropy))

    def value_saving(self, observation: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """:meth:`ActorCriticPasses.value_saving` on arrays."""
        outputs = self.critic.forward_saving(observation)
        value = outputs[-1] @ self.value_head.weight_t
        value += self.value_head.bias
        return value, outputs

    def value_backward(self, outputs: list[np.ndarray], grad_value: np.ndarray) -> None:
        """:meth:`ActorCriticPasses.value_backward` on arrays, from ``[N, 1]`` dL/dV(s_n)."""
        self.critic.backward(outputs, self.value_head.backward(outputs[-1], grad_value))


class NumpyActingPolicy:
    """A policy that acts through a numpy act function, for a stretch of steps at a time
    (:func:`rlplat.collectors.base.act_function`): the collector's and evaluation's policy
    in place of the built-in one it was made for.

    At one env step's batch a small network's forward pass is a dozen operations of a few
    microseconds' overhead each in torch, a third of that in numpy, and more so with envs
    stepped in between, whose code evicts torch's from the CPU's caches.

    Args:
        act_function: ``deterministic -> ActFunction`` (taken per rollout).
    """

    def __init__(self, act_function: Callable[[bool], ActFunction]) -> None:
        self.act_function = act_function

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """As the built-in policy's ``act`` (see :class:`rlplat.collectors.base.Policy`)."""
        return self.act_function(deterministic)(observation)
