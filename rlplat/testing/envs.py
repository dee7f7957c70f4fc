"""Conformance check of an env entry (:class:`rlplat.envs.base.EnvFactory`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict

from rlplat.envs.base import check_observation_space, observation_dtype, space_shape
from rlplat.envs.vector import VectorEnv
from rlplat.testing._common import Entry, Subject, shape_text, subject


def check_env(
    entry: Entry, kwargs: Mapping[str, Any] | None = None, *, seed: int = 0, steps: int = 50, num_envs: int = 2
) -> None:
    """Check an env entry the way rlplat uses it.

    Builds one env through the registry with ``kwargs`` (the ``env`` YAML node's keys;
    unknown or missing keys fail as they would in a run) and checks:

    * the factory returns a ``gymnasium.Env``;
    * ``observation_space`` is a ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``
      or a ``Dict`` of these; ``action_space`` is a ``Box`` with one dim, a ``Discrete``, a
      ``MultiDiscrete`` or a ``MultiBinary`` (what rlplat's losses act in);
    * ``reset(seed=seed)`` returns ``(observation, info)`` with the observation in
      ``observation_space`` and a dict info, and the same observation when reset with the
      same seed again;
    * ``steps`` random steps return ``(observation, reward, terminated, truncated, info)``
      with the observation in the space, a finite real reward and bool ``terminated`` and
      ``truncated`` (resetting where an episode ends);
    * rlplat's env adapter (:class:`rlplat.envs.vector.VectorEnv`, ``num_envs`` copies)
      resets and steps it, with observations ``[B, *obs_shape]`` in their dtype
      (:func:`rlplat.envs.base.observation_dtype`; a TensorDict for a ``Dict``), float32
      ``[B, 1]`` rewards and ``[B, 1]`` bool flags.

    Args:
        entry: Registered env name, or the factory itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored).
        seed: Seed of the resets and of the random actions.
        steps: Env steps taken, by the single env and by the vectorised one.
        num_envs: Copies in the vectorised check.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the factory's signature, as in a run.
    """
    env_entry = subject("env", entry)
    with env_entry.running("the factory"):
        env = env_entry.build(kwargs)
    env_entry.expect(isinstance(env, gymnasium.Env), f"the factory returned {type(env).__name__}, not a gymnasium.Env")
    try:
        observation_space = _check_spaces(env_entry, env)
        _check_reset(env_entry, env, observation_space, seed)
        _check_steps(env_entry, env, observation_space, seed, steps)
    finally:
        env.close()
    _check_vectorised(env_entry, kwargs, seed, steps, num_envs)


def _check_spaces(env_entry: Subject, env: gymnasium.Env) -> gymnasium.Space:
    """Check the spaces; returns the observation space."""
    observation_space, action_space = env.observation_space, env.action_space
    try:
        check_observation_space(observation_space)
    except TypeError as error:
        env_entry.fail(
            f"observation_space is {observation_space}: {error}; rlplat takes Box, Discrete, MultiDiscrete and "
            "MultiBinary observations, and Dicts of them"
        )
    env_entry.expect(
        isinstance(action_space, ACTION_SPACES),
        f"action_space is {action_space}; rlplat's losses act in a Box, Discrete, MultiDiscrete or MultiBinary space",
    )
    if isinstance(action_space, gymnasium.spaces.Box):
        env_entry.expect(len(action_space.shape) == 1, f"action_space {action_space} must have one dim: [action_dim]")
    return observation_space


ACTION_SPACES = (
    gymnasium.spaces.Box,
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)
"""The action spaces some built-in loss acts in."""


def _in_space(env_entry: Subject, space: gymnasium.Space, observation: Any, what: str) -> None:
    if not isinstance(space, gymnasium.spaces.Box):
        env_entry.expect(
            space.contains(observation), f"{what} returned an observation outside observation_space {space}"
        )
        return
    observation = np.asarray(observation)
    env_entry.expect(
        observation.shape == space.shape,
        f"{what} returned an observation of shape {shape_text(observation.shape)}; "
        f"observation_space has {shape_text(space.shape)}",
    )
    env_entry.expect(
        space.contains(observation.astype(space.dtype)),
        f"{what} returned an observation outside observation_space {space}: {observation}",
    )


def _same(a: Any, b: Any) -> bool:
    """Whether two observations (arrays, or dicts of them) are equal."""
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def _check_reset(env_entry: Subject, env: gymnasium.Env, observation_space: gymnasium.Space, seed: int) -> None:
    with env_entry.running(f"reset(seed={seed})"):
        result = env.reset(seed=seed)
        again = env.reset(seed=seed)
    env_entry.expect(
        isinstance(result, tuple) and len(result) == 2,
        "reset() must return (observation, info), the gymnasium 1.x API",
    )
    observation, info = result
    _in_space(env_entry, observation_space, observation, "reset()")
    env_entry.expect(isinstance(info, dict), f"reset() returned info of type {type(info).__name__}, not a dict")
    env_entry.expect(
        _same(observation, again[0]),
        f"reset(seed={seed}) twice gave different observations; the seed must make the episode reproducible",
    )


def _check_steps(
    env_entry: Subject, env: gymnasium.Env, observation_space: gymnasium.Space, seed: int, steps: int
) -> None:
    env.action_space.seed(seed)
    for step in range(steps):
        with env_entry.running(f"step() (step {step})"):
            result = env.step(env.action_space.sample())
        env_entry.expect(
            isinstance(result, tuple) and len(result) == 5,
            "step() must return (observation, reward, terminated, truncated, info), the gymnasium 1.x API",
        )
        observation, reward, terminated, truncated, info = result
        _in_space(env_entry, observation_space, observation, "step()")
        reward_array = np.asarray(reward)
        env_entry.expect(
            reward_array.ndim == 0 and reward_array.dtype.kind in "iuf" and np.isfinite(reward_array),
            f"step() returned reward {reward!r} of type {type(reward).__name__}; rlplat needs a finite real number",
        )
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            env_entry.expect(
                isinstance(value, (bool, np.bool_)),
                f"step() returned {flag}={value!r} of type {type(value).__name__}; it must be a bool",
            )
        env_entry.expect(isinstance(info, dict), f"step() returned info of type {type(info).__name__}, not a dict")
        if terminated or truncated:
            with env_entry.running("reset() after an episode ended"):
                env.reset()


def _check_vectorised(
    env_entry: Subject, kwargs: Mapping[str, Any] | None, seed: int, steps: int, num_envs: int
) -> None:
    with env_entry.running(f"rlplat's VectorEnv ({num_envs} envs)"):
        env = VectorEnv(lambda: env_entry.build(kwargs), num_envs)
    try:
        space = env.observation_space
        with env_entry.running("VectorEnv.reset"):
            observation = env.reset(seed=seed)
        _expect_observation(env_entry, "VectorEnv.reset observation", observation, space, num_envs)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            with env_entry.running("VectorEnv.step"):
                step = env.step(_random_actions(env.action_space, num_envs, generator))
            _expect_observation(env_entry, "VectorEnv.step next_observation", step.next_observation, space, num_envs)
            _expect_observation(env_entry, "VectorEnv.step observation", step.observation, space, num_envs)
            for field, shape, dtype in (
                ("reward", (num_envs, 1), torch.float32),
                ("terminated", (num_envs, 1), torch.bool),
                ("truncated", (num_envs, 1), torch.bool),
            ):
                _expect_tensor(env_entry, f"VectorEnv.step {field}", getattr(step, field), shape, dtype)
        env.pop_finished()
    finally:
        env.close()


def _random_actions(space: gymnasium.Space, num_envs: int, generator: torch.Generator) -> torch.Tensor:
    """``num_envs`` random actions as a policy gives them (:func:`rlplat.envs.base.action_zeros`)."""
    if isinstance(space, gymnasium.spaces.Discrete):
        return torch.randint(int(space.n), (num_envs,), generator=generator)
    if isinstance(space, gymnasium.spaces.MultiDiscrete | gymnasium.spaces.MultiBinary):
        high = torch.as_tensor(np.asarray(space.nvec if isinstance(space, gymnasium.spaces.MultiDiscrete) else 2))
        return (torch.rand(num_envs, *space_shape(space), generator=generator) * high).long()
    return torch.rand(num_envs, *space_shape(space), generator=generator) * 2 - 1


def _expect_observation(env_entry: Subject, what: str, value: Any, space: gymnasium.Space, num_envs: int) -> None:
    """An observation batch as :func:`rlplat.envs.base.observation_converter` gives it: a tensor
    ``[B, *shape]`` in :func:`rlplat.envs.base.observation_dtype`, or a TensorDict of them."""
    if isinstance(space, gymnasium.spaces.Dict):
        env_entry.expect(isinstance(value, TensorDict), f"{what} is {_describe(value)}; expected a TensorDict")
        for key, sub in space.spaces.items():
            _expect_observation(env_entry, f"{what}[{key!r}]", value.get(key), sub, num_envs)
        return
    _expect_tensor(env_entry, what, value, (num_envs, *space_shape(space)), observation_dtype(space))


def _expect_tensor(env_entry: Subject, what: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    env_entry.expect(
        isinstance(value, torch.Tensor) and tuple(value.shape) == shape and value.dtype == dtype,
        f"{what} is {_describe(value)}; expected {shape_text(shape)} {dtype}",
    )
    if dtype.is_floating_point:
        env_entry.expect(bool(torch.isfinite(value).all()), f"{what} holds NaN or inf: {value}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{shape_text(value.shape)} {value.dtype}"
    return type(value).__name__
