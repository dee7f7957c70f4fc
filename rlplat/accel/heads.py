"""Closed-form passes of the policy heads (:mod:`rlplat.networks.heads`), in torch and in
numpy, and their acting in numpy.

Each class is built for a head of exactly its class (:mod:`rlplat.accel.plan`): a
``log_prob_entropy_saving`` that computes what the head's ``log_prob_entropy`` does without
autograd and keeps what ``backward`` needs, and a ``backward`` that sets the head's
gradients from dL/d log pi(a|s) and dL/dH and returns dL/d(features).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlplat.accel.arrays import LinearArrays, ParameterArrays
from rlplat.accel.linear import layer_of, linear_backward, write_grad
from rlplat.functional import HALF_LOG_2PI, normal_mode_log_prob, normal_mode_log_prob_entropy, standard_normal_log_prob
from rlplat.networks.heads import CategoricalHead, GaussianHead

HeadSaved = tuple[Tensor, ...]
"""What a head's ``log_prob_entropy_saving`` keeps for its ``backward``."""

NumpySaved = tuple[np.ndarray, ...]
"""The same, in numpy."""

NumpyActFunction = Callable[[np.ndarray], tuple[Tensor, Tensor]]
"""``[N, F]`` float32 features as a numpy array -> ``(action, log_prob)`` tensors, as the
head's ``sample`` returns them."""


class GaussianPasses:
    """:class:`GaussianHead` in closed form, in torch.

    Args:
        head: The head (exactly :class:`GaussianHead`).
    """

    def __init__(self, head: GaussianHead) -> None:
        self.mean = layer_of(head.mean)
        self.log_std = head.log_std

    def log_prob_entropy_saving(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor, HeadSaved]:
        """``[N, F]`` features and ``[N, action_dim]`` actions -> ``[N]`` log pi(a|s), ``[N]``
        entropy, and what :meth:`backward` needs."""
        weight, bias = self.mean
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


class NumpyGaussian:
    """:class:`GaussianHead` in numpy (parameters float32 on the CPU).

    Args:
        head: The head (exactly :class:`GaussianHead`).
    """

    def __init__(self, head: GaussianHead) -> None:
        self.mean = LinearArrays(head.mean)
        self.log_std = ParameterArrays(head.log_std)

    def act_function(self, deterministic: bool) -> NumpyActFunction:
        """:meth:`GaussianHead.sample` with ``deterministic`` bound, on numpy features, computed
        in numpy but for the noise, drawn as the head draws it (``torch.randn`` of the mean's
        shape): the same random numbers, and the same values to float32 rounding. What
        depends on the parameters alone (std, the mode's log-density) is computed now: valid
        until the next parameter update."""
        weight, bias = self.mean.weight_t, self.mean.bias
        log_std = torch.from_numpy(self.log_std.value)
        mode_log_prob = normal_mode_log_prob(log_std)  # [], log N(mean | mean, std)
        if deterministic:

            def mode(features: np.ndarray) -> tuple[Tensor, Tensor]:
                mean = features @ weight
                mean += bias
                return torch.from_numpy(mean), mode_log_prob.expand(len(mean))

            return mode
        std = np.exp(self.log_std.value)
        mode_value = mode_log_prob.numpy()

        def sample(features: np.ndarray) -> tuple[Tensor, Tensor]:
            action = features @ weight
            action += bias
            noise = torch.randn(action.shape, dtype=torch.float32).numpy()
            action += noise * std  # mean + noise * std
            log_prob = mode_value - 0.5 * np.einsum("ij,ij->i", noise, noise)  # standard_normal_log_prob
            return torch.from_numpy(action), torch.from_numpy(log_prob)

        return sample

    def log_prob_entropy_saving(
        self, features: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, NumpySaved]:
        """:meth:`GaussianPasses.log_prob_entropy_saving` on arrays."""
        log_std = self.log_std.value
        mean = features @ self.mean.weight_t
        mean += self.mean.bias
        inv_std = np.exp(-log_std)
        z = (action - mean) * inv_std  # [N, action_dim] standardised actions
        log_std_sum, action_dim = log_std.sum(), log_std.shape[-1]
        log_prob = (-action_dim * HALF_LOG_2PI - log_std_sum) - 0.5 * (z * z).sum(-1)
        entropy = np.full(len(z), action_dim * (0.5 + HALF_LOG_2PI) + log_std_sum, dtype=np.float32)
        return log_prob, entropy, (features, z, inv_std)

    def backward(self, saved: NumpySaved, grad_log_prob: np.ndarray, grad_entropy: float = 0.0) -> np.ndarray:
        """:meth:`GaussianPasses.backward` on arrays: sets the mean layer's and ``log_std``'s
        ``.grad`` (replaced); returns ``[N, F]`` dL/d(features)."""
        features, z, inv_std = saved
        grad_mean = grad_log_prob[:, None] * z * inv_std  # [N, action_dim]
        grad_log_std = self.log_std.grad()
        np.matmul((z * z - 1.0).T, grad_log_prob, out=grad_log_std)
        if grad_entropy:
            grad_log_std += grad_entropy * len(z)
        return self.mean.backward(features, grad_mean)


class CategoricalPasses:
    """:class:`CategoricalHead` in closed form, in torch.

    Args:
        head: The head (exactly :class:`CategoricalHead`).
    """

    def __init__(self, head: CategoricalHead) -> None:
        self.logits = layer_of(head.logits)

    def log_prob_entropy_saving(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor, HeadSaved]:
        """``[N, F]`` features and ``[N]`` int64 actions -> ``[N]`` log pi(a|s), ``[N]``
        entropy, and what :meth:`backward` needs."""
        weight, bias = self.logits
        log_p = torch.addmm(bias, features, weight.t()).log_softmax(-1)  # [N, num_actions]
        index = action.unsqueeze(-1)  # [N, 1]
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)
        return log_p.gather(-1, index).squeeze(-1), entropy, (features, index, log_p, p, entropy)

    def backward(self, saved: HeadSaved, grad_log_prob: Tensor, grad_entropy: float = 0.0) -> Tensor:
        """Set the logits layer's ``.grad`` (replaced) from dL/d log pi(a|s) and dL/dH:
        ``d log p_a / d logits = onehot(a) - p`` and ``dH / d logits = -p * (log p + H)``.
        Arguments and result as :meth:`GaussianPasses.backward`'s.
        """
        features, index, log_p, p, entropy = saved
        grad = grad_log_prob.unsqueeze(-1)  # [N, 1]
        grad_logits = (p * grad).neg_().scatter_add_(-1, index, grad)  # [N, num_actions]
        if grad_entropy:
            grad_logits.sub_(grad_entropy * p * (log_p + entropy.unsqueeze(-1)))
        return linear_backward(self.logits, features, grad_logits)


class NumpyCategorical:
    """:class:`CategoricalHead` in numpy (the logits layer float32 on the CPU).

    Args:
        head: The head (exactly :class:`CategoricalHead`).
    """

    def __init__(self, head: CategoricalHead) -> None:
        self.logits = LinearArrays(head.logits)

    def act_function(self, deterministic: bool) -> NumpyActFunction:
        """:meth:`CategoricalHead.sample` with ``deterministic`` bound, on numpy features,
        computed in numpy but for the uniform draw, taken as the head takes it (``torch.rand``
        of ``[N, 1]``): the same random numbers, the same actions but where rounding moves a
        cumulative probability across the draw, and log-probabilities to float32 rounding."""
        weight, bias = self.logits.weight_t, self.logits.bias
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

    def log_prob_entropy_saving(
        self, features: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, NumpySaved]:
        """:meth:`CategoricalPasses.log_prob_entropy_saving` on arrays."""
        logits = features @ self.logits.weight_t
        logits += self.logits.bias
        logits -= logits.max(-1, keepdims=True)
        p = np.exp(logits)
        total = p.sum(-1, keepdims=True)
        p /= total
        log_p = logits - np.log(total)  # log softmax
        entropy = -(p * log_p).sum(-1)
        rows = np.arange(len(action))
        return log_p[rows, action], entropy, (features, rows, action, log_p, p, entropy)

    def backward(self, saved: NumpySaved, grad_log_prob: np.ndarray, grad_entropy: float = 0.0) -> np.ndarray:
        """:meth:`CategoricalPasses.backward` on arrays: sets the logits layer's ``.grad``
        (replaced); returns ``[N, F]`` dL/d(features)."""
        features, rows, action, log_p, p, entropy = saved
        grad_logits = p * -grad_log_prob[:, None]  # [N, num_actions]
        grad_logits[rows, action] += grad_log_prob
        if grad_entropy:
            grad_logits -= grad_entropy * p * (log_p + entropy[:, None])
        return self.logits.backward(features, grad_logits)
