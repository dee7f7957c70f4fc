"""Any registered gymnasium environment by id."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from rlplat.registry import ConfigError


def make_gym(
    id: str,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Make one gymnasium environment.

    Args:
        id: Gymnasium id, e.g. ``"Pendulum-v1"``.
        max_episode_steps: Time limit in env steps; None keeps the id's registered limit.
        kwargs: Keyword arguments for the environment's constructor.
        render_mode: Gymnasium's render mode; None renders nothing. Videos
            (``rlplat-record``, ``trainer.record_every_frames``) set ``"rgb_array"``.

    Returns:
        A single ``gymnasium.Env``; one with Discrete observations (FrozenLake, Taxi,
        CliffWalking) gives them one-hot (:func:`one_hot_observations`).

    Raises:
        ConfigError: if gymnasium does not know ``id`` or rejects ``kwargs``, or for a time
            limit that is not a positive integer.
    """
    check_time_limit(max_episode_steps, "the id's registered limit")
    try:
        env = gymnasium.make(id, max_episode_steps=max_episode_steps, render_mode=render_mode, **dict(kwargs or {}))
        return one_hot_observations(env)
    except gymnasium.error.Error as error:
        raise ConfigError(f"env.id={id!r}: {error}") from error
    except TypeError as error:
        raise ConfigError(f"env.kwargs={dict(kwargs or {})!r} rejected by {id!r}: {error}") from error


def check_time_limit(max_episode_steps: Any, otherwise: str) -> None:
    """Raise ConfigError unless ``env.max_episode_steps`` is an integer >= 1 or None (which
    keeps ``otherwise``, named in the message). gymnasium refuses 0, but takes -1 as a limit
    never reached: an evaluation would then run for ever on an env that never ends."""
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1
    ):
        raise ConfigError(
            f"env.max_episode_steps={max_episode_steps!r}: must be an integer >= 1, or null for {otherwise}"
        )


def one_hot_observations(env: gymnasium.Env) -> gymnasium.Env:
    """``env`` with Discrete(n) observations given as one-hot float32 vectors ``[n]`` (a
    Box in [0, 1]), as Stable-Baselines3 encodes them: the networks take Box observations;
    any other env as it is."""
    space = env.observation_space
    if not isinstance(space, gymnasium.spaces.Discrete):
        return env
    n, start = int(space.n), int(space.start)
    rows = np.eye(n, dtype=np.float32)
    one_hot = gymnasium.spaces.Box(0.0, 1.0, (n,), np.float32)
    return gymnasium.wrappers.TransformObservation(env, lambda state: rows[int(state) - start], one_hot)
