"""Registering rlplat's Optuna sweeper with Hydra: ``hydra/sweeper=rlplat_optuna``."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from hydra_plugins.rlplat_optuna_sweeper import RlplatOptunaSweeper
from rlplat.hydra_ext.plugins import register_hydra_plugins
from rlplat.sweep.optuna import RlplatOptunaSweeperConf

SWEEPER_GROUP = "hydra/sweeper"
SWEEPER_NAME = "rlplat_optuna"


def register_sweeper() -> None:
    """Make ``hydra/sweeper=rlplat_optuna`` selectable and instantiable.

    Registers Hydra's plugin search path and :class:`RlplatOptunaSweeper` with Hydra's
    ``Plugins`` (see :func:`rlplat.hydra_ext.plugins.register_hydra_plugins`), and stores
    :class:`~rlplat.sweep.optuna.RlplatOptunaSweeperConf` as the option ``rlplat_optuna`` of
    the group ``hydra/sweeper`` in Hydra's ConfigStore, so that a misspelt sweeper key fails
    at composition. Idempotent.
    """
    register_hydra_plugins(RlplatOptunaSweeper)
    ConfigStore.instance().store(
        group=SWEEPER_GROUP, name=SWEEPER_NAME, node=RlplatOptunaSweeperConf, provider="rlplat"
    )
