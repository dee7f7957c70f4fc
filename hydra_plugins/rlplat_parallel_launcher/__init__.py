"""rlplat's local parallel launcher as a Hydra plugin (``hydra/launcher=rlplat_parallel``;
conf/hydra/launcher/parallel.yaml extends it). The work is in ``rlplat/parallel.py``."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig


@dataclass
class RlplatParallelLauncherConf:
    """``hydra.launcher`` when ``hydra/launcher=rlplat_parallel``."""

    _target_: str = "hydra_plugins.rlplat_parallel_launcher.RlplatParallelLauncher"
    n_jobs: int = 2  # worker processes, each running one job at a time


ConfigStore.instance().store(
    group="hydra/launcher", name="rlplat_parallel", node=RlplatParallelLauncherConf, provider="rlplat"
)


class RlplatParallelLauncher(Launcher):
    """Hydra Launcher: jobs in worker processes forked from the sweep's; see :mod:`rlplat.parallel`."""

    def __init__(self, n_jobs: int) -> None:
        self.n_jobs = n_jobs

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlplat.parallel import launch

        return launch(self.hydra_context, self.task_function, self.config, self.n_jobs, job_overrides, initial_job_idx)
