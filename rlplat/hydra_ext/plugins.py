"""Registering rlplat's Hydra plugins with Hydra.

Hydra finds plugins by listing the ``hydra_plugins`` namespace package with pkgutil, which
does not see the modules of an editable install. Registering them by hand, with Hydra's
public ``Plugins.register``, works for every kind of install.
"""

from __future__ import annotations

from hydra.core.plugins import Plugins
from hydra.plugins.plugin import Plugin

from hydra_plugins.rlplat_searchpath import RlplatPluginSearchPath


def register_hydra_plugins(*plugins: type[Plugin]) -> None:
    """Register the plugin search path (``rlplat.conf`` entry points), and ``plugins``.

    Idempotent: registering a class again replaces it under the same name.

    Args:
        plugins: More Hydra plugin classes to register, e.g. the Optuna sweeper
            (:func:`hydra_plugins.rlplat_optuna_sweeper.register_sweeper` passes it). Each
            must live in the ``hydra_plugins`` package for Hydra to instantiate it.

    Raises:
        ValueError: (Hydra's) for a class that is not a concrete Hydra plugin.
    """
    registry = Plugins.instance()
    classes: tuple[type[Plugin], ...] = (RlplatPluginSearchPath, *plugins)
    for plugin in classes:
        registry.register(plugin)
