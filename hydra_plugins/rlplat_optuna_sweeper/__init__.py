"""rlplat's Optuna sweeper as a Hydra plugin: ``hydra/sweeper=rlplat_optuna``.

Hydra imports every module of the ``hydra_plugins`` namespace package at start-up, so this
one stays light: the work is in ``rlplat/optuna_sweeper.py``, and Optuna itself is imported
only when a sweep runs.
"""

from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

from rlplat.optuna_sweeper import OptunaSearch, RlplatOptunaSweeperConf

ConfigStore.instance().store(
    group="hydra/sweeper", name="rlplat_optuna", node=RlplatOptunaSweeperConf, provider="rlplat"
)


class RlplatOptunaSweeper(Sweeper):
    """Hydra Sweeper: Optuna search with pruning; see :mod:`rlplat.optuna_sweeper`."""

    def __init__(self, **conf: Any) -> None:
        self.search = OptunaSearch(**conf)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)
