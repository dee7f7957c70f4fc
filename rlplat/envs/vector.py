"""Gymnasium vector env -> torch tensors, with correct next observations across autoreset.

Gymnasium 1.x vector envs autoreset in NEXT_STEP mode by default: the step after an
episode ends returns the reset observation and a dummy reward. rlplat runs them in
SAME_STEP mode instead: the step that ends an episode returns the reset observation of the
next episode as ``observation`` and the true final observation in ``info["final_obs"]``.
:class:`VectorEnv` swaps the final observation back in, so that the caller always gets the
true next observation of every transition and, separately, the observation to act on next.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import Tensor

from rlplat.envs.base import (
    RAW_REWARD,
    Episode,
    Observation,
    StatefulEnv,
    Step,
    check_observation_space,
    observation_converter,
)
from rlplat.envs.pool import EnvPoolTask, EnvPoolVectorEnv
from rlplat.registry import ConfigError, check_at_least
from rlplat.signals import sigint_ignored
from rlplat.transforms.base import EnvTransform, TransformLike

VECTORIZATION = ("sync", "async")


class VectorEnv:
    """B copies of one env, stepped together, exchanging torch tensors.

    Implements :class:`rlplat.envs.base.VectorEnvLike`, the interface collectors use.

    Box actions are exchanged in the policy's normalised space ``[-1, 1]`` per dim, clipped
    and rescaled here to the env's bounds (unbounded dims pass through). Discrete actions
    are int64 indices, MultiDiscrete and MultiBinary ones int64 vectors. Observations keep
    their dtype (:func:`rlplat.envs.base.observation_dtype`: uint8 images stay uint8); a
    ``Dict`` observation is a TensorDict. Finished episodes, with undiscounted returns of the
    raw rewards (before transforms) and lengths in env steps, are recorded in ``finished``.

    The :class:`rlplat.transforms.base.EnvTransform` among ``transforms`` wrap each env as it
    is made (before vectorisation), in their order; the others map the batch afterwards.

    Args:
        make_env: Callable returning one ``gymnasium.Env``; or an
            :class:`rlplat.envs.pool.EnvPoolTask` to step EnvPool's C++ envs instead
            (``env.backend=envpool``).
        num_envs: Number of parallel envs B.
        transforms: Transforms applied to observations and rewards, in order.
        update_transforms: Whether this env updates the transforms' running statistics
            (True for training envs, False for evaluation envs).
        vectorization: ``"sync"`` (one process; best for cheap envs) or ``"async"`` (one
            subprocess per env).

    Raises:
        ConfigError: if ``num_envs`` < 1, ``vectorization`` is unknown, env transforms are
            asked of EnvPool's envs, or an observation entry is one no tensor holds (text
            not tokenised).
    """

    def __init__(
        self,
        make_env: Callable[[], gymnasium.Env] | EnvPoolTask,
        num_envs: int,
        transforms: Sequence[TransformLike] = (),
        update_transforms: bool = True,
        vectorization: str = "sync",
    ) -> None:
        check_at_least("collector.num_envs", num_envs)
        self.env: Any = vector_env(make_env, num_envs, transforms, vectorization)
        self.num_envs = num_envs
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        try:
            check_observation_space(self.observation_space)
        except TypeError as error:
            self.env.close()
            raise ConfigError(str(error)) from None
        self._to_tensor = observation_converter(self.observation_space)
        self.transforms = [t for t in transforms if not isinstance(t, EnvTransform)]
        self.update_transforms = update_transforms
        self._returns = np.zeros(num_envs)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self.finished: list[Episode] = []
        self._box = isinstance(self.action_space, gymnasium.spaces.Box)
        # MultiDiscrete and MultiBinary actions: policy index i of dim d is start[d] + i, in the space's dtype
        self._integer_offset: np.ndarray | None = None
        if isinstance(self.action_space, gymnasium.spaces.MultiDiscrete):
            self._integer_offset = np.asarray(self.action_space.start)
        elif isinstance(self.action_space, gymnasium.spaces.MultiBinary):
            self._integer_offset = np.zeros(self.action_space.shape, dtype=np.int64)
        if isinstance(self.action_space, gymnasium.spaces.Box):  # self._box, narrowing the space
            low, high = self.action_space.low, self.action_space.high
            bounded = np.isfinite(low) & np.isfinite(high)
            low, high = np.where(bounded, low, 0.0), np.where(bounded, high, 0.0)  # no inf - inf below
            # env action = clip(a, -1, 1) * scale + offset on bounded dims; a itself elsewhere
            self._scale = np.where(bounded, (high - low) / 2.0, 1.0).astype(self.action_space.dtype)
            self._offset = np.where(bounded, (high + low) / 2.0, 0.0).astype(self.action_space.dtype)
            self._bounded = bounded
            self._all_bounded = bool(bounded.all())

    def reset(self, seed: int | None = None) -> Observation:
        """Reset every env; env i is seeded ``seed + i``. Returns ``[B, *obs_shape]``."""
        observation, _ = self.env.reset(seed=seed)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return self._observation(self._to_tensor(observation), update=self.update_transforms)

    def step(self, action: Tensor) -> Step:
        """Step every env with ``action`` (``[B, action_dim]`` float or ``[B]`` int64).

        On the CPU the returned tensors share memory with the numpy arrays the envs returned
        (no copies); a caller that keeps them across steps copies them (collectors write
        them into their rollout storage).
        """
        observation, reward, terminated, truncated, info = self.env.step(self.to_env_action(action))
        done = terminated | truncated
        self._returns += _raw_rewards(reward, info, done) if RAW_REWARD in info else reward
        self._lengths += 1
        next_observation = observation
        if np.count_nonzero(done):  # SAME_STEP autoreset: swap the true final observations back in
            ended = np.flatnonzero(done)
            next_observation = _with_final(observation, ended, info["final_obs"])
            for i in ended:
                self.finished.append(Episode(int(i), float(self._returns[i]), int(self._lengths[i])))
            self._returns[ended] = 0.0
            self._lengths[ended] = 0

        reward_t = _float_tensor(reward[:, None])
        if self.transforms:
            done_t = torch.from_numpy(done[:, None])
            for transform in self.transforms:
                reward_t = transform.transform_reward(reward_t, done_t, update=self.update_transforms)
        # statistics are updated once, from the observations the policy acts on next
        observation_t = self._observation(self._to_tensor(observation), update=self.update_transforms)
        next_observation_t = (
            self._observation(self._to_tensor(next_observation), update=False)
            if next_observation is not observation
            else observation_t
        )
        return Step(
            next_observation_t,
            reward_t,
            torch.from_numpy(terminated[:, None]),
            torch.from_numpy(truncated[:, None]),
            observation_t,
        )

    def to_env_action(self, action: Tensor) -> np.ndarray:
        """Policy action -> the env's action: Box actions clipped to [-1, 1] and rescaled."""
        env_action = (action if action.device.type == "cpu" else action.cpu()).detach().numpy()
        if not self._box:
            return (
                env_action
                if self._integer_offset is None
                else (env_action + self._integer_offset).astype(self.action_space.dtype)
            )
        scaled = env_action.clip(-1.0, 1.0).astype(self._scale.dtype, copy=False)
        scaled *= self._scale
        scaled += self._offset
        if self._all_bounded:
            return scaled
        return np.where(self._bounded, scaled, env_action).astype(self.action_space.dtype)

    def pop_finished(self) -> list[Episode]:
        """The episodes finished since the last call, in order of finishing; then forgets them."""
        finished, self.finished = self.finished, []
        return finished

    def close(self) -> None:
        """Close the underlying vector env and let go of its envs, so that native resources
        (ALE's emulators) are freed now, not at interpreter exit."""
        self.env.close()
        if isinstance(getattr(self.env, "envs", None), list):
            self.env.envs.clear()

    def state_dict(self) -> dict[str, Any]:
        """The episode accounting and, for ``sync`` vectorization, every env's state as plain
        data (see :func:`env_state`), so that a run resumed from a checkpoint continues its
        episodes exactly; ``envs`` is None for ``async`` envs, whose states live in
        subprocesses."""
        envs = getattr(self.env, "envs", None)
        return {
            "returns": torch.from_numpy(self._returns.copy()),
            "lengths": torch.from_numpy(self._lengths.copy()),
            "finished": [tuple(episode) for episode in self.finished],
            "envs": None if envs is None else [env_state(env) for env in envs],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns False (nothing restored) when the envs' states
        were not saved or these envs live in subprocesses: the caller then resets them."""
        envs = getattr(self.env, "envs", None)
        if envs is None or state.get("envs") is None or len(state["envs"]) != len(envs):
            return False
        for env, saved in zip(envs, state["envs"]):
            load_env_state(env, saved)
        self._returns[:] = state["returns"].numpy()
        self._lengths[:] = state["lengths"].numpy()
        self.finished = [Episode(*episode) for episode in state.get("finished", [])]
        return True

    def _observation(self, observation: Observation, update: bool) -> Observation:
        for transform in self.transforms:
            observation = transform.transform_observation(observation, update=update)
        return observation


def vector_env(
    make_env: Callable[[], gymnasium.Env] | EnvPoolTask,
    num_envs: int,
    transforms: Sequence[TransformLike],
    vectorization: str,
) -> Any:
    """The vector env of :class:`VectorEnv`: ``num_envs`` envs from ``make_env``, each wrapped by
    the env transforms among ``transforms``, in gymnasium's SAME_STEP autoreset mode (or
    EnvPool's).

    Raises:
        ConfigError: for an unknown ``vectorization``, or env transforms or ``async`` asked
            of EnvPool's envs.
    """
    wrappers = tuple(t for t in transforms if isinstance(t, EnvTransform))
    if isinstance(make_env, EnvPoolTask):
        if wrappers:
            names = ", ".join(type(t).__name__ for t in wrappers)
            raise ConfigError(
                f"env.backend=envpool: EnvPool's C++ envs take no env transforms ({names}); use env.backend=gymnasium"
            )
        if vectorization != "sync":
            raise ConfigError(
                f"collector.vectorization={vectorization!r}: env.backend=envpool steps its envs in "
                "threads of its own; use sync"
            )
        return EnvPoolVectorEnv(make_env, num_envs)
    if wrappers:
        make_env = functools.partial(wrapped_env, make_env, wrappers)
    if vectorization == "sync":
        return gymnasium.vector.SyncVectorEnv([make_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    if vectorization == "async":
        with sigint_ignored():  # by the workers: a Ctrl-C stops the run, which then closes them
            return gymnasium.vector.AsyncVectorEnv([make_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    raise ConfigError(f"collector.vectorization={vectorization!r}: valid: {', '.join(VECTORIZATION)}")


def wrapped_env(make_env: Callable[[], gymnasium.Env], transforms: Sequence[EnvTransform]) -> gymnasium.Env:
    """One env from ``make_env``, wrapped by each env transform in order."""
    env = make_env()
    for transform in transforms:
        env = transform.wrap(env)
    return env


def _raw_rewards(reward: np.ndarray, info: Mapping[str, Any], done: np.ndarray) -> np.ndarray:
    """The envs' own rewards where a wrapper passed them on in ``info`` (:data:`RAW_REWARD`),
    the returned ones elsewhere; an env that ended has its last step's info in ``final_info``."""
    raw = np.where(info.get("_" + RAW_REWARD, False), info.get(RAW_REWARD, reward), reward)
    final = info.get("final_info")
    if done.any() and isinstance(final, Mapping) and RAW_REWARD in final:
        raw = np.where(final["_" + RAW_REWARD] & done, final[RAW_REWARD], raw)
    return raw


def _with_final(observation: Any, ended: np.ndarray, final: Any) -> Any:
    """A copy of the batch ``observation`` (an array, or a dict of them for a ``Dict`` space)
    with row i replaced by ``final[i]``, the true final observation, for each i in ``ended``."""
    if isinstance(observation, dict):
        return {
            key: _with_final(value, ended, [None if f is None else f[key] for f in final])
            for key, value in observation.items()
        }
    swapped = observation.copy()
    for i in ended:
        swapped[i] = final[i]
    return swapped


def _float_tensor(array: np.ndarray) -> Tensor:
    """float32 tensor over ``array`` (no copy when it is float32 already)."""
    return torch.from_numpy(np.asarray(array, dtype=np.float32))


OWN_STATE = "__state_dict__"
"""Key of a layer's saved attributes under which a :class:`rlplat.envs.base.StatefulEnv` layer's
own ``state_dict()`` is kept."""
_SCALARS = (bool, int, float, str, type(None))
_NUMERIC = "biufc"
"""numpy dtype kinds a tensor holds (bool, integers, floats, complex); a map of bytes (FrozenLake's
``desc``) is a constant of the env, left out."""


def _encode(value: Any) -> tuple[bool, Any]:
    """``(True, plain data)`` for a value a checkpoint can hold without pickled objects:
    numbers, strings, None, numeric numpy arrays and scalars (as tensors), numpy generators (their
    bit generator's state), and tuples, lists and deques (a frame stack's) of these;
    ``(False, None)`` otherwise."""
    if isinstance(value, _SCALARS):
        return True, value
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC:
        return True, {"ndarray": torch.from_numpy(value.copy())}
    if isinstance(value, np.generic) and np.asarray(value).dtype.kind in _NUMERIC:
        return True, {"npscalar": torch.from_numpy(np.asarray(value).copy())}
    if isinstance(value, np.random.Generator):
        return True, {"generator": value.bit_generator.state}
    if isinstance(value, (tuple, list, collections.deque)):
        items = [_encode(item) for item in value]
        if all(ok for ok, _ in items):
            if isinstance(value, collections.deque):  # a frame stack's frames
                return True, {"deque": [item for _, item in items], "maxlen": value.maxlen}
            return True, {"tuple" if isinstance(value, tuple) else "list": [item for _, item in items]}
    return False, None


def _decode(value: Any, current: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "ndarray" in value:
        return value["ndarray"].numpy().copy()
    if "npscalar" in value:
        return value["npscalar"].numpy()[()]
    if "generator" in value:
        generator = current if isinstance(current, np.random.Generator) else np.random.default_rng()
        generator.bit_generator.state = value["generator"]
        return generator
    if "deque" in value:
        return collections.deque((_decode(item, None) for item in value["deque"]), maxlen=value["maxlen"])
    items = [_decode(item, None) for item in value.get("tuple", value.get("list")) or []]
    return tuple(items) if "tuple" in value else items


def env_state(env: gymnasium.Env) -> list[dict[str, Any]]:
    """The state of one env as plain data: for each layer of its wrapper chain, outermost
    first, every attribute that is data (positions, velocities, step counters, its random
    generator); renderers, spaces and other objects are left out.

    Enough for envs whose dynamics live in such attributes (gymnasium's classic control
    and toy text envs, most Python envs); a layer that holds state in other objects adds it
    by implementing :class:`rlplat.envs.base.StatefulEnv` (MiniGrid's grid); an env that keeps
    state in an outside engine resumes from the data it exposes only.
    """
    layers = []
    layer: Any = env
    while layer is not None:
        saved = {}
        for name, value in vars(layer).items():
            if name == "env":
                continue
            ok, encoded = _encode(value)
            if ok:
                saved[name] = encoded
        if isinstance(layer, StatefulEnv):
            saved[OWN_STATE] = layer.state_dict()
        layers.append(saved)
        layer = getattr(layer, "env", None) if isinstance(layer, gymnasium.Wrapper) else None
    return layers


def load_env_state(env: gymnasium.Env, layers: Sequence[Mapping[str, Any]]) -> None:
    """Restore :func:`env_state` into an env built the same way."""
    layer: Any = env
    for saved in layers:
        for name, value in saved.items():
            if name != OWN_STATE:
                setattr(layer, name, _decode(value, getattr(layer, name, None)))
        if OWN_STATE in saved and isinstance(layer, StatefulEnv):
            layer.load_state_dict(saved[OWN_STATE])
        layer = getattr(layer, "env", None) if isinstance(layer, gymnasium.Wrapper) else None
