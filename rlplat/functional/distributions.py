"""Log-probabilities and entropies of the policy distributions, written out for speed.

``torch.distributions`` objects cost tens of microseconds each to build; a policy called
once per env step for small networks is bound by that overhead, so the formulas live here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)  # log of sqrt(2 pi), the Gaussian normaliser


def normal_log_prob(action: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """Log-density of a diagonal Gaussian, summed over the last (action) dim.

    Args:
        action: ``[*batch, action_dim]`` float.
        mean: ``[*batch, action_dim]`` float.
        log_std: ``[action_dim]`` or ``[*batch, action_dim]`` float, natural log of std.

    Returns:
        ``[*batch]`` float log pi(action).
    """
    z = (action - mean) * (-log_std).exp()
    return (-0.5 * z.pow(2) - log_std - HALF_LOG_2PI).sum(-1)


def normal_mode_log_prob(log_std: Tensor) -> Tensor:
    """Log-density of a diagonal Gaussian at its mean: ``-sum(log_std) - action_dim * log(2 pi) / 2``.

    Args:
        log_std: ``[*batch, action_dim]`` (or ``[action_dim]``) float, natural log of std.

    Returns:
        ``[*batch]`` (or 0-dim) float log pi(mean).
    """
    return -log_std.shape[-1] * HALF_LOG_2PI - log_std.sum(-1)


def standard_normal_log_prob(noise: Tensor, mode_log_prob: Tensor) -> Tensor:
    """Log-density of ``mean + noise * std`` under the diagonal Gaussian it was drawn from,
    from the standard-normal ``noise`` alone: ``(action - mean) / std`` is ``noise``, so it is
    the density at the mean less ``sum(noise^2) / 2``: three operations, the value of
    :func:`normal_log_prob` for that action.

    Args:
        noise: ``[*batch, action_dim]`` float, the standard-normal draw.
        mode_log_prob: 0-dim or ``[*batch]`` float, :func:`normal_mode_log_prob` of the
            distribution's log std.

    Returns:
        ``[*batch]`` float log pi(action).
    """
    return torch.add(mode_log_prob, noise.square().sum(-1), alpha=-0.5)


def normal_entropy(log_std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian, summed over the last (action) dim.

    Args:
        log_std: ``[*batch, action_dim]`` (or ``[action_dim]``) float.

    Returns:
        ``[*batch]`` (or scalar) float entropy in nats.
    """
    return (0.5 + HALF_LOG_2PI + log_std).sum(-1)


def normal_mode_log_prob_entropy(log_std: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`normal_mode_log_prob` and :func:`normal_entropy` of one state-independent log
    std, from one sum over it: three operations instead of four.

    Args:
        log_std: ``[action_dim]`` float, natural log of std.

    Returns:
        ``(log pi(mean), entropy)``, both 0-dim float (nats).
    """
    log_std_sum, action_dim = log_std.sum(), log_std.shape[-1]
    return torch.rsub(log_std_sum, -action_dim * HALF_LOG_2PI), log_std_sum + action_dim * (0.5 + HALF_LOG_2PI)


def kl_estimate(log_ratio: Tensor, ratio: Tensor | None = None) -> Tensor:
    """Per-sample estimate of KL[pi_old, pi] from ``log_ratio = log pi(a|s) - log pi_old(a|s)``
    with a ~ pi_old: ``(ratio - 1) - log ratio``, non-negative and unbiased (Schulman's k3).

    Args:
        log_ratio: ``[*batch]`` float.
        ratio: ``exp(log_ratio)`` when the caller has computed it already (PPO's losses
            have); computed here otherwise.

    Returns:
        ``[*batch]`` float KL estimates in nats.
    """
    return (log_ratio.exp() if ratio is None else ratio) - 1.0 - log_ratio


def categorical_log_prob(action: Tensor, logits: Tensor) -> Tensor:
    """Log-probability of integer actions under a categorical distribution.

    Args:
        action: ``[*batch]`` int64 action indices.
        logits: ``[*batch, num_actions]`` float unnormalised log-probabilities.

    Returns:
        ``[*batch]`` float log pi(action).
    """
    log_p = logits.log_softmax(-1)
    return log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: Tensor) -> Tensor:
    """Entropy of a categorical distribution.

    Args:
        logits: ``[*batch, num_actions]`` float unnormalised log-probabilities.

    Returns:
        ``[*batch]`` float entropy in nats.
    """
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def categorical_kl(logits_p: Tensor, logits_q: Tensor) -> Tensor:
    """KL(p || q) between two categorical distributions, exactly: ``sum_a p(a) (log p(a) - log q(a))``.

    Args:
        logits_p: ``[*batch, num_actions]`` float unnormalised log-probabilities of p.
        logits_q: ``[*batch, num_actions]`` float unnormalised log-probabilities of q.

    Returns:
        ``[*batch]`` float KL in nats (0 where p = q; inf where q gives probability 0 to an
        action p does not: finite logits never do).
    """
    log_p = logits_p.log_softmax(-1)
    return (log_p.exp() * (log_p - logits_q.log_softmax(-1))).sum(-1)


def normal_kl(mean_p: Tensor, log_std_p: Tensor, mean_q: Tensor, log_std_q: Tensor) -> Tensor:
    """KL(p || q) between two diagonal Gaussians, exactly, summed over the last (action) dim:
    ``sum_i log(s_q / s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2``.

    Args:
        mean_p: ``[*batch, action_dim]`` float mean of p.
        log_std_p: ``[action_dim]`` or ``[*batch, action_dim]`` float, natural log of p's std.
        mean_q: ``[*batch, action_dim]`` float mean of q.
        log_std_q: ``[action_dim]`` or ``[*batch, action_dim]`` float, natural log of q's std.

    Returns:
        ``[*batch]`` float KL in nats.
    """
    variance_ratio = (2.0 * (log_std_p - log_std_q)).exp()  # s_p^2 / s_q^2
    mean_term = ((mean_p - mean_q) * (-log_std_q).exp()).pow(2)  # (m_p - m_q)^2 / s_q^2
    return (0.5 * (variance_ratio + mean_term - 1.0) + log_std_q - log_std_p).sum(-1)
