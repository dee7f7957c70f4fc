"""Atari 2600 games of the Arcade Learning Environment, preprocessed for pixel-based agents.

Install with ``pip install 'rlplat[atari]'`` (ale-py, whose wheels include the game ROMs, and
OpenCV for the frame resizing of gymnasium's ``AtariPreprocessing``).
"""

from __future__ import annotations

from typing import Any

import gymnasium

from rlplat.envs.gym import check_time_limit
from rlplat.registry import ConfigError

INSTALL = "pip install 'rlplat[atari]'"


def make_atari(
    id: str = "ALE/Pong-v5",
    frame_skip: int = 4,
    screen_size: int = 84,
    frame_stack: int = 4,
    noop_max: int = 30,
    repeat_action_probability: float = 0.25,
    terminal_on_life_loss: bool = False,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Make one Atari game with the preprocessing of Mnih et al. (2015), "Human-level control
    through deep reinforcement learning", and the evaluation protocol of Machado et al. (2018),
    "Revisiting the Arcade Learning Environment".

    gymnasium's ``AtariPreprocessing`` repeats each action ``frame_skip`` emulator frames,
    max-pools the last two, converts to grayscale and resizes, after up to ``noop_max`` no-ops
    at reset; ``FrameStackObservation`` stacks frames. One env step (one rlplat frame, as one
    Stable-Baselines3 timestep) is ``frame_skip`` emulator frames.

    Args:
        id: An ALE id of gymnasium's registry, e.g. ``"ALE/Pong-v5"`` or ``"ALE/Breakout-v5"``.
        frame_skip: Emulator frames per env step, >= 1.
        screen_size: Height and width of the observed frames, in pixels.
        frame_stack: Frames stacked into one observation, >= 1.
        noop_max: Most no-op actions taken at reset (a random number of them), >= 0.
        repeat_action_probability: Probability that the emulator repeats the previous action
            instead of the chosen one, in [0, 1] (0.25 in Machado et al.).
        terminal_on_life_loss: End the episode when a life is lost (Mnih et al.); Machado
            et al. advise against it.
        max_episode_steps: Time limit in env steps (of ``frame_skip`` frames each); None
            keeps the game's own (108,000 emulator frames for ``-v5`` ids).
        kwargs: Further keyword arguments of ale-py's ``AtariEnv`` (``mode``, ``difficulty``, ...).
        render_mode: Gymnasium's render mode; videos set ``"rgb_array"`` (the colour screen).

    Returns:
        One ``gymnasium.Env`` with observations ``Box(0, 255, (frame_stack, screen_size,
        screen_size), uint8)`` (rlplat hands them to the policy as float32) and
        ``Discrete`` actions.

    Raises:
        ConfigError: when ale-py or OpenCV is not installed, ``id`` is no ALE game, or a
            value is out of range, naming the ``env.<key>``.
    """
    _check_values(frame_skip, screen_size, frame_stack, noop_max, repeat_action_probability, max_episode_steps)
    env = _ale_env(id, repeat_action_probability, kwargs, render_mode)
    env = gymnasium.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = gymnasium.wrappers.FrameStackObservation(env, frame_stack)
    if max_episode_steps is not None:
        env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
    return env


def _check_values(
    frame_skip: int,
    screen_size: int,
    frame_stack: int,
    noop_max: int,
    repeat_action_probability: float,
    max_episode_steps: int | None,
) -> None:
    """Raise ConfigError naming the first ``env.<key>`` out of its range."""
    for key, value, low in (("frame_skip", frame_skip, 1), ("screen_size", screen_size, 1),
                            ("frame_stack", frame_stack, 1), ("noop_max", noop_max, 0)):  # fmt: skip
        if not isinstance(value, int) or value < low:
            raise ConfigError(f"env.{key}={value!r}: must be an integer >= {low}")
    if not 0.0 <= repeat_action_probability <= 1.0:
        raise ConfigError(f"env.repeat_action_probability={repeat_action_probability!r}: must be in [0, 1]")
    check_time_limit(max_episode_steps, "the game's own")


def _ale_env(
    id: str, repeat_action_probability: float, kwargs: dict[str, Any] | None, render_mode: str | None
) -> gymnasium.Env:
    """The emulator of game ``id``, one frame per step (``frameskip=1``), sticky actions.

    Raises:
        ConfigError: when ale-py or OpenCV is missing, ``id`` is no ALE game, or ale-py
            rejects ``kwargs``.
    """
    try:
        import ale_py
        import cv2  # noqa: F401  # AtariPreprocessing's resizing; checked here to name the extra
    except ImportError as error:
        raise ConfigError(f"env=atari needs the {error.name} package: {INSTALL}") from None
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on every env made
    gymnasium.register_envs(ale_py)
    try:
        entry_point = gymnasium.spec(id).entry_point
    except gymnasium.error.Error as error:
        raise ConfigError(f"env.id={id!r}: {error}; ALE ids look like 'ALE/Pong-v5'") from error
    creator = gymnasium.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not (isinstance(creator, type) and issubclass(creator, ale_py.AtariEnv)):
        raise ConfigError(f"env.id={id!r} is no Atari game; ALE ids look like 'ALE/Pong-v5'")
    options = {**dict(kwargs or {}), "frameskip": 1, "repeat_action_probability": repeat_action_probability}
    try:
        env = gymnasium.make(id, render_mode=render_mode, **options)
    except TypeError as error:
        raise ConfigError(f"env.kwargs={dict(kwargs or {})!r} rejected by {id!r}: {error}") from error
    return env
