"""An env whose steps cost CPU time: a gymnasium env with a fixed amount of computation added
to every step, standing in for a simulator (physics, rendering) whose step takes about a
millisecond. Collectors are compared on it (``make bench``): on a cheap env the policy and the
Python around the env dominate, on this one the envs' steps do.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium

from rlplat.envs.gym import make_gym
from rlplat.registry import ConfigError


class CostlyStep(gymnasium.Wrapper):
    """Spends ``step_ms`` milliseconds of this thread's CPU time in every ``step`` (a busy loop
    measured by ``time.thread_time``: on a machine whose cores are all busy a step takes
    longer in wall-clock time, as a real simulator's would); transitions are the wrapped env's.

    Args:
        env: The env to wrap.
        step_ms: CPU milliseconds per step, >= 0.

    Raises:
        ConfigError: for a negative ``step_ms``, naming ``env.step_ms``.
    """

    def __init__(self, env: gymnasium.Env, step_ms: float) -> None:
        if not step_ms >= 0:
            raise ConfigError(f"env.step_ms={step_ms!r}: must be a number of CPU milliseconds >= 0")
        super().__init__(env)
        self.step_seconds = step_ms / 1000.0

    def step(self, action: Any) -> Any:
        end = time.thread_time() + self.step_seconds
        while time.thread_time() < end:
            pass
        return self.env.step(action)


def make_costly(
    id: str = "CartPole-v1",
    step_ms: float = 1.0,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Env entry ``costly``: the gymnasium env ``id`` (as :func:`rlplat.envs.gym.make_gym` makes
    it) with ``step_ms`` CPU milliseconds added to every step (:class:`CostlyStep`).

    Raises:
        ConfigError: as :func:`rlplat.envs.gym.make_gym`, or for a negative ``step_ms``.
    """
    return CostlyStep(make_gym(id, max_episode_steps, kwargs, render_mode), step_ms)
