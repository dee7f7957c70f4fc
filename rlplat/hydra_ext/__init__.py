"""Everything Hydra: group options, override routing, plugin registration, composition.

Modules, each importing only the ones above it:

* :mod:`~rlplat.hydra_ext.options`: which options each config group has (YAML presets,
  registered names, sweep configs) and their registration in Hydra's ConfigStore;
* :mod:`~rlplat.hydra_ext.overrides`: command-line checks and ``++`` routing (:func:`route`)
  and its undo (:func:`unroute`);
* :mod:`~rlplat.hydra_ext.plugins`: registering rlplat's Hydra plugins;
* :mod:`~rlplat.hydra_ext.compose`: composing the config outside a run;
* :mod:`~rlplat.hydra_ext.catalog`: what can be chosen (registry entries' YAML keys, config
  group presets), as ``rlplat-list`` shows it (imported from there);
* :mod:`~rlplat.hydra_ext.validate`: the light checks ``rlplat-train`` runs before torch is
  imported, of the command line and of the composed config (imported from there: it
  imports gymnasium, for the probe env).

Importing this package imports neither torch, MLflow nor Optuna.
"""

from rlplat.hydra_ext.compose import activate_hydra_config, compose_config
from rlplat.hydra_ext.options import (
    GROUPS,
    PRESET_GROUPS,
    config_packages,
    group_options,
    register_group_options,
    sweep_files,
    yaml_options,
)
from rlplat.hydra_ext.overrides import CHECKED_NODES, env_set_override, route, unroute
from rlplat.hydra_ext.plugins import register_hydra_plugins

__all__ = [
    "CHECKED_NODES",
    "GROUPS",
    "PRESET_GROUPS",
    "activate_hydra_config",
    "compose_config",
    "config_packages",
    "env_set_override",
    "group_options",
    "register_group_options",
    "register_hydra_plugins",
    "route",
    "sweep_files",
    "unroute",
    "yaml_options",
]
