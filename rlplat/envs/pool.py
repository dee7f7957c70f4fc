"""EnvPool as the training envs' engine (``env.backend=envpool``): C++ vector envs, stepped in
threads outside Python's interpreter lock, for the gymnasium ids EnvPool implements (classic
control, MuJoCo, Atari, ...). Install with ``pip install 'rlplat[envpool]'``.

EnvPool autoresets an env on the step after its episode ended (gymnasium's NEXT_STEP mode),
returning the true final observation at the end. :class:`EnvPoolVectorEnv` resets the
finished envs at once instead and hands over their final observations in
``info["final_obs"]``, as gymnasium's SAME_STEP mode does, so that
:class:`rlplat.envs.vector.VectorEnv` treats both engines alike. Evaluation envs stay
gymnasium's (their seeded resets are what make evaluations reproducible); EnvPool ports the
same dynamics.

Limits: an env's internal state cannot be saved, so a resumed run starts new episodes
(as with ``collector.vectorization=async``), and the envs are seeded when the pool is made
(a reset with a seed makes a new pool).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlplat.envs.gym import check_time_limit
from rlplat.registry import ConfigError, closest

INSTALL = "pip install 'rlplat[envpool]'"


@dataclass(frozen=True)
class EnvPoolTask:
    """What the ``env`` node asks EnvPool for.

    Attributes:
        id: The gymnasium id (``env.id``), e.g. ``CartPole-v1``.
        max_episode_steps: Time limit in env steps; None keeps the task's own.
        kwargs: EnvPool's options for the task (``env.kwargs``, see :func:`check_options`):
            its threads' (``num_threads``, ``thread_affinity_offset``) and the task's own.
    """

    id: str
    max_episode_steps: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_node(cls, env_node: Mapping[str, Any]) -> EnvPoolTask:
        """The task of an ``env`` node with ``backend: envpool``.

        Raises:
            ConfigError: when the node is not the ``gym`` entry (EnvPool knows gymnasium ids,
                not plugin envs), EnvPool is not installed, it does not know the id (with
                the closest ids it knows), or ``env.kwargs`` fail :func:`check_options`.
        """
        if env_node.get("name") != "gym":
            raise ConfigError(
                f"env.backend=envpool: env {env_node.get('name')!r} is no gymnasium id; EnvPool runs the ids "
                "it implements (env=cartpole, env=pendulum, or env=gym env.id=...)"
            )
        try:
            import envpool
        except ImportError:
            raise ConfigError(f"env.backend=envpool: the envpool package is not installed: {INSTALL}") from None
        env_id = str(env_node.get("id"))
        known = envpool.list_all_envs()
        if env_id not in known:
            suggestion = closest(env_id, known)
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            raise ConfigError(f"env.backend=envpool: EnvPool has no task env.id={env_id!r}.{hint}")
        kwargs = dict(env_node.get("kwargs") or {})
        check_options(env_id, kwargs, envpool.make_spec(env_id).config._fields)
        check_time_limit(env_node.get("max_episode_steps"), "the task's own")
        return cls(env_id, env_node.get("max_episode_steps"), kwargs)


THREAD_OPTIONS = ("num_threads", "thread_affinity_offset")
"""EnvPool's options for its threads, not for the env: they reach EnvPool alone
(:data:`rlplat.envs.probe.ENGINE_OPTIONS`)."""

# EnvPool's options that rlplat sets itself, and the key that sets each
SET_BY_RLPLAT = {
    "num_envs": "collector.num_envs",
    "batch_size": "collector.num_envs (every step steps every env)",
    "seed": "seed",
    "env_seed": "seed",
    "max_episode_steps": "env.max_episode_steps",
    "max_num_players": "nothing (one agent per env)",
    "base_path": "nothing (EnvPool's own assets)",
    "gym_reset_return_info": "nothing (gymnasium's reset)",
}


def check_options(env_id: str, kwargs: Mapping[str, Any], options: Sequence[str]) -> None:
    """Check ``env.kwargs`` against the ``options`` EnvPool's task ``env_id`` takes.

    ``num_threads`` (int >= 1) and ``thread_affinity_offset`` (int >= -1, -1 for none) set
    EnvPool's threads (:data:`THREAD_OPTIONS`); the task's own options
    (e.g. MuJoCo's ``ctrl_cost_weight``) go to the evaluation envs as well.

    Raises:
        ConfigError: for an option rlplat sets itself (naming the key that sets it), one the
            task does not take (listing those it takes), or a thread setting that is not such
            an int.
    """
    for key, value in kwargs.items():
        if key in SET_BY_RLPLAT:
            raise ConfigError(f"env.kwargs.{key}={value!r}: rlplat sets EnvPool's {key}; set {SET_BY_RLPLAT[key]}")
        if key not in options:
            threads = ", ".join(THREAD_OPTIONS)
            task = ", ".join(o for o in options if o not in SET_BY_RLPLAT and o not in THREAD_OPTIONS)
            raise ConfigError(
                f"env.kwargs.{key}: EnvPool's {env_id!r} has no such option; it takes {threads}, and those of "
                f"its own ({task or 'none'}) that gymnasium's env takes too (they go to the evaluation envs)"
            )
    for key, least in (("num_threads", 1), ("thread_affinity_offset", -1)):
        value = kwargs.get(key, least)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"env.kwargs.{key}={value!r}: must be an int >= {least}")


class EnvPoolVectorEnv:
    """B envs of one EnvPool task, with gymnasium's SAME_STEP autoreset.

    Args:
        task: The task.
        num_envs: Parallel envs B.
        seed: Seed of the pool (env i gets ``seed + i``, EnvPool's rule).

    Attributes:
        num_envs: B.
        single_observation_space: One env's observation space.
        single_action_space: One env's action space.
    """

    def __init__(self, task: EnvPoolTask, num_envs: int, seed: int = 0) -> None:
        self.task = task
        self.num_envs = num_envs
        self._pool = self._make(seed)
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space

    def _make(self, seed: int) -> Any:
        import envpool

        options: dict[str, Any] = {"num_threads": min(self.num_envs, os.cpu_count() or 1), **self.task.kwargs}
        if self.task.max_episode_steps is not None:
            options["max_episode_steps"] = self.task.max_episode_steps
        try:
            pool = envpool.make(self.task.id, env_type="gymnasium", num_envs=self.num_envs, seed=seed, **options)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ConfigError(
                f"env.kwargs={self.task.kwargs!r} rejected by EnvPool's {self.task.id!r}: {error}"
            ) from None
        with warnings.catch_warnings():
            # a pool builds its gymnasium spaces on first use (and keeps them) from bounds in
            # float64 for spaces in float32; gymnasium warns of that cast for every pool, which
            # nobody running rlplat can act on
            warnings.filterwarnings("ignore", ".*precision lowered by casting to float32", UserWarning)
            pool.observation_space, pool.action_space  # noqa: B018  # built here, under the filter
        return pool

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env; with a seed, in a new pool seeded ``seed``."""
        if seed is not None:
            self._pool.close()
            self._pool = self._make(seed)
        observation, info = self._pool.reset()
        return observation, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env; the envs whose episode ended are reset at once, their final
        observations in ``info["final_obs"]`` (a row per env, None where none ended)."""
        observation, reward, terminated, truncated, info = self._pool.step(action)
        done = terminated | truncated
        if done.any():
            ended = np.flatnonzero(done)
            final = np.empty(self.num_envs, dtype=object)
            final[ended] = list(observation[ended])
            observation = observation.copy()
            observation[ended] = self._pool.reset(ended)[0]
            info = {**info, "final_obs": final}
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Stop the pool's threads."""
        self._pool.close()
