"""Run a sweep's jobs in parallel on this machine, in worker processes forked from the sweep's.

``hydra/launcher=parallel`` selects it (conf/hydra/launcher/parallel.yaml)::

    rlplat-train -m hydra/launcher=parallel algo=ppo env=cartpole seed=0,1,2,3

Small RL jobs on a CPU spend seconds starting up (importing torch, tensordict and mlflow,
opening the MLflow store) for tens of seconds of training. Launchers that start fresh
interpreters (hydra-joblib-launcher's loky workers, still available as
``hydra/launcher=joblib``) pay that again in every worker. Here the sweep's process imports
the training stack once and forks ``n_jobs`` workers from it, so a worker's first job starts
in milliseconds. Job configs are composed in the sweep's process, as Hydra's basic launcher
does, and each worker runs Hydra's own ``run_job`` on them; results come back as JobReturns.

After the fork a worker drops the database connections it inherited (SQLAlchemy's rule for
pools across ``os.fork``: ``Engine.dispose(close=False)``), so each process talks to the
MLflow store over its own connections.

Raises:
    ConfigError: where the platform cannot fork (Windows).
"""

from __future__ import annotations

import gc
import importlib
import logging
import multiprocessing
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, open_dict

from rlplat.registry import ConfigError

log = logging.getLogger(__name__)

TRAINING_MODULES = ("rlplat.trainer", "rlplat.tracking", "rlplat.envs", "rlplat.networks",
                    "rlplat.collectors", "rlplat.buffers", "rlplat.losses", "rlplat.optim")
"""Imported once before forking, so that workers start with them."""

_jobs: tuple[Any, Any, list[DictConfig]] | None = None  # (hydra_context, task_function, configs)


def launch(
    hydra_context: Any, task_function: Any, config: DictConfig, n_jobs: int,
    job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
) -> list[JobReturn]:
    """Run ``job_overrides`` as jobs ``initial_job_idx, ...`` in ``n_jobs`` forked workers.

    Returns:
        One JobReturn per job, in the order of ``job_overrides``.

    Raises:
        ConfigError: for ``n_jobs < 1``, or a platform without ``fork``.
    """
    global _jobs
    if n_jobs < 1:
        raise ConfigError(f"hydra.launcher.n_jobs={n_jobs}: must be >= 1")
    try:
        context = multiprocessing.get_context("fork")
    except ValueError as error:
        raise ConfigError(f"hydra/launcher=parallel needs os.fork, which {sys.platform} lacks; "
                          "use hydra/launcher=joblib") from error
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info(f"Launching {len(job_overrides)} jobs, {n_jobs} at a time in forked workers: {sweep_dir}")
    configs = []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        configs.append(sweep_config)
    for module in TRAINING_MODULES:
        importlib.import_module(module)
    _jobs = (hydra_context, task_function, configs)  # workers inherit this through the fork
    try:
        workers = min(n_jobs, len(configs))
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_after_fork) as pool:
            return list(pool.map(_run, range(len(configs))))
    finally:
        _jobs = None


def _after_fork() -> None:
    """In a new worker: leave the inherited database connections to the parent process."""
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.engine import Engine

        for engine in [o for o in gc.get_objects() if isinstance(o, Engine)]:
            engine.dispose(close=False)


def _run(index: int) -> JobReturn:
    """Run job ``index`` of the launch in this worker, as Hydra's launchers do."""
    assert _jobs is not None
    hydra_context, task_function, configs = _jobs
    HydraConfig.instance().set_config(configs[index])
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=configs[index],
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
