"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications": twin Q, tanh-squashed Gaussian, automatic entropy temperature)."""

from __future__ import annotations

from typing import cast

import gymnasium
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlplat import keys
from rlplat.losses.actor_critic import check_unit_interval
from rlplat.losses.base import LossModule
from rlplat.losses.targets import TargetSchedule, frozen_copy
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.actors import SquashedGaussianActor
from rlplat.networks.exploration import SquashedGaussianPolicy
from rlplat.networks.q import ContinuousQEnsemble, encodes_observations, state_action_space
from rlplat.registry import ConfigError, check_at_least, check_positive


class SACLoss(LossModule):
    """Soft Q-learning with a reparameterised squashed Gaussian actor.

    ``y = r + gamma (1 - terminated) (min_k Q_target_k(s', a') - alpha log pi(a'|s'))``,
    ``a' ~ pi(.|s')``; ``loss_qvalue = 0.5 * sum_k mean((Q_k(s, a) - y)^2)`` (with a prioritized
    replay's importance weights ``0.5 * sum_k mean(w (Q_k(s, a) - y)^2)``, Schaul et al. 2016);
    ``loss_actor = mean(alpha log pi(a~|s) - min_k Q_k(s, a~))`` (critics frozen);
    ``loss_alpha = -mean(log alpha * (log pi(a~|s) + H_target))`` (eq. 18).

    Args:
        observation_space: Box, supplied by rlplat.
        action_space: Box, supplied by rlplat.
        network: Torso factory, supplied by rlplat (critics get the state-action space).
        gamma: Discount factor.
        tau: Polyak coefficient of the target critics, updated after every update.
        alpha_init: Initial entropy temperature alpha.
        learn_alpha: Tune alpha towards ``target_entropy``; False keeps ``alpha_init``.
        target_entropy: Target entropy H_target in nats; null (or ``"auto"``) gives ``-action_dim``.
        num_critics: Critics K; targets and actor use their minimum.
        warmup_frames: Frames of uniform random actions at the start.
        features: Width of each torso output.

    Attributes:
        in_keys: The keys of a batch the loss reads; the trainer buffers only these.

    Raises:
        ConfigError: for a non-Box action space or an invalid coefficient.
    """

    action_spaces = (gymnasium.spaces.Box,)
    on_policy = False
    sequence_length = 1
    in_keys = (keys.OBSERVATION, keys.ACTION, keys.NEXT_OBSERVATION, keys.NEXT_REWARD, keys.NEXT_TERMINATED)

    def __init__(
        self,
        observation_space: gymnasium.spaces.Box,
        action_space: gymnasium.spaces.Box,
        network: NetworkFactory,
        *,
        gamma: float = 0.99,
        tau: float = 0.005,
        alpha_init: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | str | None = None,
        num_critics: int = 2,
        warmup_frames: int = 1000,
        features: int = 256,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma)
        check_positive("loss.alpha_init", alpha_init)
        check_at_least("loss.num_critics", num_critics)
        action_dim = int(action_space.shape[0])
        self.actor = SquashedGaussianActor(network, action_dim, features)
        if encodes_observations(observation_space):  # images, dictionaries: encoded, then the action joins
            self.critics = ContinuousQEnsemble(network, num_critics, features, action_dim)
        else:
            critic_space = state_action_space(observation_space, action_space)
            self.critics = ContinuousQEnsemble(lambda out: network(out, critic_space), num_critics, features)
        self.critics_target = frozen_copy(self.critics)
        self.policy = SquashedGaussianPolicy(self.actor, action_dim, warmup_frames)
        self.log_alpha = nn.Parameter(torch.tensor(float(alpha_init)).log(), requires_grad=learn_alpha)
        if isinstance(target_entropy, str) and target_entropy != "auto":
            raise ConfigError(
                f"loss.target_entropy={target_entropy!r}: give a number of nats, or null (or auto) for -action_dim"
            )
        # "auto": Stable-Baselines3's word for it
        automatic = target_entropy is None or isinstance(target_entropy, str)
        self.target_entropy = float(-action_dim if automatic else cast(float, target_entropy))
        self.targets = TargetSchedule(tau, 1, (self.critics_target, self.critics))
        self.gamma = gamma

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """``actor``: the squashed Gaussian policy; ``critic``: the Q ensemble;
        ``temperature``: log alpha (takes no gradient when ``learn_alpha`` is false)."""
        return {
            "actor": list(self.actor.parameters()),
            "critic": list(self.critics.parameters()),
            "temperature": [self.log_alpha],
        }

    def preprocess(self, rollout: TensorDict) -> TensorDict:
        """Nothing to add: targets are computed from the sampled transitions."""
        return rollout

    def forward(self, batch: TensorDict) -> TensorDict:
        """``[N]`` transitions -> ``loss_qvalue``, ``loss_actor``, ``loss_alpha``; diagnostics
        ``alpha``, ``entropy`` (of the squashed policy, estimated), ``q_mean``; ``td_error``,
        ``[N]`` float32 ``max_k |Q_k(s, a) - y|`` (detached), for a prioritized replay. A batch
        with ``weight`` (``[N]``) weights each sample's critic loss."""
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        alpha = self.log_alpha.exp().detach()
        noise = self.noise(action)
        with torch.no_grad():
            next_action, next_log_prob = self.actor(batch[keys.NEXT_OBSERVATION], noise=noise[1])
            target = self.target(batch, alpha, next_action, next_log_prob)
        q = self.critics(observation, action)  # [K, N, 1]
        new_action, log_prob = self.actor(observation, noise=noise[0])  # reparameterised
        q_new = self.critics(observation, new_action, frozen=True).min(0).values  # [N, 1]; critics not moved
        return self.terms(q, q - target, alpha, log_prob, q_new, batch.get(keys.IMPORTANCE_WEIGHT, None))

    def noise(self, action: Tensor) -> Tensor:
        """``[2, N, A]`` standard normal draws for ``[N, A]`` actions: the new actions' (actor
        loss) and the next actions' (target), in one call."""
        return torch.randn(2, *action.shape, dtype=action.dtype, device=action.device)

    def target(self, batch: TensorDict, alpha: Tensor, next_action: Tensor, next_log_prob: Tensor) -> Tensor:
        """``[N, 1]`` soft TD target ``r + gamma (1 - terminated) (min_k Q_target_k(s', a') -
        alpha log pi(a'|s'))`` for ``[N, A]`` a' ~ pi(.|s') and its ``[N]`` log pi; no gradients."""
        next_q = self.critics_target(batch[keys.NEXT_OBSERVATION], next_action).min(0).values  # [N, 1]
        soft_value = (next_q - alpha * next_log_prob.unsqueeze(-1)).masked_fill_(batch[keys.NEXT_TERMINATED], 0.0)
        return torch.add(batch[keys.NEXT_REWARD], soft_value, alpha=self.gamma)

    def terms(
        self, q: Tensor, td_error: Tensor, alpha: Tensor, log_prob: Tensor, q_new: Tensor, weight: Tensor | None = None
    ) -> TensorDict:
        """The loss output from ``[K, N, 1]`` Q(s, a) and TD errors ``Q(s, a) - y``, ``[N]`` log pi
        of the new actions and ``[N, 1]`` min_k Q_k(s, a~), through means of ``[N]`` values
        (one reduction each: ``mean(alpha log pi - Q) = alpha mean(log pi) - mean(Q)``); with
        ``[N]`` importance weights, the critics' squared errors weighted by them."""
        n = td_error.shape[1]
        errors = td_error.flatten()
        # sum over the K critics of their mean: errors . errors, or errors . (w errors)
        weighted = errors if weight is None else (td_error.squeeze(-1) * weight).flatten()
        mean_log_prob = log_prob.mean()
        entropy = -mean_log_prob.detach()
        return TensorDict(
            {
                "loss_qvalue": errors.dot(weighted) * (0.5 / n),
                "loss_actor": alpha * mean_log_prob - q_new.mean(),
                "loss_alpha": self.log_alpha * (entropy - self.target_entropy),
                "alpha": alpha,
                "entropy": entropy,
                "q_mean": q.detach().mean(),
                keys.TD_ERROR: td_error.detach().abs().amax(0).squeeze(-1),  # [N]
            },
            batch_size=[],
        )

    def get_extra_state(self) -> dict[str, int]:
        """Gradient updates counted by the target schedule (checkpointed with the networks)."""
        return {"target_updates": self.targets.updates}

    def set_extra_state(self, state: dict[str, int]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.targets.updates = int(state["target_updates"])

    def after_update(self) -> None:
        """Polyak-update the target critics."""
        self.targets.step()
