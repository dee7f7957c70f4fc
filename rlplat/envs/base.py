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

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium
from torch import Tensor


class EnvFactory(Protocol):
    """An env entry: the ``env`` node's YAML keys -> one ``gymnasium.Env``.

    rlplat supplies nothing: every argument comes from YAML (all keys of the ``env`` node
    but ``name``, checked against this callable's signature before the call, so an unknown
    key is a ``ConfigError`` naming the valid ones). rlplat calls the factory once to read
    the spaces, then once per parallel env, possibly in a subprocess (``vectorization:
    async``), so it must be cheap to call and take picklable arguments.

    The env it returns must follow the gymnasium 1.x API:

    * ``observation_space``: a ``Box`` (observations are converted to float32 tensors
      ``[B, *obs_shape]``); ``action_space``: ``Box`` (the policy acts in ``[-1, 1]`` per
      dim, rescaled to the bounds by rlplat) or ``Discrete`` (int64 indices).
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
        next_observation: ``[B, *obs_shape]`` float32, the true next observation s_{t+1}
            (the final observation where the episode ended), transformed; it becomes
            ``("next", "observation")`` of the rollout.
        reward: ``[B, 1]`` float32 reward, transformed (e.g. scaled).
        terminated: ``[B, 1]`` bool, the MDP ended: do not bootstrap.
        truncated: ``[B, 1]`` bool, a time limit cut the episode: bootstrap.
        observation: ``[B, *obs_shape]`` float32, the observation to act on next (the reset
            observation where the episode ended), transformed.
    """

    next_observation: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    observation: Tensor


@runtime_checkable
class VectorEnvLike(Protocol):
    """B copies of one env stepped together, exchanging torch tensors: what a collector uses.

    Implemented by :class:`rlplat.envs.vector.VectorEnv` (which autoresets every env in
    gymnasium's SAME_STEP mode and swaps the true final observation back in, so that
    :attr:`Step.next_observation` is always s_{t+1} of the transition just taken).
    A collector receives it from an :data:`rlplat.collectors.base.EnvMaker`.

    Attributes:
        num_envs: Number of parallel envs B.
        observation_space: The single env's observation space (a ``Box``).
        action_space: The single env's action space (``Box`` or ``Discrete``).
    """

    num_envs: int
    observation_space: gymnasium.Space
    action_space: gymnasium.Space

    def reset(self, seed: int | None = None) -> Tensor:
        """Reset every env (env i seeded ``seed + i``); returns ``[B, *obs_shape]`` float32."""
        ...

    def step(self, action: Tensor) -> Step:
        """Step every env with the policy's ``action`` and autoreset the ones that ended.

        Args:
            action: ``[B, action_dim]`` float32 in the policy's normalised space ``[-1, 1]``
                (Box; clipped and rescaled to the env's bounds) or ``[B]`` int64 (Discrete).

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
