"""PPO with an adaptive KL penalty (Schulman et al. 2017, "Proximal Policy Optimization
Algorithms", section 4)."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from tensordict import NestedKey, TensorDict
from torch import Tensor
from torch.nn import functional as F

from rlplat import keys
from rlplat.functional import kl_estimate
from rlplat.losses.actor_critic import ActorCriticLoss
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.registry import check_positive

_KEPT: tuple[NestedKey, ...] = (keys.OBSERVATION, keys.ACTION, keys.ACTION_LOG_PROB)
"""The keys of the latest rollout that beta's next adaptation reads (:meth:`PPOKLLoss.policy_kl`)."""


class PPOKLLoss(ActorCriticLoss):
    """``L^KLPEN = -mean(ratio * A - beta * KL[pi_old, pi])``, plus value loss and entropy.

    KL is estimated per sample as ``(ratio - 1) - log(ratio)`` (non-negative, unbiased).
    After each policy update (one rollout's epochs), d is that estimate between the policy
    that collected the rollout and the updated one, over the whole rollout; then
    ``beta <- beta / 2`` if ``d < kl_target / 1.5`` and ``beta <- beta * 2`` if
    ``d > kl_target * 1.5`` (the paper's rule). d is measured when the next rollout is
    preprocessed, before the next update.

    Args:
        observation_space: Supplied by rlplat.
        action_space: Box or Discrete, supplied by rlplat.
        network: Torso factory, supplied by rlplat.
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        kl_target: Target KL d_targ per policy update, in nats.
        kl_beta_init: Initial penalty coefficient beta.
        normalize_advantage: Normalise advantages per minibatch.
        entropy_coef: Weight of the entropy bonus.
        value_coef: Weight of the value loss.
        features: Width of the torso output the heads read.
        share_torso: One torso for actor and critic.
        log_std_init: Initial log std of the Gaussian policy.

    Raises:
        ConfigError: for gamma or gae_lambda outside [0, 1], kl_target <= 0 or kl_beta_init <= 0.
    """

    kl_beta: Tensor  # buffer, float32 []: the penalty coefficient beta
    in_keys = (*ActorCriticLoss.in_keys, keys.ACTION_LOG_PROB)

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        kl_target: float = 0.01,
        kl_beta_init: float = 1.0,
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
        check_positive("loss.kl_target", kl_target, note="nats")
        check_positive("loss.kl_beta_init", kl_beta_init)  # beta adapts by halving and doubling: from 0 it would stay 0
        self.kl_target = kl_target
        self.register_buffer("kl_beta", torch.tensor(float(kl_beta_init)))
        self._previous: TensorDict | None = None  # the rollout of the latest update
        self.register_load_state_dict_pre_hook(_previous_default)
        # a recurrent agent runs over the rollout's episodes from the collector's states
        self._kept: tuple[NestedKey, ...] = _KEPT + ((keys.RECURRENT_STATE, keys.NEXT_DONE) if self.recurrent else ())

    def adapt_beta(self, kl: float) -> None:
        """The paper's rule: halve beta below ``kl_target / 1.5``, double it above ``* 1.5``."""
        if kl < self.kl_target / 1.5:
            self.kl_beta /= 2.0
        elif kl > self.kl_target * 1.5:
            self.kl_beta *= 2.0

    @torch.no_grad()
    def policy_kl(self, rollout: TensorDict) -> float:
        """Mean KL estimate between the policy that collected ``rollout`` and the current one."""
        data, log_prob = self.rollout_log_prob(rollout)
        log_ratio = log_prob - data[keys.ACTION_LOG_PROB]
        return kl_estimate(log_ratio).mean().item()

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Adapt beta from the KL of the latest update, then add GAE to the rollout."""
        if self._previous is not None:
            self.adapt_beta(self.policy_kl(self._previous))
        self._previous = rollout.select(*self._kept)
        return super().preprocess(rollout)

    def get_extra_state(self) -> dict[str, Tensor]:
        """The latest update's rollout as :meth:`preprocess` keeps it (observations, actions,
        their log-probabilities, each ``[T, B, ...]``; empty before the first), checkpointed:
        a resumed run adapts beta from it, as one that never stopped."""
        if self._previous is None:
            return {}
        return {_name(key): self._previous.get(key).clone() for key in self._kept}

    def set_extra_state(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`get_extra_state`."""
        if not state:
            self._previous = None
            return
        kept = {key: state[_name(key)].clone() for key in self._kept}
        self._previous = TensorDict(kept, batch_size=kept[keys.ACTION_LOG_PROB].shape)

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` batch (``[N, P]`` sequences for a recurrent agent) -> ``loss_objective``
        (surrogate + KL penalty), ``loss_critic``, ``loss_entropy``; diagnostics ``kl``,
        ``kl_beta``, ``entropy``, ``explained_variance``, ``value_mean``."""
        batch, log_prob, entropy, advantage, value = self.policy_value_terms(batch)  # [M] each, value [M, 1]
        log_ratio = log_prob - batch[keys.ACTION_LOG_PROB]
        ratio = log_ratio.exp()
        kl = kl_estimate(log_ratio, ratio).mean()
        pg_loss = -(ratio * advantage).mean() + self.kl_beta * kl
        v_loss = 0.5 * F.mse_loss(value, batch[keys.VALUE_TARGET])
        return self.loss_output(pg_loss, v_loss, entropy, kl=kl.detach(), kl_beta=self.kl_beta.clone())


def _name(key: NestedKey) -> str:
    """A key as one string (``next.done``): a checkpoint's extra state is keyed by strings."""
    return key if isinstance(key, str) else ".".join(str(part) for part in key)


def _previous_default(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A checkpoint written before :class:`PPOKLLoss` saved its rollout has none: beta adapts
    from the next (a load-state pre-hook; ``load_state_dict`` hands it its own copy)."""
    state_dict.setdefault(prefix + "_extra_state", {})
