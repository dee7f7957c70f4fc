"""Advantage and return estimators over rollouts laid out time first."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def generalized_advantage_estimate(
    reward: Tensor,
    state_value: Tensor,
    next_state_value: Tensor,
    done: Tensor,
    terminated: Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation, GAE(gamma, lambda) (Schulman et al. 2016, eq. 16).

    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``.

    A truncated step (``done`` but not ``terminated``) bootstraps from ``V(s_{t+1})``, the
    value of the true next observation, and stops the recursion; a terminated step does not
    bootstrap. The last step of the rollout bootstraps from its ``next_state_value``.

    Args:
        reward: ``[T, *batch, 1]`` float rewards r_t.
        state_value: ``[T, *batch, 1]`` float V(s_t).
        next_state_value: ``[T, *batch, 1]`` float V(s_{t+1}) of the true next observation.
        done: ``[T, *batch, 1]`` bool, episode ended at step t (terminated or truncated).
        terminated: ``[T, *batch, 1]`` bool, the MDP reached a terminal state at step t.
        gamma: Discount factor in [0, 1].
        lmbda: GAE lambda in [0, 1]; 0 gives one-step TD errors, 1 Monte-Carlo advantages.

    Returns:
        ``(advantage, value_target)``, each ``[T, *batch, 1]``; ``value_target`` is the
        TD(lambda) return ``advantage + state_value``.

    Raises:
        ValueError: if the shapes differ.
    """
    shapes = {t.shape for t in (reward, state_value, next_state_value, done, terminated)}
    if len(shapes) != 1:
        raise ValueError(f"GAE inputs must share one shape [T, *batch, 1], got {sorted(shapes)}")
    not_terminated = (~terminated).to(reward.dtype)
    not_done = (~done).to(reward.dtype)
    delta = reward + gamma * not_terminated * next_state_value - state_value
    advantage = _backward_sum(delta, gamma * lmbda * not_done)
    return advantage, advantage + state_value


def _discounted_cumsum(delta: Any, discount: Any, out: Any) -> None:
    """``out[t] = delta[t] + discount[t] * out[t + 1]`` backwards from the last step (0 after
    it), over ``[T, ...]`` torch tensors or numpy arrays alike."""
    running = 0.0
    for t in range(len(delta) - 1, -1, -1):
        running = delta[t] + discount[t] * running
        out[t] = running


def _check_shapes(*tensors: Tensor) -> None:
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"estimator inputs must share one shape [T, *batch, 1], got {sorted(shapes)}")


def td_lambda_return(
    reward: Tensor,
    next_state_value: Tensor,
    done: Tensor,
    terminated: Tensor,
    gamma: float,
    lmbda: float,
) -> Tensor:
    """TD(lambda) return (Sutton & Barto 2018, sec. 12.1), computed backwards in time.

    ``G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda) * V(s_{t+1}) + lambda * G_{t+1})``
    where ``G_{t+1}`` is replaced by ``V(s_{t+1})`` when the episode ended at t (a truncated
    step bootstraps from its true next observation) and at the last step of the rollout.
    lambda = 1 gives the discounted Monte-Carlo return with those bootstraps (REINFORCE's
    reward-to-go); lambda = 0 gives the one-step TD target.

    Args:
        reward: ``[T, *batch, 1]`` float rewards.
        next_state_value: ``[T, *batch, 1]`` float V(s_{t+1}).
        done: ``[T, *batch, 1]`` bool, episode ended at step t.
        terminated: ``[T, *batch, 1]`` bool, terminal state reached at step t.
        gamma: Discount factor in [0, 1].
        lmbda: lambda in [0, 1].

    Returns:
        ``[T, *batch, 1]`` float lambda-returns.

    Raises:
        ValueError: if the shapes differ.
    """
    _check_shapes(reward, next_state_value, done, terminated)
    not_terminated = (~terminated).to(reward.dtype)
    returns = torch.empty_like(reward)
    following = next_state_value[-1]
    for t in range(reward.shape[0] - 1, -1, -1):
        following = torch.where(done[t], next_state_value[t], following)
        mixed = (1.0 - lmbda) * next_state_value[t] + lmbda * following
        following = reward[t] + gamma * not_terminated[t] * mixed
        returns[t] = following
    return returns


def n_step_return(
    reward: Tensor,
    next_state_value: Tensor,
    done: Tensor,
    terminated: Tensor,
    gamma: float,
    n: int,
) -> Tensor:
    """n-step return (Sutton & Barto 2018, sec. 7.1) within a time-first window.

    ``G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) V(s_{t+m})`` where
    m <= n stops early at the first episode end and at the end of the window.

    Args:
        reward: ``[T, *batch, 1]`` float rewards.
        next_state_value: ``[T, *batch, 1]`` float V(s_{t+1}) (or max_a Q_target(s_{t+1}, a)).
        done: ``[T, *batch, 1]`` bool, episode ended at step t.
        terminated: ``[T, *batch, 1]`` bool, terminal state reached at step t.
        gamma: Discount factor in [0, 1].
        n: Steps to look ahead, >= 1.

    Returns:
        ``[T, *batch, 1]`` float n-step returns.

    Raises:
        ValueError: if the shapes differ or n < 1.
    """
    _check_shapes(reward, next_state_value, done, terminated)
    if n < 1:
        raise ValueError(f"n-step return needs n >= 1, got {n}")
    T = reward.shape[0]
    not_terminated = (~terminated).to(reward.dtype)
    not_done = (~done).to(reward.dtype)
    returns = torch.empty_like(reward)
    for t in range(T):
        m = min(n, T - t)
        total = torch.zeros_like(reward[t])
        discount = torch.ones_like(reward[t])  # gamma^k while the episode runs, then 0
        for k in range(m):
            total = total + discount * reward[t + k]
            ends = torch.ones_like(reward[t]) if k == m - 1 else 1.0 - not_done[t + k]
            total = total + discount * ends * gamma * not_terminated[t + k] * next_state_value[t + k]
            discount = discount * gamma * not_done[t + k]
        returns[t] = total
    return returns


def vtrace(
    behaviour_log_prob: Tensor,
    target_log_prob: Tensor,
    reward: Tensor,
    state_value: Tensor,
    next_state_value: Tensor,
    done: Tensor,
    terminated: Tensor,
    gamma: float,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    lmbda: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, "IMPALA", eq. 1 and sec. 4.2).

    With ``ratio_t = pi(a_t|x_t) / mu(a_t|x_t)``, ``rho_t = min(rho_bar, ratio_t)``, ``c_t = lambda min(c_bar,
    ratio_t)`` and ``delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))``, eq. 1 reads
    ``v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V``, computed backwards as
    ``v_s - V(x_s) = delta_s V + gamma c_s (v_{s+1} - V(x_{s+1}))``; the policy gradient's advantage is
    ``min(rho_bar_pg, ratio_s) (r_s + gamma v_{s+1} - V(x_s))``. Episode ends as in
    :func:`generalized_advantage_estimate`: the sum stops where ``done``; a terminated step does not bootstrap;
    a truncated step and the rollout's last step take ``v_{s+1} = V(x_{s+1})`` (``next_state_value``). With
    mu = pi and thresholds >= 1, ``v_s`` is GAE(gamma, lambda)'s value target (for lambda = 1 the advantage too).

    Args:
        behaviour_log_prob: ``[T, *batch]`` float log mu(a_t|x_t) of the policy that acted.
        target_log_prob: ``[T, *batch]`` float log pi(a_t|x_t) of the policy being learned.
        reward: ``[T, *batch, 1]`` float rewards r_t.
        state_value: ``[T, *batch, 1]`` float V(x_t).
        next_state_value: ``[T, *batch, 1]`` float V(x_{t+1}) of the true next observation.
        done: ``[T, *batch, 1]`` bool, episode ended at step t (terminated or truncated).
        terminated: ``[T, *batch, 1]`` bool, the MDP reached a terminal state at step t.
        gamma: Discount factor in [0, 1].
        clip_rho_threshold: rho_bar > 0, truncation of the importance weights of delta_t V.
        clip_pg_rho_threshold: rho_bar_pg > 0, truncation of the policy gradient's importance weights.
        clip_c_threshold: c_bar > 0, truncation of the trace coefficients c_i.
        lmbda: lambda in [0, 1], discounting the traces further (the paper's remark 2).

    Returns:
        ``(value_target, advantage)``, each ``[T, *batch, 1]`` in ``reward``'s dtype: v_s and
        ``rho_s (r_s + gamma v_{s+1} - V(x_s))``.

    Raises:
        ValueError: if the shapes differ (the log-probs lack the trailing 1), or a threshold is not > 0.
    """
    log_probs, values = (behaviour_log_prob, target_log_prob), (reward, state_value, next_state_value, done, terminated)
    _check_vtrace_inputs(log_probs, values, (clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold))
    ratio = (target_log_prob - behaviour_log_prob).unsqueeze(-1).to(reward.dtype).exp()  # [T, *batch, 1]
    not_terminated, not_done = (~terminated).to(reward.dtype), (~done).to(reward.dtype)
    delta = ratio.clamp(max=clip_rho_threshold) * (reward + gamma * not_terminated * next_state_value - state_value)
    discount = gamma * lmbda * ratio.clamp(max=clip_c_threshold) * not_done  # gamma c_s, 0 where an episode ends
    trace = _backward_sum(delta, discount)  # v_s - V(x_s)
    value_target = state_value + trace
    following = torch.cat([value_target[1:], next_state_value[-1:]])  # v_{s+1}; V(x_T) after the rollout
    q = reward + gamma * not_terminated * torch.where(done, next_state_value, following)  # r_s + gamma v_{s+1}
    return value_target, ratio.clamp(max=clip_pg_rho_threshold) * (q - state_value)


def _backward_sum(delta: Tensor, discount: Tensor) -> Tensor:
    """A new tensor ``out[t] = delta[t] + discount[t] * out[t + 1]`` (0 after the last step), over
    numpy views on the CPU without gradients (a step costs a fifth of a torch one)."""
    out = torch.empty_like(delta)
    if delta.device.type == "cpu" and not delta.requires_grad:
        _discounted_cumsum(delta.numpy(), discount.numpy(), out.numpy())
    else:
        _discounted_cumsum(delta, discount, out)
    return out


def _check_vtrace_inputs(
    log_probs: tuple[Tensor, Tensor], rest: tuple[Tensor, ...], thresholds: tuple[float, ...]
) -> None:
    """Raise ValueError unless both log-probs are ``[T, *batch]``, the rest ``[T, *batch, 1]``,
    and the thresholds ``(clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold)`` > 0."""
    _check_shapes(*rest)
    behaviour, target = log_probs
    if behaviour.shape != target.shape or rest[0].shape != (*behaviour.shape, 1):
        raise ValueError(
            f"v-trace log-probs must be [T, *batch] and the rest [T, *batch, 1], got behaviour "
            f"{list(behaviour.shape)}, target {list(target.shape)}, reward {list(rest[0].shape)}"
        )
    for name, threshold in zip(("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold"), thresholds):
        if not threshold > 0:
            raise ValueError(f"v-trace {name}={threshold}: must be > 0")
