"""Adds the config directories of rlplat plugins to Hydra's search path.

A plugin distribution ships YAML config groups (``env/``, ``network/``, ...) inside one of
its packages and names that package in the entry-point group ``rlplat.conf``::

    [project.entry-points."rlplat.conf"]
    my_plugin = "my_plugin.conf"

Hydra discovers this module through its ``hydra_plugins`` namespace package.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from rlplat.registry import declared_entry_points


class RlplatPluginSearchPath(SearchPathPlugin):
    """Appends ``pkg://<module>`` for every ``rlplat.conf`` entry point."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for ep in declared_entry_points("rlplat.conf"):
            search_path.append(provider=f"rlplat-plugin:{ep.name}", path=f"pkg://{ep.value}")
