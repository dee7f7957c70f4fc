"""PPO with the clipped surrogate objective (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", eq. 7 and 9)."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor
from torch.nn import functional as F

from rlplat import keys
from rlplat.functional import kl_estimate
from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.registry import ConfigError, check_positive


class PPOLoss(ActorCriticLoss):
    """PPO-clip: ``L = -L^CLIP + c_v * L^VF - c_e * H``, each term returned separately.

    ``ratio = pi(a|s) / pi_old(a|s)``;
    ``L^CLIP = mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))``;
    ``L^VF = mean((V(s) - V_target)^2) / 2``, or with value clipping
    ``mean(max((V - V_targ)^2, (V_old + clip(V - V_old, -c, c) - V_targ)^2)) / 2``.
    Advantages come from GAE(gamma, lambda) computed once per rollout by
    :meth:`ActorCriticLoss.preprocess`, optionally normalised per minibatch.

    Args:
        observation_space: The env's single observation space (supplied by rlplat).
        action_space: The env's single action space, Box or Discrete (supplied by rlplat).
        network: Factory of the configured torso (supplied by rlplat).
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        clip_epsilon: Clip range eps of the probability ratio.
        value_clip: Clip range of the value update around the rollout's V_old; None
            disables value clipping.
        normalize_advantage: Normalise advantages to zero mean, unit std per minibatch.
        entropy_coef: Weight c_e of the entropy bonus.
        value_coef: Weight c_v of the value loss.
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic instead of two.
        log_std_init: Initial log std of the Gaussian policy (Box actions).

    Raises:
        ConfigError: for a coefficient out of range.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_epsilon: float = 0.2,
        value_clip: float | None = None,
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
            gae_lambda=gae_lambda,
            features=features,
            share_torso=share_torso,
            log_std_init=log_std_init,
            normalize_advantage=normalize_advantage,
            entropy_coef=entropy_coef,
            value_coef=value_coef,
        )
        check_positive("loss.clip_epsilon", clip_epsilon, allow_inf=True)  # inf: unclipped
        if value_clip is not None and value_clip <= 0:
            raise ConfigError(f"loss.value_clip={value_clip}: must be > 0, or null to disable")
        self.clip_epsilon = clip_epsilon
        self.value_clip = value_clip
        self.in_keys = (*self.in_keys, keys.ACTION_LOG_PROB) + ((keys.STATE_VALUE,) if value_clip is not None else ())

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` minibatch (``[N, P]`` sequences for a recurrent agent) -> ``loss_objective``,
        ``loss_critic``, ``loss_entropy`` and diagnostics ``entropy``, ``approx_kl``,
        ``clip_fraction``, ``ratio``, ``explained_variance``, ``value_mean`` (means)."""
        steps = self.policy_value_terms(batch)  # [M] each, value [M, 1]
        return self.terms(steps.batch, steps.log_prob, steps.entropy, steps.advantage, steps.value).output

    def terms(self, batch: TensorDict, log_prob: Tensor, entropy: Tensor, advantage: Tensor, value: Tensor) -> PPOTerms:
        """The loss output from the networks' outputs on a minibatch, and the intermediates
        that the output's derivatives depend on.

        Args:
            batch: The ``[N]`` minibatch (its ``action_log_prob``, ``value_target`` and, with
                value clipping, ``state_value``).
            log_prob: ``[N]`` log pi(a|s) under the current parameters.
            entropy: ``[N]`` entropy of pi(.|s).
            advantage: ``[N]`` advantages (normalised when ``normalize_advantage``).
            value: ``[N, 1]`` V(s).

        Returns:
            :class:`PPOTerms`: what :meth:`forward` returns, and the intermediates.
        """
        log_ratio = log_prob - batch[keys.ACTION_LOG_PROB]
        ratio = log_ratio.exp()
        clipped_ratio = ratio.clamp(1.0 - self.clip_epsilon, 1.0 + self.clip_epsilon)
        pg_loss1 = ratio * advantage
        pg_loss2 = clipped_ratio * advantage
        pg_loss = -torch.min(pg_loss1, pg_loss2).mean()

        value_target = batch[keys.VALUE_TARGET]
        value_clipping = None
        if self.value_clip is None:
            squared_error = F.mse_loss(value, value_target)  # mean of (V - V_target)^2
        else:
            value_old = batch[keys.STATE_VALUE]
            v_clipped = value_old + (value - value_old).clamp(-self.value_clip, self.value_clip)
            v_loss_unclipped = (value - value_target).pow(2)
            v_loss_clipped = (v_clipped - value_target).pow(2)
            squared_error = torch.max(v_loss_unclipped, v_loss_clipped).mean()
            value_clipping = ValueClipping(v_clipped, v_loss_unclipped, v_loss_clipped)

        loss_entropy, entropy = self.entropy_terms(entropy)
        with torch.no_grad():
            approx_kl = kl_estimate(log_ratio, ratio).mean()
            # ratio outside [1 - eps, 1 + eps]: the samples the clip moved (two operations)
            clip_fraction = torch.ne(ratio, clipped_ratio).mean(dtype=ratio.dtype)
            ratio_mean = ratio.mean()
        output = TensorDict(
            {
                "loss_objective": pg_loss,
                "loss_critic": squared_error * (0.5 * self.value_coef),  # c_v * L^VF
                "loss_entropy": loss_entropy,
                "entropy": entropy,
                "approx_kl": approx_kl,
                "clip_fraction": clip_fraction,
                "ratio": ratio_mean,
                **self.rollout_diagnostics,
            },
            batch_size=[],
        )
        return PPOTerms(output, ratio, pg_loss1, pg_loss2, value_clipping)


class PPOTerms(NamedTuple):
    """:meth:`PPOLoss.terms`: the loss output and the intermediates its derivatives depend on."""

    output: TensorDict
    ratio: Tensor  # [N]
    pg_loss1: Tensor  # [N] ratio * A
    pg_loss2: Tensor  # [N] clip(ratio, 1 - eps, 1 + eps) * A
    value_clipping: ValueClipping | None  # None without value clipping


class ValueClipping(NamedTuple):
    """The clipped value loss's intermediates (``loss.value_clip`` = c)."""

    v_clipped: Tensor  # [N, 1] V_old + clip(V - V_old, -c, c)
    v_loss_unclipped: Tensor  # [N, 1] (V - V_target)^2
    v_loss_clipped: Tensor  # [N, 1] (v_clipped - V_target)^2
