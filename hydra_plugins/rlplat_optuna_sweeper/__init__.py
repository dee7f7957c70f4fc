"""rlplat's Optuna sweeper as a Hydra plugin: ``hydra/sweeper=rlplat_optuna``.

Hydra instantiates sweepers only from the ``hydra_plugins`` package, so the class lives
here; the work is in :mod:`rlplat.sweep.optuna`. Importing this module registers nothing:
:func:`register_sweeper` (called by ``rlplat-train``) registers the class and its config
node. Optuna itself is imported only when a sweep runs.
"""

from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

from rlplat.hydra_ext.plugins import register_hydra_plugins
from rlplat.sweep.optuna import OptunaSearch, RlplatOptunaSweeperConf

SWEEPER_GROUP = "hydra/sweeper"
SWEEPER_NAME = "rlplat_optuna"


class RlplatOptunaSweeper(Sweeper):
    """Hydra Sweeper: Optuna search with pruning; see :mod:`rlplat.sweep.optuna`.

    Args: the fields of :class:`rlplat.sweep.optuna.RlplatOptunaSweeperConf`, as keywords.
    """

    def __init__(self, **conf: Any) -> None:
        self.search = OptunaSearch(**conf)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)


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
