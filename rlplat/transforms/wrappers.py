"""Env transforms: gymnasium wrappers applied inside each env, before vectorisation.

Each class is a :class:`rlplat.transforms.base.EnvTransform` built once, as
``Cls(observation_space, **yaml)`` with the observation space of its input, and applied to
every env rlplat makes through :meth:`rlplat.transforms.base.EnvTransform.wrap`. Where
gymnasium has a correct wrapper it is used as it is (``AddRenderObservation``,
``ResizeObservation``, ``GrayscaleObservation``, ``FrameStackObservation``, ``TimeLimit``,
``ClipAction``, ``RescaleAction``); the others
(no-op reset, step counter with a time feature, reward shaping by a registered function)
are small wrappers here. The state a wrapper keeps (a frame stack, a step count) lives in
the wrapper's attributes, where :func:`rlplat.envs.vector.env_state` finds it.

Shapes: ``H, W`` pixels, ``C`` channels, ``k`` stacked frames; shapes are one env's.
"""

from __future__ import annotations

import importlib
import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces

from rlplat.envs.base import RAW_REWARD, render_offscreen
from rlplat.registry import ConfigError, Registry
from rlplat.transforms.base import EnvTransform

REWARD_FUNCTIONS = Registry("reward function", "rlplat.reward_functions")
"""Reward functions ``f(obs, action, reward, terminated) -> reward`` by name, for
``transforms.reward_shaping.function``: registered from code with
``@REWARD_FUNCTIONS.register("name")``, or declared by a distribution in the entry-point
group ``rlplat.reward_functions``."""


def _is_image(space: gymnasium.Space) -> bool:
    """A Box of 2 (``[H, W]``) or 3 (``[H, W, C]``) dimensions."""
    return isinstance(space, spaces.Box) and len(space.shape) in (2, 3)


def _pixel_bounds(space: spaces.Box) -> bool:
    """uint8 with bounds 0 and 255, as rendered frames and Atari screens are."""
    return space.dtype == np.uint8 and bool(np.all(space.low == 0) and np.all(space.high == 255))


def _require_hwc_pixels(name: str, space: gymnasium.Space, channels: Sequence[int]) -> None:
    """ConfigError naming ``transforms.<name>`` and ``space`` unless it is a uint8 image in
    [0, 255], ``[H, W]`` or ``[H, W, C]`` with C in ``channels`` (channels last)."""
    if not isinstance(space, spaces.Box) or not _is_image(space):
        raise ConfigError(
            f"transforms.{name} needs image observations (a Box [height, width, channels] of uint8), got {space}; "
            "for pixels of an env with vector observations put transforms.from_pixels before it"
        )
    if not _pixel_bounds(space):
        raise ConfigError(f"transforms.{name} needs uint8 pixels in [0, 255], got {space}")
    if len(space.shape) == 3 and space.shape[-1] not in channels:
        raise ConfigError(
            f"transforms.{name} needs channels last [height, width, channels] with channels in {list(channels)}, "
            f"got {space}; put transforms.to_tensor_image (channels first) after it"
        )


class FromPixels(EnvTransform):
    """Observations rendered by the env: its ``render()`` frame ``[H, W, 3]`` uint8 in [0, 255].

    The env is made with ``render_mode="rgb_array"``; gymnasium's ``AddRenderObservation``
    replaces the observation with the rendered frame, or with ``keep_state`` adds it:
    a Dict ``{pixels_key: frame, state_key: observation}`` (a Dict observation gains the key
    ``pixels_key`` instead). TorchRL's ``from_pixels`` envs, as a wrapper for any env. Where
    there is no display, ``SDL_VIDEODRIVER`` defaults to ``dummy`` (pygame draws off screen).

    YAML keys: ``keep_state``, ``pixels_key``, ``state_key`` (below).

    Args:
        observation_space: The input's observation space (any).
        keep_state: Keep the env's observation beside the frame, as a Dict.
        pixels_key: Key of the frame in the Dict (with ``keep_state``).
        state_key: Key of the env's observation in the Dict (with ``keep_state``, for a
            non-Dict observation).

    Raises:
        ConfigError: at construction, for empty or equal keys or a Dict observation that has
            ``pixels_key`` already; in :meth:`wrap`, for an env not made with
            ``render_mode="rgb_array"``.
    """

    render_mode = "rgb_array"

    def __init__(
        self,
        observation_space: gymnasium.Space,
        keep_state: bool = False,
        pixels_key: str = "pixels",
        state_key: str = "state",
    ) -> None:
        super().__init__()
        for key, value in (("pixels_key", pixels_key), ("state_key", state_key)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"transforms.from_pixels.{key}={value!r}: must be a non-empty string")
        if keep_state and pixels_key == state_key:
            raise ConfigError(
                f"transforms.from_pixels.pixels_key={pixels_key!r} equals transforms.from_pixels.state_key: "
                "the Dict needs two different keys"
            )
        if keep_state and isinstance(observation_space, spaces.Dict) and pixels_key in observation_space.spaces:
            raise ConfigError(
                f"transforms.from_pixels.pixels_key={pixels_key!r}: the observation {observation_space} has this "
                "key already; choose another"
            )
        self.keep_state = bool(keep_state)
        self.pixels_key = pixels_key
        self.state_key = state_key

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        if env.render_mode != "rgb_array":
            raise ConfigError(
                f"transforms.from_pixels needs the env made with render_mode='rgb_array', got {env.render_mode!r}"
            )
        render_offscreen()
        return gymnasium.wrappers.AddRenderObservation(
            env, render_only=not self.keep_state, render_key=self.pixels_key, obs_key=self.state_key
        )


class ToTensorImage(EnvTransform):
    """Images channels first: ``[H, W, C]`` -> ``[C, H, W]`` (``[H, W]`` -> ``[1, H, W]``), dtype kept
    (uint8 pixels stay uint8; the networks scale them), as torch's convolutions take them.

    TorchRL's ``ToTensorImage`` without its scaling to [0, 1]. Gymnasium has no transposing
    wrapper; ``TransformObservation`` applies the transpose.

    YAML keys: ``key``.

    Args:
        observation_space: A Box image ``[H, W, C]`` or ``[H, W]``, or a Dict holding one.
        key: For a Dict observation, the key of the image; None for a Box observation.

    Raises:
        ConfigError: for an observation that is not an image (naming it), a Dict without
            ``key`` or without that key, or a ``key`` given for a Box observation.
    """

    def __init__(self, observation_space: gymnasium.Space, key: str | None = None) -> None:
        super().__init__()
        image = observation_space
        if isinstance(observation_space, spaces.Dict):
            if key not in observation_space.spaces:
                images = [k for k, s in observation_space.spaces.items() if _is_image(s)]
                raise ConfigError(
                    f"transforms.to_tensor_image.key={key!r}: the observation is a Dict; set the key of its image "
                    f"(image keys: {', '.join(images) or 'none'}), got {observation_space}"
                )
            image = observation_space.spaces[key]
        elif key is not None:
            raise ConfigError(
                f"transforms.to_tensor_image.key={key!r}: the observation {observation_space} is not a Dict; "
                "leave the key out"
            )
        if not isinstance(image, spaces.Box) or not _is_image(image):
            where = "" if key is None else f" at key {key!r}"
            raise ConfigError(
                f"transforms.to_tensor_image needs an image [height, width, channels] or [height, width]{where}, "
                f"got {image}"
            )
        self.key = key

    @staticmethod
    def channels_first(image: np.ndarray) -> np.ndarray:
        """``[H, W, C]`` -> ``[C, H, W]`` and ``[H, W]`` -> ``[1, H, W]``, contiguous, dtype kept."""
        if image.ndim == 2:
            return image[None]
        return np.ascontiguousarray(np.moveaxis(image, -1, 0))

    def _space(self, space: spaces.Box) -> spaces.Box:
        low, high = self.channels_first(space.low), self.channels_first(space.high)
        return spaces.Box(low, high, dtype=space.dtype)

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        space = env.observation_space
        if self.key is None:
            assert isinstance(space, spaces.Box)  # checked at construction on this space
            return gymnasium.wrappers.TransformObservation(env, self.channels_first, self._space(space))
        assert isinstance(space, spaces.Dict)
        key = self.key
        image = space.spaces[key]
        assert isinstance(image, spaces.Box)
        new_space = spaces.Dict({**space.spaces, key: self._space(image)})
        return gymnasium.wrappers.TransformObservation(
            env, lambda obs: {**obs, key: self.channels_first(obs[key])}, new_space
        )


class Resize(EnvTransform):
    """Resize images to ``[h, w]`` with OpenCV's area interpolation: ``[H, W, C]`` ->
    ``[h, w, C]``, ``[H, W]`` -> ``[h, w]``, uint8 (gymnasium's ``ResizeObservation``; TorchRL's
    ``Resize``). Needs OpenCV (``pip install rlplat[pixels]``).

    YAML keys: ``size``.

    Args:
        observation_space: A Box of uint8 pixels in [0, 255], ``[H, W, C]`` (channels last,
            C in 1, 3, 4) or ``[H, W]``.
        size: Output size in pixels: one int for a square ``[size, size]``, or ``[h, w]``.

    Raises:
        ConfigError: for a size that is not a positive int or a pair of them, or an
            observation that is not such an image (naming it).
    """

    def __init__(self, observation_space: gymnasium.Space, size: int | Sequence[int] = 84) -> None:
        super().__init__()
        pair = [size, size] if isinstance(size, int) else list(size) if isinstance(size, Sequence) else [size]
        if len(pair) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in pair):
            raise ConfigError(f"transforms.resize.size={size!r}: must be an int >= 1 or a pair [height, width] of them")
        _require_hwc_pixels("resize", observation_space, (1, 3, 4))
        self.size = (int(pair[0]), int(pair[1]))

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return gymnasium.wrappers.ResizeObservation(env, self.size)


class Grayscale(EnvTransform):
    """RGB to luminance ``0.2125 R + 0.7154 G + 0.0721 B`` (ITU-R BT.709): ``[H, W, 3]`` ->
    ``[H, W]``, or ``[H, W, 1]`` with ``keep_dim``, uint8 (gymnasium's ``GrayscaleObservation``;
    TorchRL's ``GrayScale``).

    YAML keys: ``keep_dim``.

    Args:
        observation_space: A Box ``[H, W, 3]`` of uint8 pixels in [0, 255].
        keep_dim: Keep a channel axis of 1.

    Raises:
        ConfigError: for an observation that is not such an image (naming it).
    """

    def __init__(self, observation_space: gymnasium.Space, keep_dim: bool = False) -> None:
        super().__init__()
        _require_hwc_pixels("grayscale", observation_space, (3,))
        if len(observation_space.shape or ()) != 3:
            raise ConfigError(f"transforms.grayscale needs RGB images [height, width, 3], got {observation_space}")
        self.keep_dim = bool(keep_dim)

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return gymnasium.wrappers.GrayscaleObservation(env, keep_dim=self.keep_dim)


class FrameStack(EnvTransform):
    """The last ``k`` observations stacked on a new leading axis: ``[*shape]`` -> ``[k, *shape]``,
    dtype kept (gymnasium's ``FrameStackObservation``; TorchRL's ``CatFrames``). Grayscale
    frames ``[H, W]`` give ``[k, H, W]``, what ``network=cnn`` takes (Mnih et al. 2015, k=4).

    At reset the missing frames are the reset observation repeated (``padding: reset``) or
    zeros (``padding: zero``). The stack is the wrapper's state, saved with the env's.

    YAML keys: ``k``, ``padding``.

    Args:
        observation_space: A Box.
        k: Number of frames stacked.
        padding: ``"reset"`` or ``"zero"``.

    Raises:
        ConfigError: for ``k`` < 1, another padding, or a non-Box observation (naming it).
    """

    def __init__(self, observation_space: gymnasium.Space, k: int = 4, padding: str = "reset") -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"transforms.frame_stack.k={k!r}: must be an integer >= 1")
        if padding not in ("reset", "zero"):
            raise ConfigError(f"transforms.frame_stack.padding={padding!r}: valid: reset, zero")
        if not isinstance(observation_space, spaces.Box):
            raise ConfigError(f"transforms.frame_stack needs a Box observation, got {observation_space}")
        self.k = k
        self.padding = padding

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return gymnasium.wrappers.FrameStackObservation(env, self.k, padding_type=self.padding)


class NoopStarts(gymnasium.Wrapper):
    """After each reset, a random number of no-op actions, uniform in ``[1, noop_max]``, drawn
    from the env's own generator (seeded by ``reset(seed=...)``); an episode that ends during
    them is reset again. As gymnasium's ``AtariPreprocessing`` and Stable-Baselines3's
    ``NoopResetEnv`` do."""

    def __init__(self, env: gymnasium.Env, noop_max: int, noop_action: Any) -> None:
        super().__init__(env)
        self.noop_max = noop_max
        self.noop_action = noop_action

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        noops = int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            observation, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:
                observation, info = self.env.reset(options=options)
        return observation, info


class NoopReset(EnvTransform):
    """Start episodes after up to ``noop_max`` no-op actions, so that a deterministic env
    (Atari) starts from varied states (Mnih et al. 2015, "Human-level control through deep
    reinforcement learning": up to 30 no-ops). Observations and spaces are unchanged.

    YAML keys: ``noop_max``, ``noop_action``.

    Args:
        observation_space: Any; unchanged.
        noop_max: Most no-op env steps after a reset (uniform in ``[1, noop_max]``; 0: none).
        noop_action: The action that does nothing (0 is Atari's NOOP); a list for a Box action.

    Raises:
        ConfigError: for ``noop_max`` < 0; in :meth:`wrap`, for a ``noop_action`` outside the
            env's action space (naming it).
    """

    def __init__(self, observation_space: gymnasium.Space, noop_max: int = 30, noop_action: Any = 0) -> None:
        super().__init__()
        if isinstance(noop_max, bool) or not isinstance(noop_max, int) or noop_max < 0:
            raise ConfigError(f"transforms.noop_reset.noop_max={noop_max!r}: must be an integer >= 0")
        self.noop_max = noop_max
        self.noop_action = noop_action

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        action = self.noop_action
        if isinstance(action, Sequence) and not isinstance(action, str):
            action = np.asarray(action, dtype=env.action_space.dtype)
        if action not in env.action_space:
            raise ConfigError(
                f"transforms.noop_reset.noop_action={self.noop_action!r} is not an action of {env.action_space}"
            )
        return NoopStarts(env, self.noop_max, action)


class StepCounting(gymnasium.Wrapper):
    """Counts env steps since reset in ``step_count``; truncates when it reaches ``max_steps``
    (None: never); with ``time_feature`` appends ``1 - step_count / max_steps`` to the
    observation (a flat Box), in the observation's dtype."""

    def __init__(self, env: gymnasium.Env, max_steps: int | None, time_feature: bool) -> None:
        super().__init__(env)
        self.max_steps = max_steps
        self.time_feature = time_feature
        self.step_count = 0
        if time_feature:
            space = env.observation_space
            assert isinstance(space, spaces.Box)  # checked by StepCounter
            low = np.append(space.low, np.zeros(1, space.dtype))
            high = np.append(space.high, np.ones(1, space.dtype))
            self.observation_space = spaces.Box(low, high, dtype=space.dtype)

    def _observation(self, observation: Any) -> Any:
        if not self.time_feature:
            return observation
        assert self.max_steps is not None
        remaining = 1.0 - self.step_count / self.max_steps
        return np.append(observation, np.asarray([remaining], observation.dtype))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.step_count = 0
        return self._observation(observation), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.step_count += 1
        if self.max_steps is not None and self.step_count >= self.max_steps:
            truncated = True
        return self._observation(observation), reward, terminated, truncated, info


class StepCounter(EnvTransform):
    """Count env steps since reset and truncate the episode at ``max_steps`` (TorchRL's
    ``StepCounter``); optionally append the remaining time ``1 - t / max_steps`` (1 at reset,
    0 at truncation) to the observation: ``[n]`` -> ``[n + 1]``, dtype kept. The time feature
    keeps the value of a truncated episode's states well defined (Pardo et al. 2018, "Time
    Limits in Reinforcement Learning"; sb3-contrib's ``TimeFeatureWrapper``).

    gymnasium's ``TimeAwareObservation`` appends elapsed time ``t / T`` with ``T`` read from
    the env's spec, not the remaining time of this limit; a wrapper here does both.

    YAML keys: ``max_steps``, ``time_feature``.

    Args:
        observation_space: Any; a flat float Box with ``time_feature``.
        max_steps: Truncate at this many env steps; None counts without truncating.
        time_feature: Append the remaining-time feature (needs ``max_steps``).

    Raises:
        ConfigError: for ``max_steps`` < 1, or ``time_feature`` without ``max_steps`` or on an
            observation that is not a flat float Box (naming it).
    """

    def __init__(
        self, observation_space: gymnasium.Space, max_steps: int | None = None, time_feature: bool = False
    ) -> None:
        super().__init__()
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ConfigError(f"transforms.step_counter.max_steps={max_steps!r}: must be an integer >= 1, or null")
        if time_feature:
            if max_steps is None:
                raise ConfigError("transforms.step_counter.time_feature=true needs transforms.step_counter.max_steps")
            flat_float = (
                isinstance(observation_space, spaces.Box)
                and len(observation_space.shape) == 1
                and np.issubdtype(observation_space.dtype, np.floating)
            )
            if not flat_float:
                raise ConfigError(
                    f"transforms.step_counter.time_feature=true needs a flat float Box observation, "
                    f"got {observation_space}"
                )
        self.max_steps = max_steps
        self.time_feature = bool(time_feature)

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return StepCounting(env, self.max_steps, self.time_feature)


class TimeLimit(EnvTransform):
    """Truncate episodes at ``max_episode_steps`` env steps (gymnasium's ``TimeLimit``; an env
    with a registered limit keeps it too: the first limit reached truncates). Spaces unchanged.

    YAML keys: ``max_episode_steps``.

    Args:
        observation_space: Any; unchanged.
        max_episode_steps: The limit, in env steps.

    Raises:
        ConfigError: for a limit that is not an integer >= 1.
    """

    def __init__(self, observation_space: gymnasium.Space, max_episode_steps: int) -> None:
        super().__init__()
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ConfigError(f"transforms.time_limit.max_episode_steps={max_episode_steps!r}: must be an integer >= 1")
        self.max_episode_steps = max_episode_steps

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return gymnasium.wrappers.TimeLimit(env, self.max_episode_steps)


class MaskObservation(EnvTransform):
    """Keep chosen entries of a vector observation, dropping the others: ``[n] -> [len(keep)]``,
    dtype and bounds of the kept entries kept. CartPole without its velocities
    (``keep: [0, 2]``, cart position and pole angle) is the standard partially observed task:
    a policy must remember to act well.

    YAML keys: ``keep``.

    Args:
        observation_space: A one-dimensional Box.
        keep: Indices of the entries kept, in the order given, each once.

    Raises:
        ConfigError: for an observation that is not a one-dimensional Box, or indices that are
            not distinct integers in ``[0, n)``, naming ``transforms.mask_observation``.
    """

    def __init__(self, observation_space: gymnasium.Space, keep: Sequence[int]) -> None:
        super().__init__()
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
            raise ConfigError(
                "transforms.mask_observation needs a vector observation (a one-dimensional Box), "
                f"got {observation_space}"
            )
        n = int(observation_space.shape[0])
        indices = list(keep)
        if (
            not indices
            or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in indices)
            or len(set(indices)) != len(indices)
        ):
            raise ConfigError(
                f"transforms.mask_observation.keep={indices!r}: must be distinct indices in [0, {n}) of the "
                f"observation's {n} entries"
            )
        self.keep = np.asarray(indices, dtype=np.int64)
        self.space = spaces.Box(
            observation_space.low[self.keep], observation_space.high[self.keep], dtype=observation_space.dtype
        )

    def masked(self, observation: np.ndarray) -> np.ndarray:
        """``[n]`` -> the kept entries ``[len(keep)]``."""
        return np.asarray(observation)[self.keep]

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return gymnasium.wrappers.TransformObservation(env, self.masked, self.space)


def _require_box_actions(name: str, env: gymnasium.Env) -> None:
    if not isinstance(env.action_space, spaces.Box):
        raise ConfigError(f"transforms.{name} needs a Box (continuous) action space, got {env.action_space}")


class ClipAction(EnvTransform):
    """Clip actions to the env's action bounds before the env sees them (gymnasium's
    ``ClipAction``). The action space becomes unbounded (``Box(-inf, inf)``, shape and dtype
    kept): the policy's actions then reach the env as they are, clipped, instead of being
    squashed and rescaled to the bounds by rlplat. Observations unchanged.

    Args:
        observation_space: Any; unchanged.

    Raises:
        ConfigError: in :meth:`wrap`, for an env whose actions are not a Box (naming it).
    """

    def __init__(self, observation_space: gymnasium.Space) -> None:
        super().__init__()

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        _require_box_actions("clip_action", env)
        return gymnasium.wrappers.ClipAction(env)


class RescaleAction(EnvTransform):
    """Rescale actions affinely: the action space becomes ``Box(min_action, max_action)`` and an
    action there is mapped onto the env's bounds (gymnasium's ``RescaleAction``). Observations
    unchanged.

    YAML keys: ``min_action``, ``max_action``.

    Args:
        observation_space: Any; unchanged.
        min_action: New lower bound: a number, or one per action dim.
        max_action: New upper bound: a number, or one per action dim; above ``min_action``.

    Raises:
        ConfigError: for ``min_action`` not below ``max_action``; in :meth:`wrap`, for an env
            whose actions are not a bounded Box, or bounds of the wrong length (naming it).
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        min_action: float | Sequence[float] = -1.0,
        max_action: float | Sequence[float] = 1.0,
    ) -> None:
        super().__init__()
        try:
            low = np.asarray(min_action, dtype=np.float64)
            high = np.asarray(max_action, dtype=np.float64)
            below = bool(np.all(low < high))
        except (TypeError, ValueError) as error:
            raise ConfigError(
                f"transforms.rescale_action.min_action={min_action!r}, max_action={max_action!r}: "
                f"numbers or lists of numbers of one length ({error})"
            ) from error
        if not below:
            raise ConfigError(
                f"transforms.rescale_action.min_action={min_action!r} must be below max_action={max_action!r}"
            )
        self.min_action = low
        self.max_action = high

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        _require_box_actions("rescale_action", env)
        space = env.action_space
        assert isinstance(space, spaces.Box)
        if not space.is_bounded("both"):
            raise ConfigError(f"transforms.rescale_action needs a bounded Box action space, got {space}")
        try:
            low = np.broadcast_to(self.min_action, space.shape).astype(space.dtype)
            high = np.broadcast_to(self.max_action, space.shape).astype(space.dtype)
        except ValueError as error:
            raise ConfigError(
                f"transforms.rescale_action.min_action={self.min_action.tolist()}, "
                f"max_action={self.max_action.tolist()}: one bound or one per dim of {space}"
            ) from error
        return gymnasium.wrappers.RescaleAction(env, low, high)


RewardFunction = Callable[[Any, Any, SupportsFloat, bool], SupportsFloat]
"""``f(observation, action, reward, terminated) -> reward``: a reward function of
``transforms.reward_shaping`` (one env's observation and action, a float reward, a bool)."""


def resolve_reward_function(path: str) -> RewardFunction:
    """The function ``transforms.reward_shaping.function`` names: ``"module:attr"`` (an
    importable path; ``attr`` may be dotted) or a name registered in :data:`REWARD_FUNCTIONS`.

    Raises:
        ConfigError: naming ``transforms.reward_shaping.function`` for a module that does not
            import, a missing attribute, an unknown name (listing the registered ones), or
            something that cannot be called as ``f(obs, action, reward, terminated)``.
        rlplat.registry.PluginError: if the plugin declaring the name fails to import.
    """
    key = "transforms.reward_shaping.function"
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}={path!r}: give 'module:function' or a registered reward function's name")
    if ":" in path:
        module_name, _, attr = path.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"{key}={path!r}: module {module_name!r} does not import ({error})") from error
        try:
            function = operator.attrgetter(attr)(module)
        except AttributeError as error:
            raise ConfigError(f"{key}={path!r}: module {module_name!r} has no {attr!r}") from error
    else:
        function = REWARD_FUNCTIONS.get(path, key=key)
    try:
        inspect.signature(function).bind(None, None, 0.0, False)
    except TypeError as error:
        raise ConfigError(
            f"{key}={path!r}: {function!r} cannot be called as f(obs, action, reward, terminated) ({error})"
        ) from error
    except ValueError:  # a callable without a signature (some builtins): called as it is
        pass
    return function


class ShapedReward(gymnasium.Wrapper):
    """Replaces each step's reward with ``function(obs, action, reward, terminated)``, where
    ``obs`` is the observation the step returned and ``action`` the env's action."""

    def __init__(self, env: gymnasium.Env, function: RewardFunction) -> None:
        super().__init__(env)
        self.function = function

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        shaped = float(self.function(observation, action, reward, terminated))
        info = {**info, RAW_REWARD: info.get(RAW_REWARD, reward)}  # the task's reward, for episode returns
        return observation, shaped, terminated, truncated, info


class RewardShaping(EnvTransform):
    """Rewards shaped by a function ``f(obs, action, reward, terminated) -> reward``, per step
    inside the env (potential-based shaping keeps the optimal policies: Ng et al. 1999,
    "Policy invariance under reward transformations"). ``obs`` is the observation the step
    returned (after the env transforms before this one), ``action`` the env's action, ``reward``
    the env's reward (a float), ``terminated`` a bool. The shaped reward is the one the
    agent learns from; episode returns (``rollout/return_mean``, ``eval/return_mean``) sum the
    env's own reward, passed on in the step's info under ``raw_reward``
    (:data:`rlplat.envs.base.RAW_REWARD`).

    YAML keys: ``function``.

    Args:
        observation_space: Any; unchanged.
        function: ``"module:attr"`` of an importable function, or the name of one in
            :data:`REWARD_FUNCTIONS` (entry-point group ``rlplat.reward_functions``).

    Raises:
        ConfigError: naming ``transforms.reward_shaping.function`` when it names no function
            of that signature (:func:`resolve_reward_function`).
    """

    def __init__(self, observation_space: gymnasium.Space, function: str) -> None:
        super().__init__()
        self.path = function
        self.function = resolve_reward_function(function)

    def __getstate__(self) -> dict[str, Any]:
        """The state to pickle, without the function: it is found again by its path after
        unpickling (a lambda named by ``"module:attr"`` does not pickle)."""
        state = dict(self.__dict__)
        state["function"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.function = resolve_reward_function(self.path)

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        return ShapedReward(env, self.function)
