"""Shared part of the on-policy actor-critic losses: the agent and GAE preprocessing."""

from __future__ import annotations

import gymnasium
import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.functional import generalized_advantage_estimate
from rlplat.networks.actor_critic import ActorCritic, NetworkFactory
from rlplat.registry import ConfigError


def check_unit_interval(**values: float) -> None:
    """Raise ConfigError naming ``loss.<key>`` for any value outside [0, 1]."""
    for name, value in values.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"loss.{name}={value}: must be in [0, 1]")


class ActorCriticLoss(nn.Module):
    """Base of on-policy losses: owns an :class:`ActorCritic` and adds GAE to rollouts.

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: Box, Discrete, or one-dimensional MultiDiscrete or MultiBinary
            (supplied by rlplat).
        network: Factory of the configured torso (supplied by rlplat).
        gamma: Discount factor.
        gae_lambda: GAE lambda (1 gives Monte-Carlo advantages with bootstraps).
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic.
        log_std_init: Initial log std of the Gaussian policy (Box actions).
        normalize_advantage: Normalise advantages per minibatch.
        entropy_coef: Weight of the entropy bonus.
        value_coef: Weight of the value loss.

    Attributes:
        on_policy: True: learns from the latest rollout only (a rollout buffer).
        action_spaces: The action-space types it acts in.
        sequence_length: 1: samples are single transitions.
        in_keys: The keys of a batch the loss reads; the trainer buffers only these.

    Raises:
        ConfigError: if gamma or gae_lambda is outside [0, 1].
    """

    on_policy = True
    sequence_length = 1
    in_keys: tuple[NestedKey, ...] = (keys.OBSERVATION, keys.ACTION, keys.ADVANTAGE, keys.VALUE_TARGET)
    action_spaces = (
        gymnasium.spaces.Box,
        gymnasium.spaces.Discrete,
        gymnasium.spaces.MultiDiscrete,
        gymnasium.spaces.MultiBinary,
    )

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float,
        gae_lambda: float,
        features: int,
        share_torso: bool,
        log_std_init: float,
        normalize_advantage: bool,
        entropy_coef: float,
        value_coef: float,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma, gae_lambda=gae_lambda)
        self.agent = ActorCritic(
            observation_space,
            action_space,
            network,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
        )
        self.policy = self.agent
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.normalize_advantage = normalize_advantage
        self.entropy_coef = entropy_coef
        self.value_coef = value_coef

    def policy_value_terms(self, batch: TensorDict) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """A minibatch's ``[N]`` log pi(a|s), ``[N]`` entropy and ``[N, 1]`` V(s) (with
        gradients; a shared torso runs once) and its ``[N]`` advantages, normalised when
        ``normalize_advantage``: ``(log_prob, entropy, advantage, value)``."""
        log_prob, entropy, value = self.agent.log_prob_entropy_value(batch[keys.OBSERVATION], batch[keys.ACTION])
        return log_prob, entropy, self.advantages(batch), value

    def advantages(self, batch: TensorDict) -> Tensor:
        """A minibatch's ``[N]`` advantages, normalised when ``normalize_advantage``."""
        advantage = batch[keys.ADVANTAGE].squeeze(-1)
        return normalize(advantage) if self.normalize_advantage else advantage

    def entropy_terms(self, entropy: Tensor) -> tuple[Tensor, Tensor]:
        """``[N]`` entropies -> ``loss_entropy = -c_e * mean(H)`` (0-dim) and the mean entropy,
        detached (the diagnostic). With ``entropy_coef = 0`` the term is a constant zero, so
        that the backward pass does not go through the entropy's graph (its gradient would
        be zero)."""
        if self.entropy_coef == 0:
            mean = entropy.detach().mean()
            return torch.zeros_like(mean), mean
        mean = entropy.mean()
        return -self.entropy_coef * mean, mean.detach()

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``actor``: the policy's torso and head (and the shared torso when
        ``share_torso``); ``critic``: the value torso and head."""
        agent = self.agent
        actor = [*agent.actor_torso.parameters(), *agent.head.parameters()]
        critic_torso = [] if agent.critic_torso is agent.actor_torso else [*agent.critic_torso.parameters()]
        return {"actor": actor, "critic": [*critic_torso, *agent.value_head.parameters()]}

    def after_update(self) -> None:
        """Nothing to do after a gradient step: on-policy losses have no target networks."""

    @torch.no_grad()
    def state_values(self, rollout: TensorDict) -> tuple[Tensor, Tensor]:
        """V(s_t) and V(s_{t+1}), each ``[T, B, 1]``, from one batched forward; a truncated
        step's V(s_{t+1}) is the value of its true final observation."""
        T, B = rollout.batch_size
        observations = torch.cat([rollout[keys.OBSERVATION], rollout[keys.NEXT_OBSERVATION]]).flatten(0, 1)
        values = self.agent.value(observations).view(2 * T, B, 1)
        return values[:T], values[T:]

    @torch.no_grad()
    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add ``state_value``, ``advantage`` (GAE) and ``value_target`` to a ``[T, B]`` rollout."""
        state_value, next_state_value = self.state_values(rollout)
        advantage, value_target = generalized_advantage_estimate(
            rollout[keys.NEXT_REWARD],
            state_value,
            next_state_value,
            rollout[keys.NEXT_DONE],
            rollout[keys.NEXT_TERMINATED],
            self.gamma,
            self.gae_lambda,
        )
        rollout[keys.STATE_VALUE] = state_value
        rollout[keys.ADVANTAGE] = advantage
        rollout[keys.VALUE_TARGET] = value_target
        return rollout


def normalize(advantage: Tensor) -> Tensor:
    """Zero mean, unit std (unbiased) over the minibatch; unchanged for a single sample."""
    if advantage.numel() < 2:
        return advantage
    std, mean = torch.std_mean(advantage)  # one pass for both
    return (advantage - mean) / (std + 1e-8)
