"""Composing rlplat's config outside ``rlplat-train``: tests, benchmarks, notebooks."""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from rlplat.hydra_ext.options import register_group_options
from rlplat.hydra_ext.overrides import route
from rlplat.hydra_ext.plugins import register_hydra_plugins

CONFIG_MODULE = "rlplat.conf"
"""Package of rlplat's primary config, ``config.yaml``."""


def activate_hydra_config(cfg: DictConfig) -> None:
    """Make ``cfg.hydra`` the config that ``${hydra:...}`` interpolations read.

    Hydra sets it for a job, but not for the Compose API nor for a multirun callback's
    ``on_multirun_start``, and has no public setter: its maintainers point users to
    ``HydraConfig.instance().set_config`` (hydra issues 828, 2017). This is the one place
    rlplat calls it.

    Args:
        cfg: A config composed with its ``hydra`` node.
    """
    HydraConfig.instance().set_config(cfg)


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose rlplat's config as ``rlplat-train <overrides>`` would, without running it.

    Registers the plugin search path and the group options first, and routes the overrides
    as the command line is routed (:func:`rlplat.hydra_ext.overrides.route`). ``${hydra:...}``
    interpolations resolve as in a run started from the current directory. Sweep overlays
    that select ``hydra/sweeper=rlplat_optuna`` need
    :func:`hydra_plugins.rlplat_optuna_sweeper.register_sweeper` called first.

    Args:
        overrides: Overrides as typed on the command line, e.g. ``["algo=ppo", "seed=1"]``.

    Returns:
        The composed config, without its ``hydra`` node.

    Raises:
        ConfigError: for an unknown option of a config group.
        hydra.errors.HydraException: (Hydra's) for overrides Hydra rejects.
    """
    register_hydra_plugins()
    register_group_options()
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=route(overrides), return_hydra_config=True)
    activate_hydra_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
