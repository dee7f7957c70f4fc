"""Advantage and return estimators over rollouts laid out time first."""

from __future__ import annotations

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
    running = torch.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        running = delta[t] + discount[t] * running
        advantage[t] = running
    return advantage, advantage + state_value
