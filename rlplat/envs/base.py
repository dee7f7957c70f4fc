"""What an env entry implements, and the env adapter's interface to collectors.

An env entry (entry-point group ``rlplat.envs``) is an :class:`EnvFactory`: it takes the
keyword arguments of the ``env`` YAML node and returns ONE ``gymnasium.Env``. rlplat makes
B copies of it, vectorises them and applies the configured transforms in its env adapter,
:class:`rlplat.envs.vector.VectorEnv`, which exchanges torch tensors with the collector.
What a collector may rely on from that adapter is :class:`VectorEnvLike`; :class:`Episode`
and :class:`Step` are the small types it hands out; :func:`space_shape` is a space's element
shape. Other packages import these from here,
never from :mod:`rlplat.envs.vector` (component packages only import each other's base.py).

Shapes use ``B`` for the number of parallel envs; key names are those of :mod:`rlplat.keys`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

Observation = Tensor | TensorDict
"""A batch of observations: a tensor ``[*batch, *obs_shape]`` for an array space (Box,
Discrete, MultiDiscrete, MultiBinary), a TensorDict of batch size ``batch`` for a ``Dict``
space, one entry per key (nested for nested Dicts), each with its own dtype
(:func:`observation_dtype`)."""


RAW_REWARD = "raw_reward"
"""Key of a step's ``info`` that holds the env's own reward where a wrapper changed it
(``transforms.reward_shaping``): episode returns sum it instead of the reward returned."""


@runtime_checkable
class StatefulEnv(Protocol):
    """A gymnasium env or wrapper that gives the part of its state held in objects as plain data.

    A checkpoint saves each layer of an env's wrapper chain by its attributes that are plain
    data (numbers, arrays, random generators: :func:`rlplat.envs.vector.env_state`); a layer
    whose state lives in other objects (MiniGrid's grid of world objects) implements this too,
    so that a resumed run goes on from the same state.
    """

    def state_dict(self) -> dict[str, Any]:
        """The state the attributes do not hold, as numbers, strings, lists and tensors."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into an env built the same way."""
        ...


class EnvFactory(Protocol):
    """An env entry: the ``env`` node's YAML keys -> one ``gymnasium.Env``.

    rlplat supplies nothing: every argument comes from YAML (all keys of the ``env`` node
    but ``name``, checked against this callable's signature before the call, so an unknown
    key is a ``ConfigError`` naming the valid ones). rlplat calls the factory once to read
    the spaces, then once per parallel env, possibly in a subprocess (``vectorization:
    async``), so it must be cheap to call and take picklable arguments.

    The env it returns must follow the gymnasium 1.x API:

    * ``observation_space``: a ``Box``, ``Discrete``, ``MultiDiscrete`` or ``MultiBinary``
      (observations become tensors ``[B, *obs_shape]`` in :func:`observation_dtype`: uint8
      images stay uint8, floats become float32), or a ``Dict`` of these (a TensorDict, one
      entry per key; text entries need a tokenising transform first); ``action_space``:
      ``Box`` (the policy acts in ``[-1, 1]`` per dim, rescaled to the bounds by rlplat),
      ``Discrete`` (int64 indices), ``MultiDiscrete`` or ``MultiBinary`` (int64 vectors).
    * ``reset(seed=..., options=None) -> (observation, info)``; a given seed makes the
      episode reproducible (env i of a vector env is reset with ``seed + i``).
    * ``step(action) -> (observation, reward, terminated, truncated, info)`` with a real
      ``reward`` and bool ``terminated`` (the MDP ended: no bootstrap) and ``truncated``
      (a time limit cut the episode: bootstrap), never merged into one ``done``.

    Raises:
        ConfigError: for a bad YAML value, naming the ``env.<key>``, the value and what is
            valid (``rlplat.registry.ConfigError``).
    """

    def __call__(self, **kwargs: Any) -> gymnasium.Env:
        """YAML keyword arguments -> a single, not yet reset ``gymnasium.Env``."""
        ...


class Episode(NamedTuple):
    """A finished training episode, as the adapter and collectors report it.

    Attributes:
        env: Index of the env in ``[0, B)`` that ran it.
        return_: Undiscounted sum of the raw rewards (before transforms).
        length: Its length, in env steps.
    """

    env: int
    return_: float
    length: int


class Step(NamedTuple):
    """One vector step; every tensor has leading dim B (number of envs).

    Attributes:
        next_observation: ``[B, *obs_shape]`` (an :data:`Observation`), the true next observation s_{t+1}
            (the final observation where the episode ended), transformed; it becomes
            ``("next", "observation")`` of the rollout.
        reward: ``[B, 1]`` float32 reward, transformed (e.g. scaled).
        terminated: ``[B, 1]`` bool, the MDP ended: do not bootstrap.
        truncated: ``[B, 1]`` bool, a time limit cut the episode: bootstrap.
        observation: ``[B, *obs_shape]`` (an :data:`Observation`), the observation to act on next (the reset
            observation where the episode ended), transformed.
    """

    next_observation: Observation
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    observation: Observation


@runtime_checkable
class VectorEnvLike(Protocol):
    """B copies of one env stepped together, exchanging torch tensors: what a collector uses.

    Implemented by :class:`rlplat.envs.vector.VectorEnv` (which autoresets every env in
    gymnasium's SAME_STEP mode and swaps the true final observation back in, so that
    :attr:`Step.next_observation` is always s_{t+1} of the transition just taken).
    A collector receives it from an :data:`rlplat.collectors.base.EnvMaker`.

    Attributes:
        num_envs: Number of parallel envs B.
        observation_space: The single env's observation space, transforms applied.
        action_space: The single env's action space (``Box``, ``Discrete``, ``MultiDiscrete``
            or ``MultiBinary``).
    """

    num_envs: int
    observation_space: gymnasium.Space
    action_space: gymnasium.Space

    def reset(self, seed: int | None = None) -> Observation:
        """Reset every env (env i seeded ``seed + i``); returns ``[B, *obs_shape]`` observations."""
        ...

    def step(self, action: Tensor) -> Step:
        """Step every env with the policy's ``action`` and autoreset the ones that ended.

        Args:
            action: ``[B, action_dim]`` float32 in the policy's normalised space ``[-1, 1]``
                (Box; clipped and rescaled to the env's bounds), ``[B]`` int64 (Discrete) or
                ``[B, n]`` int64 (MultiDiscrete, MultiBinary).

        Returns:
            The :class:`Step`, transforms applied.
        """
        ...

    def pop_finished(self) -> list[Episode]:
        """The episodes finished since the last call, in order of finishing; then forgets them."""
        ...

    def close(self) -> None:
        """Close the envs (and their subprocesses)."""
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """The envs' states as plain data and tensors, for an exact resume (``envs`` None
        when they cannot be saved, e.g. in subprocesses)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> bool:
        """Restore :meth:`state_dict`; False when nothing could be restored."""
        ...


def observation_dtype(space: gymnasium.Space) -> torch.dtype:
    """The dtype rlplat keeps observations of an array space in: ``uint8`` for a Box of
    ``uint8`` (images stay one byte per pixel in rollouts and replay; the networks scale
    them), ``bool`` for booleans, ``int64`` for other integers (Discrete, MultiDiscrete,
    MultiBinary, integer Boxes), ``float32`` for floating-point Boxes.

    Raises:
        TypeError: for a space without an array dtype (Text, Graph, Sequence, a Dict).
    """
    dtype = getattr(space, "dtype", None)
    if dtype is None or isinstance(space, gymnasium.spaces.Dict):
        raise TypeError(f"{space} has no array dtype")
    kind = np.dtype(dtype).kind
    if np.dtype(dtype) == np.uint8:
        return torch.uint8
    if kind == "b":
        return torch.bool
    if kind in "iu":
        return torch.int64
    if kind == "f":
        return torch.float32
    raise TypeError(f"{space} has dtype {dtype}, which no tensor rlplat keeps holds")


def check_observation_space(space: gymnasium.Space, path: str = "") -> None:
    """Raise TypeError naming the entry (``observation.<key>``) of a space whose elements no
    tensor holds: text (gymnasium's ``Text``, MiniGrid's ``MissionSpace``), ``Graph``,
    ``Sequence``, ``Tuple``. A ``Dict`` is checked entry by entry."""
    if isinstance(space, gymnasium.spaces.Dict):
        for key, sub in space.spaces.items():
            check_observation_space(sub, f"{path}.{key}" if path else str(key))
        return
    try:
        observation_dtype(space)
        space_shape(space)
    except TypeError:
        where = f"observation entry {path!r}" if path else "the observation"
        raise TypeError(
            f"{where} is {type(space).__name__} ({space}), which no tensor holds"
            + (": tokenise text with transforms.tokenize" if _is_text(space) else "")
        ) from None


def _is_text(space: gymnasium.Space) -> bool:
    return isinstance(space, gymnasium.spaces.Text) or type(space).__name__ == "MissionSpace"


def render_offscreen() -> None:
    """Let envs render ``rgb_array`` frames without a display: where there is none, SDL
    (pygame, which gymnasium's classic-control renderers use) draws off screen instead of
    probing for one and printing errors on stderr; pygame's banner is left out."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


def observation_converter(space: gymnasium.Space) -> Callable[[Any], Observation]:
    """A converter of a batch of observations of ``space`` as the vector env returns them (an
    array ``[B, *obs_shape]``, or for a ``Dict`` space a dict of such arrays) -> an
    :data:`Observation` with batch size ``[B]``, in :func:`observation_dtype` (no copy where
    the array has that dtype already). What depends on the space alone is worked out once,
    here: the env adapter converts every step's observations with it."""
    if isinstance(space, gymnasium.spaces.Dict):
        converters = {key: observation_converter(sub) for key, sub in space.spaces.items()}

        def convert_dict(value: Any) -> Observation:
            entries = {key: convert(value[key]) for key, convert in converters.items()}
            return TensorDict(entries, batch_size=next(iter(entries.values())).shape[:1])

        return convert_dict
    target = torch.empty((), dtype=observation_dtype(space)).numpy().dtype
    return lambda value: torch.from_numpy(np.asarray(value, dtype=target))


def observation_zeros(space: gymnasium.Space, batch: tuple[int, ...]) -> Observation:
    """Zeros for a batch ``batch`` of observations of ``space``, as :func:`observation_converter`
    gives them (storage a collector or a buffer fills)."""
    if isinstance(space, gymnasium.spaces.Dict):
        entries = {key: observation_zeros(sub, batch) for key, sub in space.spaces.items()}
        return TensorDict(entries, batch_size=batch)
    return torch.zeros(*batch, *space_shape(space), dtype=observation_dtype(space))


def action_zeros(space: gymnasium.Space, batch: tuple[int, ...]) -> Tensor:
    """Zeros for a batch of actions of ``space`` as policies return them: ``[*batch]`` int64
    (Discrete), ``[*batch, n]`` int64 (MultiDiscrete, MultiBinary), ``[*batch, *shape]``
    float32 (Box)."""
    if isinstance(space, gymnasium.spaces.Discrete):
        return torch.zeros(*batch, dtype=torch.int64)
    if isinstance(space, gymnasium.spaces.MultiDiscrete | gymnasium.spaces.MultiBinary):
        return torch.zeros(*batch, *space_shape(space), dtype=torch.int64)
    return torch.zeros(*batch, *space_shape(space))


def observation_leaves(observation: Observation) -> list[Tensor]:
    """The tensors of a batch of observations, in a fixed order (sorted leaf keys of a
    TensorDict): what a collector writes into its storage one by one."""
    if isinstance(observation, Tensor):
        return [observation]
    return [observation.get(key) for key in sorted(observation.keys(True, True), key=str)]


def space_shape(space: gymnasium.Space) -> tuple[int, ...]:
    """The shape of one element of ``space``: ``obs_shape`` of a ``Box``, ``()`` of a ``Discrete``.

    gymnasium types ``Space.shape`` as optional: it is None for spaces whose elements have no
    fixed shape (``Dict``, ``Tuple``, ``Graph``, ``Sequence``, ``Text``), which no tensor holds.

    Raises:
        TypeError: for such a space.
    """
    if space.shape is None:
        raise TypeError(f"{space} has no fixed shape; rlplat needs a Box or Discrete space")
    return space.shape
