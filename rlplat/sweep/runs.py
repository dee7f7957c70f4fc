"""How a sweep is recorded in MLflow: tag names, the parent run, and this process's active parent.

A multirun has one parent run; each job's run is its child, tagged with :func:`child_tags`.
The tag names are those of :mod:`rlplat.tags`. MLflow itself is imported only when something is
logged.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.conf import HydraConf
from hydra.core.utils import filter_overrides

from rlplat.hydra_ext.overrides import unroute
from rlplat.tags import JOB_TAG, OVERRIDES_TAG, PARENT_TAG, PRUNED_TAG, SWEEP_TAG

__all__ = [
    "JOB_TAG",
    "OVERRIDES_TAG",
    "PARENT_TAG",
    "PRUNED_TAG",
    "SWEEP_TAG",
    "ParentRun",
    "ENV_SWEEP_JOB",
    "active_parent",
    "child_tags",
    "started_job_tags",
    "log_to_active_parent",
    "set_active_parent",
    "OPTUNA_JOURNAL",
    "OPTUNA_RESULTS",
]

OPTUNA_JOURNAL = "optuna.journal"
"""The Optuna sweeper's study, in its sweep directory (unless ``hydra.sweeper.storage`` names another)."""

OPTUNA_RESULTS = "optimization_results.yaml"
"""The Optuna sweeper's results, written into its sweep directory at the end."""


@dataclass(frozen=True)
class ParentRun:
    """Where a sweep's parent run lives: enough to reach it from any process (strings only,
    so it pickles to launcher workers)."""

    uri: str  # MLflow tracking URI of the store holding the run
    experiment_id: str
    run_id: str


_active_parent: ParentRun | None = None


def active_parent() -> ParentRun | None:
    """The parent run of the sweep the current job (or sweeper) belongs to; None outside a
    recorded sweep."""
    return _active_parent


def set_active_parent(parent: ParentRun | None) -> None:
    """Make ``parent`` this process's active parent run (None: no sweep is being recorded)."""
    global _active_parent
    _active_parent = parent


def sweep_directory(hydra_cfg: Any) -> str:
    """The sweep's directory (``hydra.sweep.dir``) as an absolute path, from the sweep's
    working directory when it is relative (Hydra's default, ``multirun/...``): the
    :data:`SWEEP_TAG` that resumes and reports find it by from any directory."""
    return str(Path(str(hydra_cfg.runtime.cwd), str(hydra_cfg.sweep.dir)))


def child_tags(parent: ParentRun, hydra_cfg: HydraConf) -> dict[str, str]:
    """Tags that make a job's run the child of ``parent``.

    Args:
        parent: The sweep's parent run.
        hydra_cfg: The job's Hydra config (``HydraConfig.get()``).

    Returns:
        Parent id, sweep directory, job number, and the job's overrides as typed
        (without rlplat's ``++`` routing).
    """
    overrides = filter_overrides(list(hydra_cfg.overrides.task))
    return {
        PARENT_TAG: parent.run_id,
        SWEEP_TAG: sweep_directory(hydra_cfg),
        JOB_TAG: str(hydra_cfg.job.num),
        OVERRIDES_TAG: " ".join(map(unroute, overrides)),
    }


ENV_SWEEP_JOB = "RLPLAT_SWEEP_JOB"
"""Set by ``rlplat-train resume=<sweep dir>`` for a job of the sweep that it starts (one that
never started before the sweep stopped), run as a single run: JSON ``{"parent": <run id>,
"sweep_dir": ..., "job": <number>}``, so that the job's run is its sweep's child as if the
sweep had run it (:func:`started_job_tags`)."""


def started_job_tags() -> dict[str, str] | None:
    """:func:`child_tags` of a job that ``resume=<sweep dir>`` started (:data:`ENV_SWEEP_JOB`),
    but its overrides (every run is tagged with its own); None in any other process."""
    raw = os.environ.get(ENV_SWEEP_JOB)
    if raw is None:
        return None
    job = json.loads(raw)
    return {PARENT_TAG: str(job["parent"]), SWEEP_TAG: str(job["sweep_dir"]), JOB_TAG: str(job["job"])}


def log_to_active_parent(
    params: dict[str, str], metrics: dict[str, float], tags: dict[str, str], artifact: Path | None = None
) -> None:
    """Log a sweep's results (e.g. the best trial's params) on the active parent run, in one
    batch; does nothing when there is none.

    Args:
        params: Run params, name -> value.
        metrics: Metrics, logged at step 0.
        tags: Run tags.
        artifact: A file to log as an artifact at the run's root, if any.
    """
    if _active_parent is None:
        return
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient(tracking_uri=_active_parent.uri)
    now = int(time.time() * 1000)
    client.log_batch(
        _active_parent.run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
        params=[Param(k, v) for k, v in params.items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    if artifact is not None:
        client.log_artifact(_active_parent.run_id, str(artifact))
