"""One env built from the ``env`` node to read its spaces, with nothing but gymnasium imported.

``rlplat-train`` probes the env before it imports torch (:mod:`rlplat.hydra_ext.validate`)
and hands that env to :func:`rlplat.build.build`, which reads the spaces the networks need
from it: one probe env per run, and an env that fails to build is reported in the same words
wherever it is built (:func:`probe_env`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium

from rlplat.envs.pool import THREAD_OPTIONS, EnvPoolTask
from rlplat.registry import ENVS, ConfigError, PluginError

BACKENDS = ("gymnasium", "envpool")
"""Engines of the training envs (``env.backend``): gymnasium's vector envs, or EnvPool's."""


@dataclass(frozen=True)
class EnvSpec:
    """The resolved ``env`` node, read once: what the commands show and record of the env.

    Attributes:
        node: The node itself (``name`` and the entry's keyword arguments).
        name: The env entry (``gym``, ``atari``, a plugin's).
        id: Its ``env.id`` (a gymnasium id), or None.
    """

    node: Mapping[str, Any]
    name: str
    id: str | None

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> EnvSpec:
        """The spec of an ``env`` node (a mapping with ``name``)."""
        env_id = node.get("id")
        return cls(dict(node), str(node.get("name")), None if env_id is None else str(env_id))

    @property
    def title(self) -> str:
        """The env as a description shows it: its id, else its entry's name."""
        return self.id or self.name

    def label(self, choice: str) -> str:
        """The env as a run's name and console title show it: the ``env=`` ``choice``, or for
        the generic ``env=gym`` the gymnasium id it was given (``Acrobot-v1``)."""
        return self.id or choice if choice == "gym" else choice


def env_backend(env_node: Mapping[str, Any]) -> str:
    """The ``env.backend`` of the node (``gymnasium`` when absent).

    Raises:
        ConfigError: for an unknown backend.
    """
    backend = env_node.get("backend") or "gymnasium"
    if backend not in BACKENDS:
        raise ConfigError(f"env.backend={backend!r}: valid: {', '.join(BACKENDS)}")
    return str(backend)


ENGINE_OPTIONS: dict[str, tuple[str, ...]] = {"gymnasium": (), "envpool": THREAD_OPTIONS}
"""The ``env.kwargs`` that configure a backend's engine rather than the env (EnvPool's threads):
passed to that engine alone, never to the gymnasium envs built beside it (the probe, the
evaluation envs), whose constructors do not take them."""


def entry_node(env_node: Mapping[str, Any]) -> dict[str, Any]:
    """The node as the env entry takes it: without ``backend``, which rlplat itself reads, and
    without the backend's :data:`ENGINE_OPTIONS` in ``kwargs``.

    Raises:
        ConfigError: for an unknown backend.
    """
    node = {key: value for key, value in env_node.items() if key != "backend"}
    engine, kwargs = ENGINE_OPTIONS[env_backend(env_node)], node.get("kwargs")
    if engine and kwargs:
        node["kwargs"] = {key: value for key, value in kwargs.items() if key not in engine}
    return node


def build_env(env_node: Mapping[str, Any]) -> Any:
    """Build one env as the ``env`` node configures it.

    Args:
        env_node: The resolved ``env`` node: ``name`` and the entry's keyword arguments.

    Returns:
        What the env entry returns (a ``gymnasium.Env`` for a conforming entry).

    Raises:
        ConfigError: for an unknown name or keyword argument, a gymnasium id that does not
            exist, or any exception of the env's constructor, as ``env 'name' failed to
            build: ExcType: message``.
        PluginError: when the env's plugin fails to import.
    """
    try:
        return ENVS.build("env", entry_node(env_node))
    except (ConfigError, PluginError):
        raise
    except Exception as error:  # whatever third-party env code raises: reported in the user's terms
        name, env_id = env_node.get("name"), env_node.get("id")
        which = f"env {name!r}" + (f" (env.id={env_id!r})" if env_id is not None else "")
        raise ConfigError(f"{which} failed to build: {type(error).__name__}: {error}") from error


def probe_env(env_node: Mapping[str, Any], warn: bool = False) -> gymnasium.Env:
    """One env built from the ``env`` node (which may add ``render_mode``), checked as a run
    needs it: with ``env.backend=envpool``, EnvPool installed and the id one of its envs.
    With ``warn``, a warning on stderr when the env has no time limit (an evaluation of a
    policy that never ends an episode would never end).

    Raises:
        ConfigError: as :func:`build_env`; for an unknown ``env.backend``, or with
            ``envpool`` a node EnvPool cannot run.
        PluginError: when the env's plugin fails to import, or its entry returns something
            that is not a ``gymnasium.Env``.
    """
    if env_backend(env_node) == "envpool":
        EnvPoolTask.from_node(env_node)  # installed, and the id is one of EnvPool's
    probe = build_env(env_node)
    if not isinstance(probe, gymnasium.Env):
        raise PluginError(f"env {env_node.get('name')!r} returned {type(probe).__name__}, not a gymnasium.Env")
    if warn and probe.spec is not None and probe.spec.max_episode_steps is None:
        print(f"rlplat-train: warning: env {probe.spec.id!r} has no time limit: an evaluation of a policy that "
              "never reaches an episode's end never ends; set env.max_episode_steps", file=sys.stderr)  # fmt: skip
    return probe


def env_spaces(env_node: Mapping[str, Any]) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The single env's observation and action spaces, read from one probe env.

    Args:
        env_node: The resolved ``env`` node.

    Returns:
        ``(observation_space, action_space)``.

    Raises:
        ConfigError: as :func:`build_env`; for an unknown ``env.backend``, or with
            ``envpool`` a node EnvPool cannot run (see :class:`rlplat.envs.pool.EnvPoolTask`).
        PluginError: when the env's plugin fails to import, or its entry returns something
            that is not a ``gymnasium.Env``.
    """
    probe = probe_env(env_node)
    spaces = probe.observation_space, probe.action_space
    probe.close()
    return spaces


def check_renderable(env_node: Mapping[str, Any], purpose: str = "be recorded") -> None:
    """Raise ConfigError unless the ``env`` node's entry takes a ``render_mode`` keyword, which
    videos and pixel observations (``transforms.from_pixels``) set to ``"rgb_array"``; the
    message says the env cannot ``purpose``.

    Raises:
        ConfigError: naming the env entry and the ``render_mode`` key; or for an unknown
            entry name (with the known ones).
        PluginError: when the entry's plugin fails to import.
    """
    name = env_node.get("name")
    entry = ENVS.get(str(name), key="env.name")
    parameters = inspect.signature(entry).parameters.values()
    if any(p.name == "render_mode" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    raise ConfigError(
        f"env {name!r} cannot {purpose}: its entry takes no 'render_mode' keyword (rlplat builds the env "
        "with render_mode='rgb_array' for that); give the entry a `render_mode: str | None = None` parameter and "
        "pass it to gymnasium"
    )
