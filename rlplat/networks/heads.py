"""Policy heads: features -> action distribution, for Box and Discrete action spaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.functional import (
    HALF_LOG_2PI,
    categorical_entropy,
    categorical_log_prob,
    normal_entropy,
    normal_log_prob,
    normal_mode_log_prob,
    normal_mode_log_prob_entropy,
    standard_normal_log_prob,
)
from rlplat.networks.backward import linear_backward, weight_and_bias, write_grad
from rlplat.networks.numpy_passes import grad_array, numpy_linear, numpy_linear_backward, parameter_array

HeadSaved = tuple[Tensor, ...]
"""What a head's ``log_prob_entropy_saving`` keeps for its ``backward``."""

NumpySaved = tuple[np.ndarray, ...]
"""What a head's ``numpy_log_prob_entropy_saving`` keeps for its ``numpy_backward``."""

NumpyActFunction = Callable[[np.ndarray], tuple[Tensor, Tensor]]
"""``[N, F]`` float32 features as a numpy array -> ``(action, log_prob)`` tensors, as a head's
``act_function`` returns them."""


def _linear(in_features: int, out_features: int, gain: float) -> nn.Linear:
    linear = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(linear.weight, gain=gain)
    nn.init.zeros_(linear.bias)
    return linear


class GaussianHead(nn.Module):
    """Diagonal Gaussian over Box actions, with a state-independent learned log std.

    Actions live in the normalised space where ``[-1, 1]`` spans the env's bounds; the
    env adapter clips and rescales them, so sampled actions respect the bounds while the
    log-probability stays that of the unclipped sample (as in Stable-Baselines3 and CleanRL).

    Args:
        in_features: Width of the torso features.
        action_dim: Number of action dims.
        log_std_init: Initial log standard deviation (0 gives std 1, the full half-range).
    """

    def __init__(self, in_features: int, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.mean = _linear(in_features, action_dim, gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def sample(self, features: Tensor, deterministic: bool) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features -> ``[N, action_dim]`` action and ``[N]`` log-probability."""
        return self.act_function(deterministic)(features)

    def act_function(self, deterministic: bool) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
        """:meth:`sample` with ``deterministic`` bound and what depends on the parameters
        alone (the mean layer's transposed weight, the std, the mode's log-density) computed
        now: valid, without gradients, until the next parameter update (see
        :func:`rlplat.collectors.base.act_function`)."""
        weight, bias = self.mean.weight.t(), self.mean.bias
        mode_log_prob = normal_mode_log_prob(self.log_std)  # [], log N(mean | mean, std)
        if deterministic:

            def mode(features: Tensor) -> tuple[Tensor, Tensor]:
                mean = torch.addmm(bias, features, weight)  # F.linear for [N, F] features
                return mean, mode_log_prob.expand(mean.shape[:-1])

            return mode
        std = self.log_std.exp()

        def sample(features: Tensor) -> tuple[Tensor, Tensor]:
            mean = torch.addmm(bias, features, weight)
            noise = torch.randn_like(mean)
            action = torch.addcmul(mean, noise, std)  # mean + noise * std
            return action, standard_normal_log_prob(noise, mode_log_prob)

        return sample

    def numpy_act_function(self, deterministic: bool) -> NumpyActFunction | None:
        """:meth:`act_function` on numpy features (from
        :meth:`rlplat.networks.mlp.MLP.numpy_forward_function`), computed in numpy but for the
        noise, drawn as :meth:`act_function` draws it (``torch.randn`` of the mean's shape):
        the same random numbers, and the same values to float32 rounding.

        Returns:
            The function, or None unless the parameters are float32 on the CPU.
        """
        layer = numpy_linear(self.mean)
        if layer is None:
            return None
        weight, bias = layer
        mode_log_prob = normal_mode_log_prob(self.log_std.detach())  # [], log N(mean | mean, std)
        if deterministic:

            def mode(features: np.ndarray) -> tuple[Tensor, Tensor]:
                mean = features @ weight
                mean += bias
                return torch.from_numpy(mean), mode_log_prob.expand(len(mean))

            return mode
        std = self.log_std.detach().exp().numpy()
        mode_value = mode_log_prob.numpy()

        def sample(features: np.ndarray) -> tuple[Tensor, Tensor]:
            action = features @ weight
            action += bias
            noise = torch.randn(action.shape, dtype=torch.float32).numpy()
            action += noise * std  # mean + noise * std
            log_prob = mode_value - 0.5 * np.einsum("ij,ij->i", noise, noise)  # standard_normal_log_prob
            return torch.from_numpy(action), torch.from_numpy(log_prob)

        return sample

    def log_prob_entropy(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features, ``[N, action_dim]`` actions -> ``[N]`` log-prob and entropy."""
        mean = F.linear(features, self.mean.weight, self.mean.bias)
        entropy = normal_entropy(self.log_std).expand(mean.shape[:-1])
        return normal_log_prob(action, mean, self.log_std), entropy

    def log_prob_entropy_saving(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor, HeadSaved]:
        """:meth:`log_prob_entropy` without autograd, keeping what :meth:`backward` needs."""
        weight, bias = weight_and_bias(self.mean)
        log_std = self.log_std
        mean = torch.addmm(bias, features, weight.t())  # F.linear for [N, F] features
        inv_std = (-log_std).exp()
        z = (action - mean) * inv_std  # [N, action_dim] standardised actions
        mode_log_prob, entropy = normal_mode_log_prob_entropy(log_std)
        log_prob = standard_normal_log_prob(z, mode_log_prob)
        return log_prob, entropy.expand(mean.shape[:-1]), (features, z, inv_std)

    def backward(self, saved: HeadSaved, grad_log_prob: Tensor, grad_entropy: float = 0.0) -> Tensor:
        """Set the mean layer's and ``log_std``'s ``.grad`` (replaced) from dL/d log pi(a|s)
        and dL/dH: ``d log pi / d mean = z / std``, ``d log pi / d log_std = z^2 - 1`` and
        ``dH / d log_std = 1`` per action dim, with ``z = (a - mean) / std``.

        Args:
            saved: What :meth:`log_prob_entropy_saving` returned for this minibatch.
            grad_log_prob: ``[N]`` float, dL/d log pi(a_n|s_n).
            grad_entropy: dL/dH(pi(.|s_n)), the same for every sample n.

        Returns:
            ``[N, F]`` dL/d(features).
        """
        features, z, inv_std = saved
        grad_mean = grad_log_prob.unsqueeze(-1) * z * inv_std  # [N, action_dim]
        write_grad(self.log_std, torch.mv, z.square().sub_(1.0).t(), grad_log_prob)
        if grad_entropy:
            self.log_std.grad.add_(grad_entropy * len(z))  # type: ignore[union-attr]  # set just above
        return linear_backward(self.mean, features, grad_mean)

    def numpy_log_prob_entropy_saving(
        self, features: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, NumpySaved]:
        """:meth:`log_prob_entropy_saving` on arrays (parameters float32 on the CPU; see
        :mod:`rlplat.networks.numpy_passes`): ``[N]`` log pi(a|s), ``[N]`` entropy, and what
        :meth:`numpy_backward` needs."""
        weight, bias = cast(tuple[np.ndarray, np.ndarray], numpy_linear(self.mean))
        log_std = parameter_array(self.log_std)
        mean = features @ weight
        mean += bias
        inv_std = np.exp(-log_std)
        z = (action - mean) * inv_std  # [N, action_dim] standardised actions
        log_std_sum, action_dim = log_std.sum(), log_std.shape[-1]
        log_prob = (-action_dim * HALF_LOG_2PI - log_std_sum) - 0.5 * (z * z).sum(-1)
        entropy = np.full(len(z), action_dim * (0.5 + HALF_LOG_2PI) + log_std_sum, dtype=np.float32)
        return log_prob, entropy, (features, z, inv_std)

    def numpy_backward(self, saved: NumpySaved, grad_log_prob: np.ndarray, grad_entropy: float = 0.0) -> np.ndarray:
        """:meth:`backward` on arrays: sets the mean layer's and ``log_std``'s ``.grad``
        (replaced); returns ``[N, F]`` dL/d(features)."""
        features, z, inv_std = saved
        grad_mean = grad_log_prob[:, None] * z * inv_std  # [N, action_dim]
        grad_log_std = grad_array(self.log_std)
        np.matmul((z * z - 1.0).T, grad_log_prob, out=grad_log_std)
        if grad_entropy:
            grad_log_std += grad_entropy * len(z)
        return numpy_linear_backward(self.mean, features, grad_mean)


class CategoricalHead(nn.Module):
    """Categorical distribution over Discrete actions.

    Args:
        in_features: Width of the torso features.
        num_actions: Number of discrete actions.
    """

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.logits = _linear(in_features, num_actions, gain=0.01)

    def sample(self, features: Tensor, deterministic: bool) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features -> ``[N]`` int64 action and ``[N]`` log-probability."""
        return self.act_function(deterministic)(features)

    def act_function(self, deterministic: bool) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
        """:meth:`sample` with ``deterministic`` bound and the logits layer's transposed weight
        taken now: valid, without gradients, until the next parameter update (see
        :func:`rlplat.collectors.base.act_function`)."""
        weight, bias = self.logits.weight.t(), self.logits.bias
        last = self.logits.out_features - 1

        def sample(features: Tensor) -> tuple[Tensor, Tensor]:
            log_p = torch.addmm(bias, features, weight).log_softmax(-1)  # F.linear for [N, F] features
            if deterministic:
                action = log_p.argmax(-1, keepdim=True)
            else:  # inverse-CDF sampling: the first action whose cumulative probability exceeds u ~ U[0, 1)
                u = torch.rand(*log_p.shape[:-1], 1, device=log_p.device, dtype=log_p.dtype)
                action = torch.searchsorted(log_p.exp().cumsum(-1), u, right=True).clamp_(max=last)
            return action.squeeze(-1), log_p.gather(-1, action).squeeze(-1)

        return sample

    def numpy_act_function(self, deterministic: bool) -> NumpyActFunction | None:
        """:meth:`act_function` on numpy features (from
        :meth:`rlplat.networks.mlp.MLP.numpy_forward_function`), computed in numpy but for the
        uniform draw, taken as :meth:`act_function` takes it (``torch.rand`` of ``[N, 1]``):
        the same random numbers, the same actions but where rounding moves a cumulative
        probability across the draw, and log-probabilities to float32 rounding. None unless
        the logits layer is float32 on the CPU.
        """
        if (layer := numpy_linear(self.logits)) is None:
            return None
        weight, bias = layer
        last = weight.shape[1] - 1

        def sample(features: np.ndarray) -> tuple[Tensor, Tensor]:
            logits = features @ weight
            logits += bias
            logits -= logits.max(-1, keepdims=True)  # log p = logits - log(sum exp(logits))
            probabilities = np.exp(logits)  # unnormalised
            total = probabilities.sum(-1, keepdims=True)
            if deterministic:
                action = logits.argmax(-1)
            else:  # inverse-CDF sampling: the first action whose cumulative probability exceeds u
                threshold = torch.rand(len(logits), 1, dtype=torch.float32).numpy() * total
                action = np.minimum((probabilities.cumsum(-1) <= threshold).sum(-1), last)
            action = action.astype(np.int64, copy=False)
            log_prob = logits[np.arange(len(logits)), action] - np.log(total[:, 0])
            return torch.from_numpy(action), torch.from_numpy(log_prob)

        return sample

    def log_prob_entropy(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features, ``[N]`` int64 actions -> ``[N]`` log-prob and entropy."""
        logits = F.linear(features, self.logits.weight, self.logits.bias)
        return categorical_log_prob(action, logits), categorical_entropy(logits)

    def log_prob_entropy_saving(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor, HeadSaved]:
        """:meth:`log_prob_entropy` without autograd, keeping what :meth:`backward` needs."""
        weight, bias = weight_and_bias(self.logits)
        log_p = torch.addmm(bias, features, weight.t()).log_softmax(-1)  # [N, num_actions]
        index = action.unsqueeze(-1)  # [N, 1]
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)
        return log_p.gather(-1, index).squeeze(-1), entropy, (features, index, log_p, p, entropy)

    def backward(self, saved: HeadSaved, grad_log_prob: Tensor, grad_entropy: float = 0.0) -> Tensor:
        """Set the logits layer's ``.grad`` (replaced) from dL/d log pi(a|s) and dL/dH:
        ``d log p_a / d logits = onehot(a) - p`` and ``dH / d logits = -p * (log p + H)``.
        Arguments and result as :meth:`GaussianHead.backward`'s.
        """
        features, index, log_p, p, entropy = saved
        grad = grad_log_prob.unsqueeze(-1)  # [N, 1]
        grad_logits = (p * grad).neg_().scatter_add_(-1, index, grad)  # [N, num_actions]
        if grad_entropy:
            grad_logits.sub_(grad_entropy * p * (log_p + entropy.unsqueeze(-1)))
        return linear_backward(self.logits, features, grad_logits)

    def numpy_log_prob_entropy_saving(
        self, features: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, NumpySaved]:
        """The log-softmax of the logits in numpy (:mod:`rlplat.networks.numpy_passes`; the
        logits layer float32 on the CPU): ``[N]`` log pi(a|s) of the ``[N]`` int64 actions,
        ``[N]`` entropy, and what :meth:`numpy_backward` needs, as
        :meth:`log_prob_entropy_saving` computes them in torch."""
        weight, bias = cast(tuple[np.ndarray, np.ndarray], numpy_linear(self.logits))
        logits = features @ weight
        logits += bias
        logits -= logits.max(-1, keepdims=True)
        p = np.exp(logits)
        total = p.sum(-1, keepdims=True)
        p /= total
        log_p = logits - np.log(total)  # log softmax
        entropy = -(p * log_p).sum(-1)
        rows = np.arange(len(action))
        return log_p[rows, action], entropy, (features, rows, action, log_p, p, entropy)

    def numpy_backward(self, saved: NumpySaved, grad_log_prob: np.ndarray, grad_entropy: float = 0.0) -> np.ndarray:
        """:meth:`backward` on arrays: sets the logits layer's ``.grad`` (replaced); returns
        ``[N, F]`` dL/d(features)."""
        features, rows, action, log_p, p, entropy = saved
        grad_logits = p * -grad_log_prob[:, None]  # [N, num_actions]
        grad_logits[rows, action] += grad_log_prob
        if grad_entropy:
            grad_logits -= grad_entropy * p * (log_p + entropy[:, None])
        return numpy_linear_backward(self.logits, features, grad_logits)
