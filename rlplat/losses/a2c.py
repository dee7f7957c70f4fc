"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, "Asynchronous Methods for
Deep Reinforcement Learning", algorithm S3, run synchronously over parallel envs)."""

from __future__ import annotations

import gymnasium
from tensordict import TensorDict

from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.networks.actor_critic import NetworkFactory


class A2CLoss(ActorCriticLoss):
    """A2C: ``L = -mean(log pi(a|s) * A) + c_v * mean((V(s) - V_target)^2) - c_e * H``.

    One gradient step per short rollout (the buffer's single epoch over the whole rollout);
    advantages from GAE (lambda = 1 gives the paper's n-step advantages).

    Args:
        observation_space: Supplied by rlplat.
        action_space: Box or Discrete, supplied by rlplat.
        network: Torso factory, supplied by rlplat.
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        normalize_advantage: Normalise advantages per minibatch.
        entropy_coef: Weight c_e of the entropy bonus.
        value_coef: Weight c_v of the value loss.
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic.
        log_std_init: Initial log std of the Gaussian policy.

    Raises:
        ConfigError: for gamma or gae_lambda outside [0, 1].
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        gae_lambda: float = 1.0,
        normalize_advantage: bool = False,
        entropy_coef: float = 0.0,
        value_coef: float = 0.5,
        features: int = 64,
        share_torso: bool = False,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            network,
            gamma=gamma,
            gae_lambda=gae_lambda,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
            normalize_advantage=normalize_advantage,
            entropy_coef=entropy_coef,
            value_coef=value_coef,
        )

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` batch (``[N, P]`` sequences for a recurrent agent) -> ``loss_objective``,
        ``loss_critic``, ``loss_entropy``; diagnostics ``entropy``, ``explained_variance``,
        ``value_mean``."""
        return self.policy_gradient_terms(batch, value_scale=1.0)
