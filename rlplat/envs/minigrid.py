"""MiniGrid and BabyAI gridworlds (Chevalier-Boisvert et al. 2023, "Minigrid & Miniworld").

Install with ``pip install 'rlplat[minigrid]'``. Observations are a ``Dict``: ``image`` (the
agent's partial view, ``[7, 7, 3]`` uint8 codes of object, colour and state per cell),
``direction`` (``Discrete(4)``) and ``mission`` (the task in words, which a network reads
once ``transforms.tokenize`` turned it into token ids).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import gymnasium

from rlplat.envs.gym import check_time_limit
from rlplat.registry import ConfigError

INSTALL = "pip install 'rlplat[minigrid]'"


def make_minigrid(
    id: str = "MiniGrid-DoorKey-5x5-v0",
    keys: Sequence[str] | None = None,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Make one MiniGrid (or BabyAI) env with a ``Dict`` observation of the chosen entries.

    The env ends an episode by itself after its ``max_steps`` (``10 * size**2`` for DoorKey,
    ``4 * size**2`` for Empty) as a truncation; that limit is also set as the env's time
    limit, so that evaluations are bounded. A success gives reward
    ``1 - 0.9 * steps / max_steps`` (so 1 is never reached), anything else 0.

    Args:
        id: A MiniGrid id of gymnasium's registry, e.g. ``"MiniGrid-DoorKey-5x5-v0"`` or
            ``"MiniGrid-DoorKey-8x8-v0"``.
        keys: Entries of the observation kept (``image``, ``direction``, ``mission``); None
            keeps them all.
        max_episode_steps: Time limit in env steps; None keeps the env's ``max_steps``.
        kwargs: Further keyword arguments of the env (``agent_view_size``, ``size``, ...).
        render_mode: Gymnasium's render mode; videos set ``"rgb_array"``.

    Returns:
        One ``gymnasium.Env`` with a ``Dict`` observation and ``Discrete(7)`` actions.

    Raises:
        ConfigError: when minigrid is not installed, ``id`` is no MiniGrid env, a key is not an
            entry of its observation, or the time limit is not an integer >= 1.
    """
    check_time_limit(max_episode_steps, "the env's max_steps")
    try:
        import minigrid
    except ImportError:
        raise ConfigError(f"env=minigrid needs the minigrid package: {INSTALL}") from None
    gymnasium.register_envs(minigrid)
    try:
        env = gymnasium.make(id, render_mode=render_mode, **dict(kwargs or {}))
    except gymnasium.error.Error as error:
        raise ConfigError(f"env.id={id!r}: {error}; MiniGrid ids look like 'MiniGrid-DoorKey-5x5-v0'") from error
    except TypeError as error:
        raise ConfigError(f"env.kwargs={dict(kwargs or {})!r} rejected by {id!r}: {error}") from error
    if not isinstance(env.unwrapped, minigrid.minigrid_env.MiniGridEnv):
        env.close()
        raise ConfigError(f"env.id={id!r} is no MiniGrid env; MiniGrid ids look like 'MiniGrid-DoorKey-5x5-v0'")
    env = GridState(env)
    space = env.observation_space
    assert isinstance(space, gymnasium.spaces.Dict), "MiniGrid observations are Dicts"
    if keys is not None:
        unknown = [key for key in keys if key not in space.spaces]
        if unknown or not keys:
            env.close()
            raise ConfigError(
                f"env.keys={list(keys)}: the observation of {id!r} has the entries {', '.join(space.spaces)}"
            )
        env = gymnasium.wrappers.FilterObservation(env, list(keys))
    own_limit = int(cast(minigrid.minigrid_env.MiniGridEnv, env.unwrapped).max_steps)
    limit = max_episode_steps if max_episode_steps is not None else own_limit
    return gymnasium.wrappers.TimeLimit(env, limit)


class GridState(gymnasium.Wrapper):
    """A MiniGrid env whose grid and carried object are saved with the checkpoint
    (:class:`rlplat.envs.base.StatefulEnv`), as MiniGrid's own codes: each cell's object,
    colour and state (``Grid.encode``), so that a resumed run goes on in the same room. The
    agent's position, direction, step count and random generator are plain attributes of the
    env, saved as such."""

    def state_dict(self) -> dict[str, Any]:
        """``grid``: ``[width, height, 3]`` uint8 codes; ``carrying``: the carried object's
        three codes, or None."""
        import torch

        env = self.env.unwrapped
        carrying = env.carrying  # type: ignore[attr-defined]
        return {
            "grid": torch.from_numpy(env.grid.encode()),  # type: ignore[attr-defined]
            "carrying": None if carrying is None else [int(code) for code in carrying.encode()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        from minigrid.core.grid import Grid
        from minigrid.core.world_object import WorldObj

        env = self.env.unwrapped
        env.grid, _ = Grid.decode(state["grid"].numpy())  # type: ignore[attr-defined]
        carrying = state["carrying"]
        env.carrying = None if carrying is None else WorldObj.decode(*carrying)  # type: ignore[attr-defined]
