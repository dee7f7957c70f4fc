"""Conformance check of a transform entry (:class:`rlplat.transforms.base.TransformFactory`)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import torch

from rlplat.testing._common import (
    OBSERVATION_SPACE,
    Entry,
    Subject,
    observation_batch,
    savable,
    shape_text,
    subject,
)
from rlplat.testing.envs import check_env
from rlplat.transforms.base import EnvTransform, TransformLike


def check_transform(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    observation_space: gymnasium.Space = OBSERVATION_SPACE,
    num_envs: int = 4,
    steps: int = 8,
    seed: int = 0,
    make_env: Callable[[], gymnasium.Env] | None = None,
) -> None:
    """Check a transform entry the way rlplat's env adapter and checkpoint use it.

    Builds the transform through the registry as rlplat does, ``(observation_space,
    **kwargs)`` under the config key ``transforms.<name>``, and checks:

    * it implements :class:`rlplat.transforms.base.TransformLike` (every missing member named);
    * over ``steps`` vector steps with ``update=True``, ``transform_observation`` maps
      ``[B, *obs_shape]`` float32 to the same shape, float32, finite, and
      ``transform_reward`` maps ``[B, 1]`` float32 rewards (with ``[B, 1]`` bool episode
      ends, some true) to ``[B, 1]`` float32, finite;
    * with ``update=False`` (evaluation envs) its ``state_dict`` does not change;
    * ``state_dict`` round trip: the state is a mapping ``torch.save`` can write, and a
      fresh instance loading it maps observations and rewards exactly as the original does.

    An env transform (:class:`rlplat.transforms.base.EnvTransform`) is built with the
    observation space of ``make_env``'s env instead, and checked where it acts: it pickles
    (``collector.vectorization=async`` sends it to subprocesses), and the env it wraps passes
    :func:`rlplat.testing.check_env` (spaces, seeded resets, steps, rlplat's env adapter).

    Args:
        entry: Registered transform name, or the constructor itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored).
        observation_space: The env observation space rlplat would supply.
        num_envs: B, the envs per vector step.
        steps: Vector steps fed with ``update=True``.
        seed: Seed of the inputs.
        make_env: Makes the env an env transform wraps (in the render mode it needs); required for one.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the constructor's signature, as in a run.
    """
    transform_entry = subject("transform", entry)

    def build() -> TransformLike:
        return transform_entry.build(kwargs, observation_space, key=f"transforms.{transform_entry.name}")

    observation_space = observation_space if make_env is None else _space_of(make_env)
    with transform_entry.running(f"the constructor (observation_space={observation_space})"):
        transform = build()
    transform_entry.conforms(transform, TransformLike)
    if isinstance(transform, EnvTransform):
        _check_env_transform(transform_entry, transform, make_env, seed, steps, num_envs)
    else:
        _check_batches(transform_entry, transform, build, observation_space, num_envs, steps, seed)


def _check_batches(
    transform_entry: Subject,
    transform: TransformLike,
    build: Callable[[], TransformLike],
    observation_space: gymnasium.Space,
    num_envs: int,
    steps: int,
    seed: int,
) -> None:
    """A transform over the batch: ``steps`` vector steps with ``update=True``, then its state."""
    observation = observation_batch(observation_space, (steps, num_envs), seed) * 3.0 + 1.0
    generator = torch.Generator().manual_seed(seed)
    reward = torch.randn(steps, num_envs, 1, generator=generator) * 5.0 + 2.0
    done = torch.rand(steps, num_envs, 1, generator=generator) < 0.25
    done[steps // 2, 0] = True
    for t in range(steps):
        _apply(transform_entry, transform, observation[t], reward[t], done[t], update=True)
    _check_state(transform_entry, transform, build, (observation[-1], reward[-1], done[-1]))


def _space_of(make_env: Callable[[], gymnasium.Env]) -> gymnasium.Space:
    """The observation space of the env ``make_env`` makes."""
    env = make_env()
    try:
        return env.observation_space
    finally:
        env.close()


def _check_env_transform(
    transform_entry: Subject,
    transform: EnvTransform,
    make_env: Callable[[], gymnasium.Env] | None,
    seed: int,
    steps: int,
    num_envs: int,
) -> None:
    """An env transform pickles, and the env it wraps passes the env kit."""
    transform_entry.expect(make_env is not None, "is an env transform: check it with make_env, the env it wraps")
    assert make_env is not None
    with transform_entry.running("pickle.dumps (async vectorization sends it to subprocesses)"):
        pickle.loads(pickle.dumps(transform))

    def wrapped() -> gymnasium.Env:
        return transform.wrap(make_env())

    wrapped.__name__ = f"{transform_entry.name} over {make_env.__name__}"
    check_env(wrapped, seed=seed, steps=steps, num_envs=num_envs)


def _check_state(
    transform_entry: Subject,
    transform: TransformLike,
    build: Callable[[], TransformLike],
    step: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    """``update=False`` keeps the state; a fresh instance loading the state maps ``step`` alike."""
    before = copy.deepcopy(dict(transform.state_dict()))
    _apply(transform_entry, transform, *step, update=False)
    changed = _changed(before, transform.state_dict())
    transform_entry.expect(not changed, f"update=False changed its state_dict at {changed}; evaluation envs must not")

    state = transform.state_dict()
    savable(transform_entry, state, "state_dict()")
    with transform_entry.running("load_state_dict(state_dict()) on a fresh instance"):
        fresh = build()
        fresh.load_state_dict(state)
    expected = _apply(transform_entry, transform, *step, update=False)
    got = _apply(transform_entry, fresh, *step, update=False)
    for what, a, b in zip(("observations", "rewards"), expected, got):
        transform_entry.expect(
            torch.equal(a, b), f"after a state_dict round trip a fresh instance maps {what} differently"
        )


def _apply(
    transform_entry: Subject,
    transform: TransformLike,
    observation: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    update: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One vector step through the transform; checks and returns both outputs."""
    with transform_entry.running(f"transform_observation({shape_text(observation.shape)} float32, update={update})"):
        new_observation = transform.transform_observation(observation.clone(), update=update)
    _expect_like(transform_entry, "transform_observation", new_observation, observation)
    with transform_entry.running(f"transform_reward({shape_text(reward.shape)} float32, done, update={update})"):
        new_reward = transform.transform_reward(reward.clone(), done.clone(), update=update)
    _expect_like(transform_entry, "transform_reward", new_reward, reward)
    return new_observation, new_reward


def _expect_like(transform_entry: Subject, what: str, value: Any, like: torch.Tensor) -> None:
    transform_entry.expect(
        isinstance(value, torch.Tensor) and value.shape == like.shape and value.dtype == torch.float32,
        f"{what} returned {_describe(value)} for input {shape_text(like.shape)} float32; "
        "the shape and dtype must be kept",
    )
    transform_entry.expect(bool(torch.isfinite(value).all()), f"{what} returned NaN or inf")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{shape_text(value.shape)} {value.dtype}"
    return type(value).__name__


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Keys whose value differs between two state dicts (or that one of them lacks)."""
    keys = set(before) | set(after)
    return sorted(key for key in keys if key not in before or key not in after or not _equal(before[key], after[key]))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):  # e.g. a module's extra state
        return set(a) == set(b) and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (values that do not compare count as changed)
        return False
