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
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium
from torch import nn

from rlplat.registry import ConfigError

CORE_KINDS = ("lstm", "gru")
"""The recurrent cores ``network.core`` names (:mod:`rlplat.networks.recurrent`)."""


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


@dataclass(frozen=True)
class CoreSpec:
    """The ``network`` node's recurrent-core keys (``core``, ``core_size``, ``core_layers``),
    which rlplat reads itself rather than passing them to the torso's entry.

    Attributes:
        kind: ``lstm`` (Hochreiter and Schmidhuber 1997) or ``gru`` (Cho et al. 2014).
        hidden_size: Width of the core's state and output, the input of the heads.
        num_layers: Stacked layers.

    Raises:
        ConfigError: naming ``network.<key>`` for a bad value.
    """

    kind: str
    hidden_size: int = 128
    num_layers: int = 1

    def __post_init__(self) -> None:
        if self.kind not in CORE_KINDS:
            raise ConfigError(f"network.core={self.kind!r}: valid: {', '.join(CORE_KINDS)}, or null for none")
        for key, value in (("core_size", self.hidden_size), ("core_layers", self.num_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"network.{key}={value!r}: must be an integer >= 1")


CORE_KEYS = ("core", "core_size", "core_layers")
"""The keys of the ``network`` node that :class:`CoreSpec` reads."""


def split_core(node: dict[str, Any]) -> tuple[dict[str, Any], CoreSpec | None]:
    """The ``network`` node without its core keys (what the torso's entry receives), and the
    core they configure (None when ``core`` is null or absent).

    Raises:
        ConfigError: for a bad core key (:class:`CoreSpec`).
    """
    torso = {key: value for key, value in node.items() if key not in CORE_KEYS}
    kind = node.get("core")
    if kind is None:
        return torso, None
    return torso, CoreSpec(kind, node.get("core_size", 128), node.get("core_layers", 1))


class ConfiguredNetwork:
    """The :data:`NetworkFactory` rlplat passes to a loss: the torso's entry with its YAML
    bound, and the recurrent core the ``network`` node asks for.

    Args:
        build: ``(out_features, space) -> nn.Module``, the torso.
        space: The default input space (the env's observations).
        core: ``network.core``'s settings, or None.

    Attributes:
        core: As given: a loss that takes a core (``recurrent_cores = True``) puts it after
            its torsos (:class:`rlplat.networks.recurrent.RecurrentActorCritic`).
    """

    def __init__(
        self, build: Callable[[int, gymnasium.Space], nn.Module], space: gymnasium.Space, core: CoreSpec | None
    ) -> None:
        self._build, self._space, self.core = build, space, core

    def __call__(self, out_features: int, space: gymnasium.Space | None = None) -> nn.Module:
        """One fresh torso ``[N, *space.shape] -> [N, out_features]`` (``space`` by default the
        env's observations)."""
        return self._build(out_features, self._space if space is None else space)


def network_core(network: NetworkFactory) -> CoreSpec | None:
    """The recurrent core configured with ``network`` (None for a plain factory)."""
    return network.core if isinstance(network, ConfiguredNetwork) else None
