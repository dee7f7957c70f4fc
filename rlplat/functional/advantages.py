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
    discount = gamma * lmbda * not_done
    advantage = torch.empty_like(delta)
    if delta.device.type == "cpu" and not delta.requires_grad:
        # over numpy views of the same memory: a step costs a fifth of a torch one
        _discounted_cumsum(delta.numpy(), discount.numpy(), advantage.numpy())
    else:
        _discounted_cumsum(delta, discount, advantage)
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
