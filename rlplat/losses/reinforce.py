"""REINFORCE with a learned baseline (Williams 1992, "Simple Statistical Gradient-Following
Algorithms for Connectionist Reinforcement Learning")."""

from __future__ import annotations

import gymnasium
import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.functional import td_lambda_return
from rlplat.losses.actor_critic import ActorCriticLoss, value_diagnostics
from rlplat.networks.actor_critic import NetworkFactory


class ReinforceLoss(ActorCriticLoss):
    """Vanilla policy gradient: ``L = -mean(log pi(a_t|s_t) * (G_t - b(s_t))) + c_v * mean((b(s_t) - G_t)^2)``.

    ``G_t`` is the discounted reward-to-go (the TD(1) return), bootstrapped from the
    baseline only where a time limit truncated the episode or the rollout ends mid-episode;
    use rollouts long enough to hold whole episodes. The baseline b = V is learned by
    regression on ``G_t``.

    Args:
        observation_space: Supplied by rlplat.
        action_space: Box or Discrete, supplied by rlplat.
        network: Torso factory, supplied by rlplat.
        gamma: Discount factor.
        normalize_advantage: Normalise ``G - b`` per minibatch.
        entropy_coef: Weight of the entropy bonus.
        value_coef: Weight of the baseline's regression loss.
        features: Width of the torso output the heads read.
        share_torso: One torso for policy and baseline.
        log_std_init: Initial log std of the Gaussian policy.

    Raises:
        ConfigError: for gamma outside [0, 1].
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        normalize_advantage: bool = True,
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
            gae_lambda=1.0,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
            normalize_advantage=normalize_advantage,
            entropy_coef=entropy_coef,
            value_coef=value_coef,
        )

    @torch.no_grad()
    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Add the reward-to-go ``value_target``, the baseline and ``advantage = G - b``."""
        baseline, next_baseline = self.state_values(rollout)
        returns = td_lambda_return(
            rollout[keys.NEXT_REWARD],
            next_baseline,
            rollout[keys.NEXT_DONE],
            rollout[keys.NEXT_TERMINATED],
            self.gamma,
            1.0,
        )
        rollout[keys.STATE_VALUE] = baseline
        rollout[keys.VALUE_TARGET] = returns
        rollout[keys.ADVANTAGE] = returns - baseline
        self.rollout_diagnostics = value_diagnostics(baseline, returns)
        return rollout

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` batch (``[N, P]`` sequences for a recurrent agent) -> ``loss_objective``,
        ``loss_critic``, ``loss_entropy``; diagnostics ``entropy``, ``explained_variance``,
        ``value_mean``."""
        return self.policy_gradient_terms(batch, value_scale=0.5)
