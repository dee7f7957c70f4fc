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
from rlplat.losses.targets import TargetSchedule, frozen_copy
from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.actors import SquashedGaussianActor
from rlplat.networks.backward import gradient_of
from rlplat.networks.exploration import SquashedGaussianPolicy
from rlplat.networks.q import ContinuousQEnsemble, state_action_space
from rlplat.registry import ConfigError


class SACLoss(nn.Module):
    """Soft Q-learning with a reparameterised squashed Gaussian actor.

    ``y = r + gamma (1 - terminated) (min_k Q_target_k(s', a') - alpha log pi(a'|s'))``,
    ``a' ~ pi(.|s')``; ``loss_qvalue = 0.5 * sum_k mean((Q_k(s, a) - y)^2)``;
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
        analytic_gradients: Compute the gradients in closed form (:meth:`gradients`) where
            the networks allow it: MLP torsos with tanh or ReLU, the critics stacked;
            autograd otherwise, or when False.

    Attributes:
        in_keys: The keys of a batch the loss reads; the trainer buffers only these.
        analytic_gradients: Whether the trainer calls :meth:`gradients` instead of
            back-propagating :meth:`forward`'s terms.

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
        analytic_gradients: bool = True,
    ) -> None:
        super().__init__()
        check_unit_interval(gamma=gamma)
        if alpha_init <= 0:
            raise ConfigError(f"loss.alpha_init={alpha_init}: must be > 0")
        if num_critics < 1:
            raise ConfigError(f"loss.num_critics={num_critics}: must be at least 1")
        action_dim = int(action_space.shape[0])
        critic_space = state_action_space(observation_space, action_space)
        self.actor = SquashedGaussianActor(network, action_dim, features)
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
        self.analytic_gradients = analytic_gradients and self.actor.has_backward and self.critics.has_backward

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
        ``alpha``, ``entropy`` (of the squashed policy, estimated), ``q_mean``."""
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        alpha = self.log_alpha.exp().detach()
        noise = self._noise(action)
        with torch.no_grad():
            next_action, next_log_prob = self.actor(batch[keys.NEXT_OBSERVATION], noise=noise[1])
            target = self._target(batch, alpha, next_action, next_log_prob)
        q = self.critics(observation, action)  # [K, N, 1]
        new_action, log_prob = self.actor(observation, noise=noise[0])  # reparameterised
        q_new = self.critics(observation, new_action, frozen=True).min(0).values  # [N, 1]; critics not moved
        return self._terms(q, q - target, alpha, log_prob, q_new)

    @torch.inference_mode()
    def gradients(self, batch: TensorDict) -> TensorDict:
        """:meth:`forward`'s terms and diagnostics, without gradients, and the gradient of the
        summed ``loss_*`` terms written into every parameter's ``.grad`` (replaced), in
        closed form instead of by autograd (only when :attr:`analytic_gradients`).

        The derivatives: ``d loss_qvalue / d Q_k(s_n, a_n) = (Q_k - y_n) / N``;
        ``d loss_actor / d log pi(a~_n|s_n) = alpha / N`` and ``d loss_actor / d a~_n =
        -dQ_k*(s_n, a~_n)/da~ / N`` for the critic k* of the minimum (as torch.min's
        gradient picks); ``d loss_alpha / d log alpha = -mean(log pi + H_target)``. The
        networks back-propagate them by hand (:mod:`rlplat.networks.backward`), drawing the
        same noise as :meth:`forward`; the gradients equal autograd's to float rounding (tested).

        Runs under ``torch.inference_mode``, where torch's operations skip autograd's
        dispatch (no_grad only switches it off): at row 2's settings with 64 units,
        ``benchmarks/speed.py`` counts 10-12% more updates per second. A ``.grad`` it creates
        is an ordinary tensor (:func:`rlplat.networks.backward.gradient_of`).

        The actor acts on ``s`` and ``s'`` in one pass of ``2N`` rows (an update 4-9% faster
        than with two passes, at 32 to 256 units). The critics evaluate ``(s, a)`` and
        ``(s, a~)`` in two passes: one of ``2N`` rows was slower at 256 units (the layers'
        outputs outgrow the CPU's cache) and no faster at 32 and 64.

        Args:
            batch: ``[N]`` transitions, as for :meth:`forward`.

        Returns:
            What :meth:`forward` returns, detached.
        """
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        n = action.shape[0]
        alpha = self.log_alpha.exp()
        noise = self._noise(action).flatten(0, 1)  # [2N, A]
        # one pass of the actor: rows [:N] a~ ~ pi(.|s) for its loss, rows [N:] a' ~ pi(.|s') for the target
        actions, log_probs, actor_saved = self.actor.forward_saving(
            torch.cat([observation, batch[keys.NEXT_OBSERVATION]]), noise
        )
        new_action, log_prob = actions[:n], log_probs[:n]
        target = self._target(batch, alpha, actions[n:], log_probs[n:])

        q, q_saved = self.critics.forward_saving(observation, action)  # [K, N, 1]
        q_new_all, q_new_saved = self.critics.forward_saving(observation, new_action)  # [K, N, 1]
        q_new, critic_index = q_new_all.min(0)  # [N, 1]
        td_error = q - target  # [K, N, 1]
        output = self._terms(q, td_error, alpha, log_prob, q_new)

        self.critics.backward(q_saved, td_error.mul_(1.0 / n), action_grad=False)
        grad_q_new = torch.zeros_like(q_new_all).scatter_(0, critic_index.unsqueeze(0), -1.0 / n)
        grad_action = self.critics.backward(q_new_saved, grad_q_new, trained=False)  # [N, A]; critics held fixed
        assert grad_action is not None
        self.actor.backward(actor_saved.first(n), grad_action, alpha * (1.0 / n))
        if self.log_alpha.requires_grad:  # -mean(log pi + H_target) = entropy - H_target
            torch.sub(output["entropy"], self.target_entropy, out=gradient_of(self.log_alpha))
        return output

    def _noise(self, action: Tensor) -> Tensor:
        """``[2, N, A]`` standard normal draws: the new actions' (actor loss) and the next
        actions' (target), in one call so that :meth:`forward` and :meth:`gradients` draw alike."""
        return torch.randn(2, *action.shape, dtype=action.dtype, device=action.device)

    def _target(self, batch: TensorDict, alpha: Tensor, next_action: Tensor, next_log_prob: Tensor) -> Tensor:
        """``[N, 1]`` soft TD target ``r + gamma (1 - terminated) (min_k Q_target_k(s', a') -
        alpha log pi(a'|s'))`` for ``[N, A]`` a' ~ pi(.|s') and its ``[N]`` log pi; no gradients."""
        next_observation = batch[keys.NEXT_OBSERVATION]
        if self.analytic_gradients:  # the stacked critics' faster products, outside autograd
            next_q_all = self.critics_target.forward_saving(next_observation, next_action)[0]
        else:
            next_q_all = self.critics_target(next_observation, next_action)
        next_q = next_q_all.min(0).values  # [N, 1]
        soft_value = (next_q - alpha * next_log_prob.unsqueeze(-1)).masked_fill_(batch[keys.NEXT_TERMINATED], 0.0)
        return torch.add(batch[keys.NEXT_REWARD], soft_value, alpha=self.gamma)

    def _terms(self, q: Tensor, td_error: Tensor, alpha: Tensor, log_prob: Tensor, q_new: Tensor) -> TensorDict:
        """The loss output from ``[K, N, 1]`` Q(s, a) and TD errors ``Q(s, a) - y``, ``[N]`` log pi
        of the new actions and ``[N, 1]`` min_k Q_k(s, a~), through means of ``[N]`` values
        (one reduction each: ``mean(alpha log pi - Q) = alpha mean(log pi) - mean(Q)``)."""
        n = td_error.shape[1]
        errors = td_error.flatten()
        mean_log_prob = log_prob.mean()
        entropy = -mean_log_prob.detach()
        return TensorDict(
            {
                "loss_qvalue": errors.dot(errors) * (0.5 / n),  # sum over the K critics of their mean
                "loss_actor": alpha * mean_log_prob - q_new.mean(),
                "loss_alpha": self.log_alpha * (entropy - self.target_entropy),
                "alpha": alpha,
                "entropy": entropy,
                "q_mean": q.detach().mean(),
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
