"""Conformance check of an env entry (:class:`rlplat.envs.base.EnvFactory`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
import torch

from rlplat.envs.base import space_shape
from rlplat.envs.vector import VectorEnv
from rlplat.testing._common import Entry, Subject, shape_text, subject


def check_env(
    entry: Entry, kwargs: Mapping[str, Any] | None = None, *, seed: int = 0, steps: int = 50, num_envs: int = 2
) -> None:
    """Check an env entry the way rlplat uses it.

    Builds one env through the registry with ``kwargs`` (the ``env`` YAML node's keys;
    unknown or missing keys fail as they would in a run) and checks:

    * the factory returns a ``gymnasium.Env``;
    * ``observation_space`` is a ``Box``; ``action_space`` is a ``Box`` with one dim or a
      ``Discrete`` (what rlplat's losses act in);
    * ``reset(seed=seed)`` returns ``(observation, info)`` with the observation in
      ``observation_space`` and a dict info, and the same observation when reset with the
      same seed again;
    * ``steps`` random steps return ``(observation, reward, terminated, truncated, info)``
      with the observation in the space, a finite real reward and bool ``terminated`` and
      ``truncated`` (resetting where an episode ends);
    * rlplat's env adapter (:class:`rlplat.envs.vector.VectorEnv`, ``num_envs`` copies)
      resets and steps it, with float32 tensors ``[B, *obs_shape]``, ``[B, 1]`` rewards and
      ``[B, 1]`` bool flags.

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


def _check_spaces(env_entry: Subject, env: gymnasium.Env) -> gymnasium.spaces.Box:
    """Check the spaces; returns the observation space, a Box."""
    observation_space, action_space = env.observation_space, env.action_space
    if not isinstance(observation_space, gymnasium.spaces.Box):
        env_entry.fail(
            f"observation_space is {observation_space}; rlplat needs a Box (observations become float32 "
            "tensors [B, *obs_shape])"
        )
    env_entry.expect(
        isinstance(action_space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete)),
        f"action_space is {action_space}; rlplat's losses act in a Box or a Discrete space",
    )
    if isinstance(action_space, gymnasium.spaces.Box):
        env_entry.expect(len(action_space.shape) == 1, f"action_space {action_space} must have one dim: [action_dim]")
    return observation_space


def _in_space(env_entry: Subject, space: gymnasium.spaces.Box, observation: Any, what: str) -> None:
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


def _check_reset(env_entry: Subject, env: gymnasium.Env, observation_space: gymnasium.spaces.Box, seed: int) -> None:
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
        np.array_equal(np.asarray(observation), np.asarray(again[0])),
        f"reset(seed={seed}) twice gave different observations; the seed must make the episode reproducible",
    )


def _check_steps(
    env_entry: Subject, env: gymnasium.Env, observation_space: gymnasium.spaces.Box, seed: int, steps: int
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
        obs_shape = space_shape(env.observation_space)
        with env_entry.running("VectorEnv.reset"):
            observation = env.reset(seed=seed)
        _expect_tensor(env_entry, "VectorEnv.reset observation", observation, (num_envs, *obs_shape), torch.float32)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            if isinstance(env.action_space, gymnasium.spaces.Discrete):
                action = torch.randint(int(env.action_space.n), (num_envs,), generator=generator)
            else:
                action = torch.rand(num_envs, *space_shape(env.action_space), generator=generator) * 2 - 1
            with env_entry.running("VectorEnv.step"):
                step = env.step(action)
            for field, shape, dtype in (
                ("next_observation", (num_envs, *obs_shape), torch.float32),
                ("reward", (num_envs, 1), torch.float32),
                ("terminated", (num_envs, 1), torch.bool),
                ("truncated", (num_envs, 1), torch.bool),
                ("observation", (num_envs, *obs_shape), torch.float32),
            ):
                _expect_tensor(env_entry, f"VectorEnv.step {field}", getattr(step, field), shape, dtype)
        env.pop_finished()
    finally:
        env.close()


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
