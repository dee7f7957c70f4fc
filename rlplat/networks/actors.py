"""Actors for Box actions in the normalised space [-1, 1]: deterministic (DDPG, TD3) and
tanh-squashed Gaussian (SAC)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlplat.networks.actor_critic import NetworkFactory
from rlplat.networks.backward import linear_backward, weight_and_bias
from rlplat.networks.mlp import MLP, numpy_linear

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_LOG_PROB_CONSTANT = 2.0 * math.log(2.0) + 0.5 * math.log(2.0 * math.pi)  # per action dim


class DeterministicActor(nn.Module):
    """mu(s) = tanh(W h(s)): ``[N, *obs] -> [N, A]`` in [-1, 1]."""

    def __init__(self, network: NetworkFactory, action_dim: int, features: int) -> None:
        super().__init__()
        self.torso = network(features)
        self.mean = nn.Linear(features, action_dim)

    def forward(self, observation: Tensor) -> Tensor:
        return torch.tanh(F.linear(self.torso(observation), self.mean.weight, self.mean.bias))


class SquashedGaussianActor(nn.Module):
    """a = tanh(u), u ~ N(mu(s), sigma(s)) (Haarnoja et al. 2018, appendix C).

    ``log pi(a|s) = log N(u) - sum log(1 - tanh(u)^2)``, the second term computed stably as
    ``2 * (log 2 - u - softplus(-2u))``.
    """

    def __init__(self, network: NetworkFactory, action_dim: int, features: int) -> None:
        super().__init__()
        self.torso = network(features)
        self.mean = nn.Linear(features, action_dim)
        self.log_std = nn.Linear(features, action_dim)

    def forward(
        self, observation: Tensor, deterministic: bool = False, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``[N, *obs]`` -> action ``[N, A]`` in (-1, 1) (reparameterised) and log pi ``[N]``.

        Args:
            observation: ``[N, *obs]`` float32.
            deterministic: Take ``u = mu(s)`` instead of sampling.
            noise: ``[N, A]`` standard normal draws for ``u = mu + sigma * noise``; None draws them.
        """
        h = self.torso(observation)
        mean = F.linear(h, self.mean.weight, self.mean.bias)
        log_std = F.linear(h, self.log_std.weight, self.log_std.bias).clamp(LOG_STD_MIN, LOG_STD_MAX)
        if deterministic:
            noise = torch.zeros_like(mean)
        elif noise is None:
            noise = torch.randn_like(mean)
        u = mean + noise * log_std.exp()
        return torch.tanh(u), squashed_gaussian_log_prob(u, log_std, noise)

    def numpy_act_function(self, deterministic: bool = False) -> Callable[[np.ndarray], tuple[Tensor, Tensor]] | None:
        """:meth:`forward` (without ``noise``) for acting on the CPU, computed in numpy but for
        the noise, drawn as :meth:`forward` draws it (``torch.randn`` of the mean's shape):
        the same random numbers, and the same values to float32 rounding. At one env step's
        batch numpy's operations cost a fraction of torch's (see
        :meth:`rlplat.networks.actor_critic.ActorCritic.act_function`).

        Returns:
            ``[N, *obs]`` float32 array -> action ``[N, A]`` and log pi ``[N]`` tensors, valid
            until the next parameter update; None unless the torso is an
            :class:`rlplat.networks.mlp.MLP` with a numpy forward pass and the parameters are
            float32 on the CPU.
        """
        numpy_forward = getattr(self.torso, "numpy_forward_function", None)
        torso = None if numpy_forward is None else numpy_forward()
        mean_layer, log_std_layer = numpy_linear(self.mean), numpy_linear(self.log_std)
        if torso is None or mean_layer is None or log_std_layer is None:
            return None
        features = torso
        (mean_weight, mean_bias), (log_std_weight, log_std_bias) = mean_layer, log_std_layer

        def act(observation: np.ndarray) -> tuple[Tensor, Tensor]:
            h = features(observation)
            u = h @ mean_weight
            u += mean_bias
            log_std = h @ log_std_weight
            log_std += log_std_bias
            np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX, out=log_std)
            if deterministic:
                noise = np.zeros_like(u)
            else:
                noise = torch.randn(u.shape, dtype=torch.float32).numpy()
                u += noise * np.exp(log_std)  # mean + sigma * noise
            # squashed_gaussian_log_prob; softplus(x) = log(1 + e^x) = logaddexp(0, x)
            log_density = 2.0 * (u + np.logaddexp(0.0, -2.0 * u)) - (log_std + 0.5 * noise * noise)
            log_prob = log_density.sum(-1) - u.shape[-1] * _LOG_PROB_CONSTANT
            return torch.from_numpy(np.tanh(u)), torch.from_numpy(log_prob.astype(np.float32, copy=False))

        return act

    @property
    def has_backward(self) -> bool:
        """Whether :meth:`forward_saving` and :meth:`backward` apply: an
        :class:`rlplat.networks.mlp.MLP` torso with tanh or ReLU."""
        return type(self.torso) is MLP and self.torso.has_backward

    def forward_saving(self, observation: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, _ActorSaved]:
        """:meth:`forward` without autograd (when :attr:`has_backward`), sampling with ``noise``.

        Returns:
            Action ``[N, A]``, log pi ``[N]``, and what :meth:`backward` needs.
        """
        torso = cast(MLP, self.torso)
        outputs = torso.forward_saving(observation)
        h = outputs[-1]
        mean_weight, mean_bias = weight_and_bias(self.mean)
        log_std_weight, log_std_bias = weight_and_bias(self.log_std)
        mean = torch.addmm(mean_bias, h, mean_weight.t())
        log_std_raw = torch.addmm(log_std_bias, h, log_std_weight.t())
        log_std = log_std_raw.clamp(LOG_STD_MIN, LOG_STD_MAX)
        spread = noise * log_std.exp()  # u - mu = sigma * noise, also du/d log sigma
        u = mean + spread
        action = torch.tanh(u)
        inside = (log_std_raw >= LOG_STD_MIN) & (log_std_raw <= LOG_STD_MAX)  # clamp passes gradients here
        return action, squashed_gaussian_log_prob(u, log_std, noise), _ActorSaved(outputs, action, spread, inside)

    def backward(self, saved: _ActorSaved, grad_action: Tensor, grad_log_prob: Tensor) -> None:
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
        cast(MLP, self.torso).backward(outputs, grad_h)


class _ActorSaved(NamedTuple):
    """:meth:`SquashedGaussianActor.forward_saving`: what its backward pass needs."""

    torso_outputs: list[Tensor]  # MLP.forward_saving of the observation
    action: Tensor  # [N, A] tanh(u)
    spread: Tensor  # [N, A] sigma * noise
    inside: Tensor  # [N, A] bool, log sigma inside the clamp's range

    def first(self, n: int) -> _ActorSaved:
        """The same for the first ``n`` rows (views), whose samples alone a loss trains on."""
        return _ActorSaved([x[:n] for x in self.torso_outputs], self.action[:n], self.spread[:n], self.inside[:n])


def squashed_gaussian_log_prob(u: Tensor, log_std: Tensor, noise: Tensor) -> Tensor:
    """log-density of ``tanh(u)`` for ``u = mean + exp(log_std) * noise``, ``noise ~ N(0, I)``:
    ``[N, A]`` each -> ``[N]``.

    Per dim, ``log N(u; mean, sigma) = -noise^2 / 2 - log_std - log(2 pi) / 2`` (from the
    draw itself, which ``(u - mean) / sigma`` only recomputes with rounding) and the tanh
    correction ``-log(1 - tanh(u)^2) = 2 (u + softplus(-2u) - log 2)``, stable for large |u|.
    """
    log_density = 2.0 * (u + F.softplus(-2.0 * u)) - torch.addcmul(log_std, noise, noise, value=0.5)
    return log_density.sum(-1) - u.shape[-1] * _LOG_PROB_CONSTANT
