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
        ConfigError: if gymnasium does not know ``id`` or rejects ``kwargs``, if the package
            the env needs is not installed (naming rlplat's extra for it, see
            :func:`dependency_message`), or for a time limit that is not a positive integer.
    """
    check_time_limit(max_episode_steps, "the id's registered limit")
    try:
        env = gymnasium.make(id, max_episode_steps=max_episode_steps, render_mode=render_mode, **dict(kwargs or {}))
        return one_hot_observations(env)
    except gymnasium.error.DependencyNotInstalled as error:
        raise ConfigError(dependency_message(id, error)) from error
    except gymnasium.error.Error as error:
        raise ConfigError(f"env.id={id!r}: {error}") from error
    except TypeError as error:
        raise ConfigError(f"env.kwargs={dict(kwargs or {})!r} rejected by {id!r}: {error}") from error


EXTRAS = {"mujoco": "mujoco"}
"""rlplat's extra (pyproject.toml) per package that gymnasium's envs may be missing, by the
word gymnasium's DependencyNotInstalled message names it with (lower case)."""


def dependency_message(id: str, error: gymnasium.error.DependencyNotInstalled) -> str:
    """The ConfigError message for an env whose package is not installed: the pip command
    of rlplat's extra where ``error`` names a package of :data:`EXTRAS` (gymnasium's MuJoCo
    envs: ``pip install 'rlplat[mujoco]'``), else gymnasium's message alone."""
    text = str(error)
    for word, extra in EXTRAS.items():
        if word in text.lower():
            return f"env.id={id!r} needs the {word} package: pip install 'rlplat[{extra}]' (gymnasium: {text})"
    return f"env.id={id!r}: {text}"


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
