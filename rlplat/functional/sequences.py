"""Cutting a rollout into sequences for truncated back-propagation through time.

A recurrent policy (LSTM or GRU core) learns from sequences of consecutive steps of one env,
its core's state at the first step taken from the rollout (the state the collector acted
with), so that no gradient or state crosses an episode boundary and the sequences are short
enough to back-propagate through (truncated BPTT; Hausknecht and Stone 2015, "Deep Recurrent
Q-Learning for Partially Observable MDPs"; Kapturowski et al. 2019, "Recurrent Experience
Replay in Distributed Reinforcement Learning" (R2D2) for the burn-in).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Sequences(NamedTuple):
    """Where the sequences of a ``[T, B]`` rollout lie, as indices into the rollout flattened
    to ``[T * B]`` (step t of env b is ``t * B + b``); S sequences, P = burn_in + length
    positions each.

    Attributes:
        steps: ``[S, P]`` int64: the flattened step of each position. Padded positions repeat
            a real step of the same sequence (the first burn-in step on the left, the last
            step on the right), so that position 0 always holds the step whose recurrent
            state the sequence starts from.
        mask: ``[S, P]`` bool: the positions a loss is averaged over (the sequence proper:
            positions ``burn_in`` to ``burn_in + size - 1``).
        burn_in: ``[S, P]`` bool: the real steps before the sequence proper, which only
            refresh the core's state (all False without burn-in).
    """

    steps: Tensor
    mask: Tensor
    burn_in: Tensor


def episode_sequences(done: Tensor, length: int, burn_in: int = 0) -> Sequences:
    """Cut each env's steps of a rollout into sequences of at most ``length`` steps of one
    episode: a new sequence starts at the rollout's first step, after every step that ended
    an episode, and every ``length`` steps within an episode. Each is padded on the right to
    ``length`` and preceded by up to ``burn_in`` earlier steps of the same episode within the
    rollout (padded on the left where fewer exist).

    Args:
        done: ``[T, B]`` or ``[T, B, 1]`` bool, ``("next", "done")``: step t ended its episode.
        length: Steps of a sequence proper L >= 1.
        burn_in: Steps before each sequence that refresh the core's state, >= 0.

    Returns:
        :class:`Sequences`, ordered by env, then time.

    Raises:
        ValueError: for ``length < 1`` or ``burn_in < 0``.
    """
    if length < 1 or burn_in < 0:
        raise ValueError(f"length={length} must be >= 1 and burn_in={burn_in} >= 0")
    done = done.reshape(done.shape[0], -1).bool()
    T, B = done.shape
    time = torch.arange(T, device=done.device).unsqueeze(1).expand(T, B)
    first = torch.zeros_like(done)
    first[0] = True
    first[1:] = done[:-1]  # a step after an episode's end starts the next one
    episode_start = torch.cummax(torch.where(first, time, torch.zeros_like(time)), dim=0).values  # [T, B]
    starts = (time - episode_start) % length == 0
    env, start = starts.T.nonzero(as_tuple=True)  # by env, then time
    # each sequence ends where the next one of its env begins, or at the rollout's end
    end = torch.full_like(start, T)
    same_env = env[1:] == env[:-1]
    end[:-1] = torch.where(same_env, start[1:], end[:-1])
    size = (end - start).clamp(max=length)
    # burn-in: up to burn_in steps before the start, not before the episode's first step
    first_burn = torch.maximum(start - burn_in, episode_start[start, env])
    offsets = torch.arange(burn_in + length, device=done.device) - burn_in  # [P]
    steps = start.unsqueeze(1) + offsets  # [S, P] time of each position
    last = (start + size - 1).unsqueeze(1)
    steps = torch.minimum(torch.maximum(steps, first_burn.unsqueeze(1)), last)
    position = offsets.unsqueeze(0)
    mask = (position >= 0) & (position < size.unsqueeze(1))
    burn = (position < 0) & (start.unsqueeze(1) + position >= first_burn.unsqueeze(1))
    return Sequences(steps * B + env.unsqueeze(1), mask, burn)
