"""Policy heads: features -> action distribution, for Box, Discrete, MultiDiscrete and
MultiBinary action spaces."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.functional import (
    categorical_entropy,
    categorical_kl,
    categorical_log_prob,
    normal_entropy,
    normal_kl,
    normal_log_prob,
    normal_mode_log_prob,
    standard_normal_log_prob,
)


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
        """``[N, F]`` features -> ``[N, action_dim]`` action (the mean when deterministic,
        else ``mean + noise * std`` with ``noise ~ N(0, I)``) and its ``[N]`` log-probability."""
        mean = F.linear(features, self.mean.weight, self.mean.bias)
        mode_log_prob = normal_mode_log_prob(self.log_std)  # [], log N(mean | mean, std)
        if deterministic:
            return mean, mode_log_prob.expand(mean.shape[:-1])
        noise = torch.randn_like(mean)
        action = torch.addcmul(mean, noise, self.log_std.exp())  # mean + noise * std
        return action, standard_normal_log_prob(noise, mode_log_prob)

    def log_prob_entropy(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features, ``[N, action_dim]`` actions -> ``[N]`` log-prob and entropy."""
        mean = F.linear(features, self.mean.weight, self.mean.bias)
        entropy = normal_entropy(self.log_std).expand(mean.shape[:-1])
        return normal_log_prob(action, mean, self.log_std), entropy

    def kl_divergence(self, features: Tensor, reference: GaussianHead, reference_features: Tensor) -> Tensor:
        """Exact KL(pi || pi_ref) between this head's Gaussian on ``[N, F]`` features and
        ``reference``'s on ``[N, F_ref]`` features (summed over action dims): ``[N]`` nats.

        Raises:
            TypeError: if ``reference`` is not a GaussianHead of the same action dim.
        """
        _check_same_head(self, reference)
        mean = F.linear(features, self.mean.weight, self.mean.bias)
        reference_mean = F.linear(reference_features, reference.mean.weight, reference.mean.bias)
        return normal_kl(mean, self.log_std, reference_mean, reference.log_std)


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
        """``[N, F]`` features -> ``[N]`` int64 action (the most probable when deterministic,
        else drawn by inverse-CDF sampling: the first action whose cumulative probability
        exceeds ``u ~ U[0, 1)``) and its ``[N]`` log-probability."""
        log_p = F.linear(features, self.logits.weight, self.logits.bias).log_softmax(-1)  # [N, num_actions]
        return sample_categorical(log_p, deterministic)

    def log_prob_entropy(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features, ``[N]`` int64 actions -> ``[N]`` log-prob and entropy."""
        logits = F.linear(features, self.logits.weight, self.logits.bias)
        return categorical_log_prob(action, logits), categorical_entropy(logits)

    def kl_divergence(self, features: Tensor, reference: CategoricalHead, reference_features: Tensor) -> Tensor:
        """Exact KL(pi || pi_ref) between this head's categorical on ``[N, F]`` features and
        ``reference``'s on ``[N, F_ref]`` features: ``[N]`` nats.

        Raises:
            TypeError: if ``reference`` is not a CategoricalHead over as many actions.
        """
        _check_same_head(self, reference)
        logits = F.linear(features, self.logits.weight, self.logits.bias)
        return categorical_kl(logits, F.linear(reference_features, reference.logits.weight, reference.logits.bias))


def sample_categorical(log_p: Tensor, deterministic: bool) -> tuple[Tensor, Tensor]:
    """``[N, n]`` normalised log-probabilities -> ``[N]`` int64 actions (the most probable when
    deterministic, else by inverse-CDF sampling from one ``u ~ U[0, 1)`` per row) and their
    ``[N]`` log-probabilities."""
    if deterministic:
        action = log_p.argmax(-1, keepdim=True)
    else:
        u = torch.rand(*log_p.shape[:-1], 1, device=log_p.device, dtype=log_p.dtype)
        last = log_p.shape[-1] - 1
        action = torch.searchsorted(log_p.exp().cumsum(-1), u, right=True).clamp_(max=last)
    return action.squeeze(-1), log_p.gather(-1, action).squeeze(-1)


class MultiCategoricalHead(nn.Module):
    """Independent categorical distributions, one per action dim: ``MultiDiscrete(nvec)``
    actions (dim i takes values ``0 .. nvec[i] - 1``), and ``MultiBinary(n)`` actions as n
    categoricals over ``{0, 1}`` (a Bernoulli each). The log-probability and the entropy are
    the sums over dims, as Stable-Baselines3's ``MultiCategoricalDistribution``.

    Args:
        in_features: Width of the torso features.
        nvec: Number of values of each action dim.
    """

    def __init__(self, in_features: int, nvec: Sequence[int]) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.logits = _linear(in_features, sum(self.nvec), gain=0.01)

    def _logits(self, features: Tensor) -> tuple[Tensor, ...]:
        return F.linear(features, self.logits.weight, self.logits.bias).split(self.nvec, -1)

    def sample(self, features: Tensor, deterministic: bool) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features -> ``[N, len(nvec)]`` int64 actions (each dim drawn as
        :class:`CategoricalHead` draws, or its most probable value when deterministic) and
        their ``[N]`` joint log-probability."""
        drawn = [sample_categorical(logits.log_softmax(-1), deterministic) for logits in self._logits(features)]
        action = torch.stack([a for a, _ in drawn], -1)
        return action, torch.stack([log_p for _, log_p in drawn], -1).sum(-1)

    def log_prob_entropy(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, F]`` features, ``[N, len(nvec)]`` int64 actions -> ``[N]`` joint log-prob and
        ``[N]`` entropy (sums over the dims)."""
        groups = self._logits(features)
        log_prob = torch.stack([categorical_log_prob(action[..., i], g) for i, g in enumerate(groups)], -1).sum(-1)
        entropy = torch.stack([categorical_entropy(g) for g in groups], -1).sum(-1)
        return log_prob, entropy

    def kl_divergence(self, features: Tensor, reference: MultiCategoricalHead, reference_features: Tensor) -> Tensor:
        """Exact KL(pi || pi_ref) between this head's categoricals on ``[N, F]`` features and
        ``reference``'s on ``[N, F_ref]`` features: ``[N]`` nats, the sum over action dims (the
        dims are independent).

        Raises:
            TypeError: if ``reference`` is not a MultiCategoricalHead of the same ``nvec``.
        """
        _check_same_head(self, reference)
        pairs = zip(self._logits(features), reference._logits(reference_features), strict=True)
        return torch.stack([categorical_kl(p, q) for p, q in pairs], -1).sum(-1)


def _check_same_head(head: nn.Module, reference: nn.Module) -> None:
    """Raise TypeError unless ``reference`` is a head of ``head``'s class over the same actions
    (the same action space), between which ``kl_divergence`` is defined."""
    if type(reference) is not type(head) or _actions(reference) != _actions(head):
        raise TypeError(
            f"KL between policy heads needs the same kind over the same actions: {type(head).__name__} over "
            f"{_actions(head)} and {type(reference).__name__} over {_actions(reference)}"
        )


def _actions(head: nn.Module) -> object:
    """What a head's actions are: a Gaussian's dims, a categorical's count, a multi-categorical's
    ``nvec``."""
    if isinstance(head, GaussianHead):
        return int(head.log_std.shape[0])
    if isinstance(head, CategoricalHead):
        return head.logits.out_features
    return list(getattr(head, "nvec", []))
