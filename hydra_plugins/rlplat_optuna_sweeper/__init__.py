"""rlplat's Optuna sweeper as a Hydra plugin: ``hydra/sweeper=rlplat_optuna``.

Hydra instantiates sweepers only from the ``hydra_plugins`` package, so the class lives
here; the work is in :mod:`rlplat.sweep.optuna`. Importing this module registers nothing:
:func:`rlplat.sweep.plugins.register_sweeper` registers the class and its config node.
Optuna itself is imported only when a sweep runs.
"""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

from rlplat.sweep.optuna import OptunaSearch


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
