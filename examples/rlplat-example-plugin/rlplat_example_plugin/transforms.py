"""Clip observations to a range. rlplat entry ``clip_observation``.

rlplat calls the entry point as ``ClipObservation(observation_space, **yaml_kwargs)`` with the
kwargs under ``transforms.clip_observation``, and applies the transform to the batch of every
vector step of the training and evaluation envs, after the transforms listed before it (e.g.
``obs_norm``, so that a bound is in standard deviations).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from torch import Tensor

from rlplat.registry import ConfigError
from rlplat.transforms.base import Transform


class ClipObservation(Transform):
    """Clip every entry of the observation to ``[low, high]``: ``[B, *obs_shape]`` float32 ->
    the same shape and dtype; rewards pass unchanged.

    Stateless, so nothing goes into the checkpoint beyond an empty state; the evaluation envs
    clip as the training envs do. After ``obs_norm`` it bounds the normalised observation more
    tightly than that transform's own ``clip`` (10 standard deviations by default), as
    Stable-Baselines3's ``VecNormalize(clip_obs=...)`` does.

    Args:
        observation_space: The observation space of the transform's input (rlplat supplies
            it): a ``Box`` of floats.
        low: Lower bound, in the observation's units.
        high: Upper bound, > ``low``.

    Raises:
        ConfigError: naming ``transforms.clip_observation`` when the observation space is not
            a Box of floats (a uint8 image, a Dict), or ``low >= high``.
    """

    def __init__(self, observation_space: gymnasium.Space, low: float = -5.0, high: float = 5.0) -> None:
        super().__init__()
        floats = isinstance(observation_space, gymnasium.spaces.Box) and np.issubdtype(
            observation_space.dtype, np.floating
        )
        if not floats:
            raise ConfigError(
                f"transforms.clip_observation needs a Box of floats as its input; got {observation_space}"
            )
        if not float(low) < float(high):
            raise ConfigError(f"transforms.clip_observation.low={low!r}, high={high!r}: low must be < high")
        self.low = float(low)
        self.high = float(high)

    def transform_observation(self, observation: Tensor, update: bool) -> Tensor:
        """``[B, *obs_shape]`` float32 clipped elementwise to ``[low, high]``."""
        return observation.clamp(self.low, self.high)
