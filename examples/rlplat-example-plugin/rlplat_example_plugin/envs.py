"""Point mass: steer a point to a random goal in the unit box. rlplat entry ``point_mass``.

rlplat calls the entry point with the env node's YAML keys (all but ``name``) and gets one
``gymnasium.Env``; it vectorises it and applies the configured transforms itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.wrappers import TimeLimit

from rlplat.registry import ConfigError


class PointMassEnv(gymnasium.Env):
    """A point in ``[-1, 1]^dim`` moves at the commanded velocity towards a goal.

    Each episode starts with the point and the goal drawn uniformly in the box. An action
    ``a`` in ``[-1, 1]^dim`` moves the point by ``step_size * a`` (clipped to the box).
    The reward is minus the Euclidean distance to the goal after the move, so the return is
    highest for the shortest path; there is no terminal state (the time limit truncates).

    Observation: ``float32 [2 * dim]``, the point's position then the goal's, in ``[-1, 1]``.
    Action: ``float32 [dim]`` in ``[-1, 1]``.

    Args:
        dim: Dimensions of the box (1 or more).
        step_size: Distance moved per env step at full action, in box units.

    Raises:
        ConfigError: for ``dim < 1`` or ``step_size <= 0``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, dim: int = 2, step_size: float = 0.1) -> None:
        if int(dim) < 1:
            raise ConfigError(f"env.dim={dim!r}: must be an integer >= 1")
        if not float(step_size) > 0:
            raise ConfigError(f"env.step_size={step_size!r}: must be > 0")
        self.dim = int(dim)
        self.step_size = float(step_size)
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2 * self.dim,), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (self.dim,), np.float32)
        self._position = np.zeros(self.dim, np.float32)
        self._goal = np.zeros(self.dim, np.float32)

    def _observation(self) -> np.ndarray:
        return np.concatenate([self._position, self._goal]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw a new start and goal; returns ``(observation [2 * dim], info)``."""
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-1.0, 1.0, self.dim).astype(np.float32)
        self._goal = self.np_random.uniform(-1.0, 1.0, self.dim).astype(np.float32)
        return self._observation(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move by ``step_size * clip(action, -1, 1)``; reward is ``-distance`` to the goal."""
        move = self.step_size * np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        self._position = np.clip(self._position + move, -1.0, 1.0).astype(np.float32)
        distance = float(np.linalg.norm(self._goal - self._position))
        return self._observation(), -distance, False, False, {"distance": distance}


def make_point_mass(dim: int = 2, step_size: float = 0.1, max_episode_steps: int = 50) -> gymnasium.Env:
    """A :class:`PointMassEnv` truncated after ``max_episode_steps``: the ``point_mass`` entry.

    Args:
        dim: Dimensions of the box.
        step_size: Distance moved per env step at full action, in box units.
        max_episode_steps: Time limit in env steps (the episode is truncated, not terminated).

    Returns:
        A single ``gymnasium.Env``.

    Raises:
        ConfigError: for ``dim < 1``, ``step_size <= 0`` or ``max_episode_steps < 1``.
    """
    if int(max_episode_steps) < 1:
        raise ConfigError(f"env.max_episode_steps={max_episode_steps!r}: must be an integer >= 1")
    return TimeLimit(PointMassEnv(dim, step_size), max_episode_steps=int(max_episode_steps))
