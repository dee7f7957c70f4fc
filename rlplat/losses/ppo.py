"""PPO with the clipped surrogate objective (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", eq. 7 and 9)."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor
from torch.nn import functional as F

from rlplat import keys
from rlplat.functional import kl_estimate
from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.registry import ConfigError


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
        analytic_gradients: Compute the gradients in closed form (:meth:`gradients`) where
            the agent allows it: separate MLP torsos with tanh or ReLU (see
            :attr:`rlplat.networks.actor_critic.ActorCritic.has_backward`); autograd
            otherwise, or when False.

    Attributes:
        analytic_gradients: Whether the trainer calls :meth:`gradients` instead of
            back-propagating :meth:`forward`'s terms.

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
        analytic_gradients: bool = True,
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
        if clip_epsilon <= 0:
            raise ConfigError(f"loss.clip_epsilon={clip_epsilon}: must be > 0")
        if value_clip is not None and value_clip <= 0:
            raise ConfigError(f"loss.value_clip={value_clip}: must be > 0, or null to disable")
        self.clip_epsilon = clip_epsilon
        self.value_clip = value_clip
        self.in_keys = (*self.in_keys, keys.ACTION_LOG_PROB) + ((keys.STATE_VALUE,) if value_clip is not None else ())
        self.analytic_gradients = analytic_gradients and self.agent.has_backward

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` minibatch -> ``loss_objective``, ``loss_critic``, ``loss_entropy`` and
        diagnostics ``entropy``, ``approx_kl``, ``clip_fraction``, ``ratio`` (means)."""
        log_prob, entropy, advantage, value = self.policy_value_terms(batch)  # [N] each, value [N, 1]
        return self._terms(batch, log_prob, entropy, advantage, value).output

    def _terms(self, batch: TensorDict, log_prob: Tensor, entropy: Tensor, advantage: Tensor, value: Tensor) -> _Terms:
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
            value_clipping = _ValueClipping(v_clipped, v_loss_unclipped, v_loss_clipped)

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
            },
            batch_size=[],
        )
        return _Terms(output, ratio, pg_loss1, pg_loss2, value_clipping)

    @torch.inference_mode()
    def gradients(self, batch: TensorDict) -> TensorDict:
        """:meth:`forward`'s terms and diagnostics, without gradients, and the gradient of the
        summed ``loss_*`` terms written into every parameter's ``.grad`` (replaced), in
        closed form instead of by autograd (only when :attr:`analytic_gradients`).

        The derivatives: ``d loss_objective / d log pi(a_n|s_n) = -ratio_n * A_n / N`` where
        the unclipped term is the minimum (at a tie the ratio is inside the clip range,
        where both terms have that derivative) and 0 elsewhere; ``d loss_critic / d V(s_n) =
        c_v (V(s_n) - V_target) / N`` (value clipping: that of the larger squared error);
        ``d loss_entropy / d H_n = -c_e / N``. The networks back-propagate them by hand
        (:mod:`rlplat.networks.backward`). The gradients equal autograd's to float rounding
        (tested) in about half its time. Runs under ``torch.inference_mode``, as
        :meth:`rlplat.losses.sac.SACLoss.gradients` does.

        Args:
            batch: ``[N]`` samples, as for :meth:`forward`.

        Returns:
            What :meth:`forward` returns, detached.
        """
        if self.value_clip is None and not torch.compiler.is_compiling() and self.agent.numpy_passes:
            return self._numpy_gradients(batch)
        agent, n = self.agent, batch.batch_size[0]
        observation = batch[keys.OBSERVATION]
        log_prob, entropy, policy_saved = agent.log_prob_entropy_saving(observation, batch[keys.ACTION])
        value, value_saved = agent.value_saving(observation)  # [N, 1]
        advantage = self.advantages(batch)  # [N]
        terms = self._terms(batch, log_prob, entropy, advantage, value)
        unclipped = terms.pg_loss1 <= terms.pg_loss2  # [N] bool
        grad_log_prob = (advantage * unclipped).mul_(terms.ratio).mul_(-1.0 / n)  # [N]
        agent.policy_backward(policy_saved, grad_log_prob, -self.entropy_coef / n)
        agent.value_backward(value_saved, self._value_error(batch, value, terms).mul_(self.value_coef / n))
        return terms.output

    def _numpy_gradients(self, batch: TensorDict) -> TensorDict:
        """:meth:`gradients` computed in numpy (without value clipping, where the agent's
        :attr:`rlplat.networks.actor_critic.ActorCritic.numpy_passes` hold): the same terms,
        diagnostics and gradients, to float32 rounding, with a fraction of torch's
        per-operation overhead (see :mod:`rlplat.networks.numpy_passes`; ``benchmarks/speed.py``
        at the settings of ``benchmarks/peers.py``'s PPO row times the updates)."""
        agent, n = self.agent, batch.batch_size[0]
        observation = batch[keys.OBSERVATION].numpy()
        log_prob, entropy, policy_saved = agent.numpy_log_prob_entropy_saving(observation, batch[keys.ACTION].numpy())
        value, value_saved = agent.numpy_value_saving(observation)  # [N, 1]
        advantage = batch[keys.ADVANTAGE].numpy()[:, 0]  # [N]
        if self.normalize_advantage and n > 1:  # as actor_critic.normalize
            advantage = (advantage - advantage.mean()) / (advantage.std(ddof=1) + 1e-8)
        log_ratio = log_prob - batch[keys.ACTION_LOG_PROB].numpy()
        ratio = np.exp(log_ratio)
        clipped_ratio = np.clip(ratio, 1.0 - self.clip_epsilon, 1.0 + self.clip_epsilon)
        pg_loss1, pg_loss2 = ratio * advantage, clipped_ratio * advantage
        error = value - batch[keys.VALUE_TARGET].numpy()  # [N, 1]
        entropy_mean = entropy.mean()
        terms = np.array(
            [
                -np.minimum(pg_loss1, pg_loss2).mean(),  # loss_objective
                (error * error).mean() * (0.5 * self.value_coef),  # loss_critic: c_v * L^VF
                -self.entropy_coef * entropy_mean,  # loss_entropy
                entropy_mean,
                ((ratio - 1.0) - log_ratio).mean(),  # approx_kl (kl_estimate)
                np.mean(ratio != clipped_ratio, dtype=np.float32),  # clip_fraction
                ratio.mean(),
            ],
            dtype=np.float32,
        )
        grad_log_prob = advantage * (pg_loss1 <= pg_loss2)  # where the unclipped term is the minimum
        grad_log_prob *= ratio
        grad_log_prob *= -1.0 / n
        agent.numpy_policy_backward(policy_saved, grad_log_prob, -self.entropy_coef / n)
        error *= self.value_coef / n
        agent.numpy_value_backward(value_saved, error)
        return TensorDict(dict(zip(_OUTPUT_KEYS, torch.from_numpy(terms).unbind())), batch_size=[])

    def _value_error(self, batch: TensorDict, value: Tensor, terms: _Terms) -> Tensor:
        """``[N, 1]`` d(sum_n of the value loss's squared errors / 2)/dV(s_n): ``V - V_target``,
        or with value clipping the derivative of the larger of the two squared errors
        (averaged at a tie, as ``torch.max``'s gradient is)."""
        value_target = batch[keys.VALUE_TARGET]
        error = value - value_target
        if terms.value_clipping is None:
            return error
        v_clipped, unclipped_sq, clipped_sq = terms.value_clipping
        inside = (value - batch[keys.STATE_VALUE]).abs() <= self.value_clip  # clamp's gradient: 1 inside
        clipped_error = (v_clipped - value_target) * inside
        tie = (error + clipped_error) * 0.5
        return torch.where(unclipped_sq > clipped_sq, error, torch.where(unclipped_sq < clipped_sq, clipped_error, tie))


_OUTPUT_KEYS = ("loss_objective", "loss_critic", "loss_entropy", "entropy", "approx_kl", "clip_fraction", "ratio")
"""The keys of PPO's loss output, in the order :meth:`PPOLoss._numpy_gradients` computes them."""


class _Terms(NamedTuple):
    """:meth:`PPOLoss._terms`: the loss output and the intermediates its gradients need."""

    output: TensorDict
    ratio: Tensor  # [N]
    pg_loss1: Tensor  # [N] ratio * A
    pg_loss2: Tensor  # [N] clip(ratio, 1 - eps, 1 + eps) * A
    value_clipping: _ValueClipping | None  # None without value clipping


class _ValueClipping(NamedTuple):
    """The clipped value loss's intermediates (``loss.value_clip`` = c)."""

    v_clipped: Tensor  # [N, 1] V_old + clip(V - V_old, -c, c)
    v_loss_unclipped: Tensor  # [N, 1] (V - V_target)^2
    v_loss_clipped: Tensor  # [N, 1] (v_clipped - V_target)^2
