"""What a network entry implements (entry-point group ``rlplat.networks``).

A network entry is a torso: observations in, a flat feature vector out. rlplat puts the
policy, value or Q heads on top (:mod:`rlplat.networks.heads`, :mod:`rlplat.networks.q`),
so one torso serves every algorithm.

* :class:`TorsoFactory`: what the entry point names,
  ``(observation_space, out_features, **yaml) -> nn.Module``.
* :data:`NetworkFactory`: the same entry with the YAML node bound, as a loss receives it:
  ``(out_features, space=observation_space) -> nn.Module``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import gymnasium
from torch import nn


class TorsoFactory(Protocol):
    """A network entry: ``(observation_space, out_features, **yaml_kwargs) -> nn.Module``.

    rlplat supplies the first two arguments, positionally:

    * ``observation_space``: the space of the torso's input: the env's single
      observation space (after transforms, same shape), or for a continuous critic the flat
      ``Box`` of ``concat(observation, action)`` (:func:`rlplat.networks.q.state_action_space`);
    * ``out_features``: the width the heads read (the loss's ``features`` key).

    The YAML supplies every other keyword argument (all keys of the ``network`` node but
    ``name``, checked against the signature: an unknown key is a ``ConfigError`` naming the
    valid ones). A loss may call the factory several times (actor, critic, target copies);
    each call builds fresh parameters.

    The module returned maps observations ``[N, *obs_shape]`` (a tensor in the space's dtype:
    float32 vectors, uint8 images, int64 codes; a TensorDict of entries for a ``Dict`` space)
    to features ``[N, out_features]`` float32 on the device of its parameters, for any N >= 1
    (no per-batch statistics: a single env's observation must work), and passes gradients
    to its parameters.

    Raises:
        ConfigError: for a bad YAML value or an observation space it cannot handle, naming
            ``network.<key>`` (``rlplat.registry.ConfigError``).
    """

    def __call__(self, observation_space: gymnasium.Space, out_features: int, /, **kwargs: Any) -> nn.Module:
        """Build one torso ``[N, *observation_space.shape] -> [N, out_features]``."""
        ...


NetworkFactory = Callable[..., nn.Module]
"""``(out_features, space=<observation space>) -> nn.Module``: the configured torso (a
:class:`TorsoFactory` with its YAML node bound) for inputs of ``space`` (by default the
env's observations), ``[N, *shape] -> [N, out_features]``. rlplat passes it to a loss as
``network``; the loss calls it once per torso it needs."""
