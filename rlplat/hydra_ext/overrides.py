"""Command-line overrides: rlplat's checks in front of Hydra, and their undo.

:func:`route` runs before Hydra sees the command line. It checks the option of every config
group (``algo=ppoo`` fails with the valid options and the closest), and prefixes ``++`` to
keys of the nodes rlplat checks itself (component nodes, ``trainer``, ``tracking``): Hydra
then adds a misspelt key instead of stopping with its struct error, and rlplat's check names
the valid keys. :func:`unroute` takes the ``++`` back off, so that recorded commands read as
typed. This module is the only place that writes or strips ``++``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlplat.hydra_ext.options import GROUPS, PRESET_GROUPS, group_options
from rlplat.registry import ConfigError, unknown_name_message

CHECKED_NODES = ("env", "network", "collector", "buffer", "loss", "optim", "transforms", "trainer", "tracking")
"""Top-level nodes whose keys rlplat checks itself, with messages naming the valid keys."""

_FORCE = "++"  # Hydra's override prefix: set the key, adding it when the config lacks it
_PLAIN_CHOICE = re.compile(r"^[\w.\-]+$")  # a group option name, not an interpolation or sweep function


def _check_choices(group: str, value: str) -> None:
    """Raise ConfigError for a plain option of ``group`` in ``value`` (``a,b,c``) that is not valid."""
    valid = group_options(group)
    for choice in value.split(","):
        if _PLAIN_CHOICE.match(choice) and choice not in valid:
            raise ConfigError(unknown_name_message(group, choice, valid))


def route(args: Sequence[str]) -> list[str]:
    """Check group choices on the command line and route checked keys to rlplat's checks.

    Args:
        args: Command-line arguments after the program name (flags pass through).

    Returns:
        The arguments to hand to Hydra, where ``node.key=value`` for a node in
        :data:`CHECKED_NODES` becomes ``++node.key=value``; everything else is unchanged.

    Raises:
        ConfigError: for an unknown option of a config group (each value of a sweep is
            checked), naming the group, the value, the valid options and the closest.
    """
    routed = []
    for arg in args:
        if arg.startswith(("-", _FORCE, "~")) or "=" not in arg:
            routed.append(arg)
            continue
        key, value = arg.split("=", 1)
        added = key.startswith("+")  # +group=<name> appends a group the defaults lack (+sweep=...)
        key = key.removeprefix("+")
        if key in GROUPS.values() or key in PRESET_GROUPS:
            _check_choices(key, value)
        if not added and "." in key and key.split(".", 1)[0] in CHECKED_NODES:
            arg = _FORCE + arg
        routed.append(arg)
    return routed


def unroute(override: str) -> str:
    """Undo :func:`route` for one override: ``++trainer.x=1`` -> ``trainer.x=1``.

    Args:
        override: One override as Hydra records it (``hydra.overrides.task``).

    Returns:
        The override as the user typed it; overrides :func:`route` did not touch are unchanged.
    """
    key = override.split("=", 1)[0]
    if override.startswith(_FORCE) and key[len(_FORCE) :].split(".", 1)[0] in CHECKED_NODES:
        return override[len(_FORCE) :]
    return override


def env_set_override(name: str, value: object) -> str:
    """A Hydra override that sets environment variable ``name`` for a launched job.

    Args:
        name: The variable's name.
        value: Its value; quoted so that any text survives Hydra's override grammar.

    Returns:
        ``++hydra.job.env_set.<name>='<value>'``.
    """
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"{_FORCE}hydra.job.env_set.{name}='{text}'"
