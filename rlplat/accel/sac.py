"""SAC in closed form (:class:`rlplat.losses.sac.SACLoss`, exactly that class): its
gradients without autograd, and its actor acting in numpy.

The derivatives: ``d loss_qvalue / d Q_k(s_n, a_n) = w_n (Q_k - y_n) / N`` (``w_n`` a
prioritized replay's importance weight, 1 without);
``d loss_actor / d log pi(a~_n|s_n) = alpha / N`` and ``d loss_actor / d a~_n =
-dQ_k*(s_n, a~_n)/da~ / N`` for the critic k* of the minimum (as ``torch.min``'s gradient
picks); ``d loss_alpha / d log alpha = -mean(log pi + H_target)``. The networks'
passes back-propagate them by hand, drawing the same noise as the loss's forward.

Built only for an actor that is exactly :class:`rlplat.networks.actors.SquashedGaussianActor`
over an exact :class:`rlplat.networks.mlp.MLP` torso, and critics stacked in a
:class:`rlplat.networks.ensemble.StackedMLP`, with tanh or ReLU (:mod:`rlplat.accel.plan`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.accel.arrays import LinearArrays
from rlplat.accel.linear import gradient_of, layer_of, linear_backward
from rlplat.accel.mlp import MLPPasses, NumpyMLP, StackedPasses
from rlplat.collectors.base import ActFunction
from rlplat.losses.sac import SACLoss
from rlplat.networks.actors import (
    LOG_PROB_CONSTANT,
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
    squashed_gaussian_log_prob,
)
from rlplat.networks.ensemble import StackedMLP
from rlplat.networks.exploration import SquashedGaussianPolicy
from rlplat.networks.mlp import MLP


class ActorSaved(NamedTuple):
    """:meth:`SquashedGaussianPasses.forward_saving`: what its backward pass needs."""

    torso_outputs: list[Tensor]  # MLPPasses.forward_saving of the observation
    action: Tensor  # [N, A] tanh(u)
    spread: Tensor  # [N, A] sigma * noise
    inside: Tensor  # [N, A] bool, log sigma inside the clamp's range

    def first(self, n: int) -> ActorSaved:
        """The same for the first ``n`` rows (views), whose samples alone a loss trains on."""
        return ActorSaved([x[:n] for x in self.torso_outputs], self.action[:n], self.spread[:n], self.inside[:n])


class SquashedGaussianPasses:
    """The closed-form passes of a :class:`SquashedGaussianActor` in torch.

    Args:
        actor: The actor (see the module's docstring).
    """

    def __init__(self, actor: SquashedGaussianActor) -> None:
        assert type(actor.torso) is MLP
        self.torso = MLPPasses(actor.torso)
        self.mean, self.log_std = layer_of(actor.mean), layer_of(actor.log_std)

    def forward_saving(self, observation: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, ActorSaved]:
        """:meth:`SquashedGaussianActor.forward` without autograd, sampling with ``noise``.

        Returns:
            Action ``[N, A]``, log pi ``[N]``, and what :meth:`backward` needs.
        """
        outputs = self.torso.forward_saving(observation)
        h = outputs[-1]
        (mean_weight, mean_bias), (log_std_weight, log_std_bias) = self.mean, self.log_std
        mean = torch.addmm(mean_bias, h, mean_weight.t())
        log_std_raw = torch.addmm(log_std_bias, h, log_std_weight.t())
        log_std = log_std_raw.clamp(LOG_STD_MIN, LOG_STD_MAX)
        spread = noise * log_std.exp()  # u - mu = sigma * noise, also du/d log sigma
        u = mean + spread
        action = torch.tanh(u)
        inside = (log_std_raw >= LOG_STD_MIN) & (log_std_raw <= LOG_STD_MAX)  # clamp passes gradients here
        return action, squashed_gaussian_log_prob(u, log_std, noise), ActorSaved(outputs, action, spread, inside)

    def backward(self, saved: ActorSaved, grad_action: Tensor, grad_log_prob: Tensor) -> None:
        """Set the ``.grad`` of the actor's parameters (replaced) from ``[N, A]`` dL/da and
        dL/d log pi(a_n|s_n) (a 0-dim tensor, one value for every n) of the reparameterised
        sample.

        With ``a = tanh(u)``, ``u = mu + sigma * noise`` (:func:`squashed_gaussian_log_prob`):
        ``d log pi / du = 2 tanh(u)`` (the tanh correction's derivative), ``d log pi / d log
        sigma = -1`` directly, ``du / d log sigma = sigma * noise``; the clamp of log sigma
        passes gradients only inside its range.
        """
        outputs, action, spread, inside = saved
        grad_u = torch.addcmul(grad_action * (1.0 - action * action), action, grad_log_prob, value=2.0)  # [N, A]
        grad_log_std = (grad_u * spread - grad_log_prob) * inside
        h = outputs[-1]
        grad_h = linear_backward(self.mean, h, grad_u).add_(linear_backward(self.log_std, h, grad_log_std))
        self.torso.backward(outputs, grad_h)


class SACGradients:
    """SAC's closed-form gradients in torch (any device; compilable).

    The actor acts on ``s`` and ``s'`` in one pass of ``2N`` rows (an update 4-9% faster
    than with two passes, at 32 to 256 units). The critics evaluate ``(s, a)`` and ``(s,
    a~)`` in two passes: one of ``2N`` rows was slower at 256 units (the layers' outputs
    outgrow the CPU's cache) and no faster at 32 and 64.

    Args:
        loss: The loss (see the module's docstring).
    """

    def __init__(self, loss: SACLoss) -> None:
        assert isinstance(loss.critics.stacked, StackedMLP)
        self.loss = loss
        self.actor = SquashedGaussianPasses(loss.actor)
        self.critics = StackedPasses(loss.critics.stacked)

    def __call__(self, batch: TensorDict) -> TensorDict:
        """The loss output of ``[N]`` transitions (what ``loss(batch)`` returns, detached, from
        the same random draws) and the gradients of its summed ``loss_*`` terms in every
        parameter's ``.grad`` (replaced). Call it outside autograd."""
        loss = self.loss
        observation, action = batch[keys.OBSERVATION], batch[keys.ACTION]
        n = action.shape[0]
        alpha = loss.log_alpha.exp()
        noise = loss.noise(action).flatten(0, 1)  # [2N, A]
        # one pass of the actor: rows [:N] a~ ~ pi(.|s) for its loss, rows [N:] a' ~ pi(.|s') for the target
        actions, log_probs, actor_saved = self.actor.forward_saving(
            torch.cat([observation, batch[keys.NEXT_OBSERVATION]]), noise
        )
        new_action, log_prob = actions[:n], log_probs[:n]
        target = loss.target(batch, alpha, actions[n:], log_probs[n:])

        q_saved = self.critics.forward_saving(_state_action(observation, action))
        q_new_saved = self.critics.forward_saving(_state_action(observation, new_action))
        q, q_new_all = q_saved[-1], q_new_saved[-1]  # [K, N, 1] each
        q_new, critic_index = q_new_all.min(0)  # [N, 1]
        td_error = q - target  # [K, N, 1]
        weight = batch.get(keys.IMPORTANCE_WEIGHT, None)  # [N], from a prioritized replay
        output = loss.terms(q, td_error, alpha, log_prob, q_new, weight)

        # d loss_qvalue / d Q_k(s_n, a_n) = w_n (Q_k - y_n) / N, w_n = 1 without weights
        grad_q = td_error.mul_(1.0 / n) if weight is None else td_error.mul_(weight.unsqueeze(-1) * (1.0 / n))
        self.critics.backward(q_saved, grad_q)
        grad_q_new = torch.zeros_like(q_new_all).scatter_(0, critic_index.unsqueeze(0), -1.0 / n)
        grad_input = self.critics.backward(q_new_saved, grad_q_new, trained=False, input_grad=True)  # critics fixed
        assert grad_input is not None
        grad_action = grad_input[..., -action.shape[-1] :].sum(0)  # [K, N, obs + A] -> [N, A]
        self.actor.backward(actor_saved.first(n), grad_action, alpha * (1.0 / n))
        if loss.log_alpha.requires_grad:  # -mean(log pi + H_target) = entropy - H_target
            torch.sub(output["entropy"], loss.target_entropy, out=gradient_of(loss.log_alpha))
        return output


def _state_action(observation: Tensor, action: Tensor) -> Tensor:
    """The critics' input, as :meth:`rlplat.networks.q.ContinuousQEnsemble.forward` forms it."""
    return torch.cat([observation.flatten(1), action], dim=-1)


class NumpySACPolicy:
    """SAC's acting policy (:class:`SquashedGaussianPolicy`) with its actor computed in numpy:
    uniform actions while warming up, counted by the policy itself, then the actor's samples
    drawn as :meth:`SquashedGaussianActor.forward` draws them (``torch.randn`` of the mean's
    shape): the same random numbers, and the same values to float32 rounding.

    Args:
        policy: The policy (exactly :class:`SquashedGaussianPolicy`; its actor as the module's
            docstring says, float32 on the CPU).
    """

    def __init__(self, policy: SquashedGaussianPolicy) -> None:
        assert type(policy.actor.torso) is MLP
        self.policy = policy
        self.torso = NumpyMLP(policy.actor.torso)
        self.mean, self.log_std = LinearArrays(policy.actor.mean), LinearArrays(policy.actor.log_std)

    def act(self, observation: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """As :meth:`SquashedGaussianPolicy.act`."""
        return self.act_function(deterministic)(observation)

    def act_function(self, deterministic: bool = False) -> ActFunction:
        """:meth:`act` with ``deterministic`` bound (see
        :func:`rlplat.collectors.base.act_function`): uniform actions while the policy warms
        up, then :meth:`actor_function`'s."""
        policy, actor = self.policy, self.actor_function(deterministic)

        def act(observation: Tensor) -> tuple[Tensor, Tensor]:
            if not deterministic:
                random = policy.warmup_action(observation)
                if random is not None:
                    return random, torch.zeros(observation.shape[0])
            return actor(observation)

        return act

    def actor_function(self, deterministic: bool = False) -> ActFunction:
        """The actor's ``forward(observation, deterministic)`` (action and log pi, without
        ``noise``) in numpy: ``[N, *obs]`` float32 -> ``[N, A]`` and ``[N]`` tensors."""
        torso, mean, log_std_layer = self.torso, self.mean, self.log_std

        def act(observation: Tensor) -> tuple[Tensor, Tensor]:
            h = torso.forward(observation.numpy())
            u = h @ mean.weight_t
            u += mean.bias
            log_std = h @ log_std_layer.weight_t
            log_std += log_std_layer.bias
            np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX, out=log_std)
            if deterministic:
                noise = np.zeros_like(u)
            else:
                noise = torch.randn(u.shape, dtype=torch.float32).numpy()
                u += noise * np.exp(log_std)  # mean + sigma * noise
            # squashed_gaussian_log_prob; softplus(x) = log(1 + e^x) = logaddexp(0, x)
            log_density = 2.0 * (u + np.logaddexp(0.0, -2.0 * u)) - (log_std + 0.5 * noise * noise)
            log_prob = log_density.sum(-1) - u.shape[-1] * LOG_PROB_CONSTANT
            return torch.from_numpy(np.tanh(u)), torch.from_numpy(log_prob.astype(np.float32, copy=False))

        return act
