"""PPO's gradients in closed form (:class:`rlplat.losses.ppo.PPOLoss`, exactly that class):
the loss output and the gradient of its summed ``loss_*`` terms written into every
parameter's ``.grad``, without autograd.

The derivatives: ``d loss_objective / d log pi(a_n|s_n) = -ratio_n * A_n / N`` where the
unclipped term is the minimum (at a tie the ratio is inside the clip range, where both terms
have that derivative) and 0 elsewhere; ``d loss_critic / d V(s_n) = c_v (V(s_n) - V_target)
/ N`` (value clipping: that of the larger squared error); ``d loss_entropy / d H_n = -c_e /
N``. The agent's passes back-propagate them by hand (:mod:`rlplat.accel.actor_critic`).
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.accel.actor_critic import ActorCriticPasses, NumpyActorCritic
from rlplat.losses.ppo import PPOLoss, PPOTerms

OUTPUT_KEYS = (
    "loss_objective",
    "loss_critic",
    "loss_entropy",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "ratio",
)
"""The keys of PPO's loss output, in the order :class:`NumpyPPOGradients` computes them."""


class PPOGradients:
    """PPO's closed-form gradients in torch (any device; value clipping included; compilable).

    Args:
        loss: The loss (exactly :class:`PPOLoss`, over an agent that
            :class:`rlplat.accel.actor_critic.ActorCriticPasses` takes).
    """

    def __init__(self, loss: PPOLoss) -> None:
        self.loss = loss
        self.agent = ActorCriticPasses(loss.agent)

    def __call__(self, batch: TensorDict) -> TensorDict:
        """The loss output of an ``[N]`` minibatch (what ``loss(batch)`` returns, detached) and
        the gradients of its summed ``loss_*`` terms in every parameter's ``.grad`` (replaced).
        Call it outside autograd (``torch.inference_mode`` or ``torch.no_grad``)."""
        loss, agent, n = self.loss, self.agent, batch.batch_size[0]
        observation = batch[keys.OBSERVATION]
        log_prob, entropy, policy_saved = agent.log_prob_entropy_saving(observation, batch[keys.ACTION])
        value, value_saved = agent.value_saving(observation)  # [N, 1]
        advantage = loss.advantages(batch)  # [N]
        terms = loss.terms(batch, log_prob, entropy, advantage, value)
        unclipped = terms.pg_loss1 <= terms.pg_loss2  # [N] bool
        grad_log_prob = (advantage * unclipped).mul_(terms.ratio).mul_(-1.0 / n)  # [N]
        agent.policy_backward(policy_saved, grad_log_prob, -loss.entropy_coef / n)
        agent.value_backward(value_saved, self._value_error(batch, value, terms).mul_(loss.value_coef / n))
        return terms.output

    def _value_error(self, batch: TensorDict, value: Tensor, terms: PPOTerms) -> Tensor:
        """``[N, 1]`` d(sum_n of the value loss's squared errors / 2)/dV(s_n): ``V - V_target``,
        or with value clipping the derivative of the larger of the two squared errors
        (averaged at a tie, as ``torch.max``'s gradient is)."""
        value_target = batch[keys.VALUE_TARGET]
        error = value - value_target
        if terms.value_clipping is None:
            return error
        v_clipped, unclipped_sq, clipped_sq = terms.value_clipping
        inside = (value - batch[keys.STATE_VALUE]).abs() <= self.loss.value_clip  # clamp's gradient: 1 inside
        clipped_error = (v_clipped - value_target) * inside
        tie = (error + clipped_error) * 0.5
        return torch.where(unclipped_sq > clipped_sq, error, torch.where(unclipped_sq < clipped_sq, clipped_error, tie))


class NumpyPPOGradients:
    """:class:`PPOGradients` computed in numpy (without value clipping; every parameter
    float32 on the CPU): the same terms, diagnostics and gradients, to float32 rounding, with
    a fraction of torch's per-operation overhead (see :mod:`rlplat.accel.arrays`;
    ``benchmarks/speed.py`` at the settings of ``benchmarks/peers.py``'s PPO row times the
    updates).

    Args:
        loss: The loss, as for :class:`PPOGradients`, with ``value_clip`` None.
    """

    def __init__(self, loss: PPOLoss) -> None:
        self.loss = loss
        self.agent = NumpyActorCritic(loss.agent)

    def __call__(self, batch: TensorDict) -> TensorDict:
        """As :meth:`PPOGradients.__call__`."""
        loss, agent, n = self.loss, self.agent, batch.batch_size[0]
        observation = batch[keys.OBSERVATION].numpy()
        log_prob, entropy, policy_saved = agent.log_prob_entropy_saving(observation, batch[keys.ACTION].numpy())
        value, value_saved = agent.value_saving(observation)  # [N, 1]
        advantage = batch[keys.ADVANTAGE].numpy()[:, 0]  # [N]
        if loss.normalize_advantage and n > 1:  # as rlplat.losses.actor_critic.normalize
            advantage = (advantage - advantage.mean()) / (advantage.std(ddof=1) + 1e-8)
        log_ratio = log_prob - batch[keys.ACTION_LOG_PROB].numpy()
        ratio = np.exp(log_ratio)
        clipped_ratio = np.clip(ratio, 1.0 - loss.clip_epsilon, 1.0 + loss.clip_epsilon)
        pg_loss1, pg_loss2 = ratio * advantage, clipped_ratio * advantage
        error = value - batch[keys.VALUE_TARGET].numpy()  # [N, 1]
        entropy_mean = entropy.mean()
        terms = np.array(
            [
                -np.minimum(pg_loss1, pg_loss2).mean(),  # loss_objective
                (error * error).mean() * (0.5 * loss.value_coef),  # loss_critic: c_v * L^VF
                -loss.entropy_coef * entropy_mean,  # loss_entropy
                entropy_mean,
                ((ratio - 1.0) - log_ratio).mean(),  # approx_kl (rlplat.functional.kl_estimate)
                np.mean(ratio != clipped_ratio, dtype=np.float32),  # clip_fraction
                ratio.mean(),
            ],
            dtype=np.float32,
        )
        grad_log_prob = advantage * (pg_loss1 <= pg_loss2)  # where the unclipped term is the minimum
        grad_log_prob *= ratio
        grad_log_prob *= -1.0 / n
        agent.policy_backward(policy_saved, grad_log_prob, -loss.entropy_coef / n)
        error *= loss.value_coef / n
        agent.value_backward(value_saved, error)
        output = dict(zip(OUTPUT_KEYS, torch.from_numpy(terms).unbind()))
        return TensorDict({**output, **loss.rollout_diagnostics}, batch_size=[])
