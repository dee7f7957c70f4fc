"""How a sweep is recorded in MLflow: tag names, the parent run, and this process's active parent.

A multirun has one parent run; each job's run is its child, tagged with :func:`child_tags`.
The tag names are those of :mod:`rlplat.tags`. MLflow itself is imported only when something is
logged.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.conf import HydraConf
from hydra.core.utils import filter_overrides

from rlplat.hydra_ext.overrides import unroute
from rlplat.tags import JOB_TAG, OVERRIDES_TAG, PARENT_TAG, PRUNED_TAG, SEED_INDEX_TAG, SWEEP_TAG, TRIAL_TAG

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
    "job_tags",
    "log_to_active_parent",
    "set_active_parent",
    "JobFailure",
    "job_failed",
    "ERROR_FILE",
    "FAILED_JOBS_FILE",
    "record_job_failure",
    "job_failures",
    "sweeper_reports_failures",
    "typed_overrides",
    "runs_in_local_workers",
    "runs_in_this_process",
    "JOBLIB_LAUNCHER",
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


FAILED_JOBS_FILE = "failed_jobs.jsonl"
"""In a sweep's directory: one JSON line per failed job (:class:`JobFailure`), which the
sweep's end reports (the jobs may have run in other processes)."""


@dataclass(frozen=True)
class JobFailure:
    """Why a sweep's job failed, as its end reports it.

    Attributes:
        job: The job's number in the sweep.
        overrides: The job's overrides as typed, space-separated.
        reason: One line: the error.
        command: The command that runs the job again alone.
        run_id: The job's MLflow run (ended FAILED), or None when it failed before its run existed.
        details: A file with the error's traceback (in the job's directory), or None.
    """

    job: int
    overrides: str
    reason: str
    command: str
    run_id: str | None = None
    details: str | None = None


def record_job_failure(sweep_dir: Path, failure: JobFailure) -> None:
    """Append ``failure`` to the sweep's :data:`FAILED_JOBS_FILE`, as one write (appends of a
    line from jobs running at once do not interleave)."""
    line = (json.dumps(asdict(failure)) + "\n").encode()
    descriptor = os.open(Path(sweep_dir) / FAILED_JOBS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


ERROR_FILE = "error.txt"
"""Written into a failed sweep job's run directory: the traceback of what stopped it."""


def job_failed(error: Exception, hydra_cfg: Any, command: str, output_dir: Path) -> float:
    """A sweep's job failed with ``error``: one line now, a record for the sweep's end
    (:func:`record_job_failure`: the job table and one line per failed job,
    exit status 1), and a NaN objective, so that no launcher or sweeper prints a traceback.
    An error other than bad input leaves its traceback in the run directory's :data:`ERROR_FILE`.

    Raised again instead: with ``HYDRA_FULL_ERROR=1``; for a sweeper that takes failed jobs
    itself (:func:`sweeper_reports_failures`), after the record; and a
    pruner's ``TrialPruned``, which is no failure.
    """
    import traceback

    from rlplat.registry import ConfigError, PluginError
    from rlplat.tracking.records import read_run_file

    optuna = sys.modules.get("optuna")
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or (optuna is not None and isinstance(error, optuna.TrialPruned)):
        raise error
    bad_input = isinstance(error, (ConfigError, PluginError))
    reason = " ".join(str(error).split()) if bad_input else f"{type(error).__name__}: {' '.join(str(error).split())}"
    details = None
    if not bad_input and output_dir.is_dir():
        details = output_dir / ERROR_FILE
        details.write_text("".join(traceback.format_exception(error)))
    run_id = read_run_file(output_dir).get("run_id") if output_dir.is_dir() else None
    failure = JobFailure(
        int(hydra_cfg.job.num), typed_overrides(hydra_cfg), reason, command, run_id, str(details) if details else None
    )
    record_job_failure(Path(sweep_directory(hydra_cfg)), failure)
    print(f"rlplat-train: error: job {failure.job} failed: {reason}", file=sys.stderr)
    if sweeper_reports_failures(hydra_cfg):
        raise error
    return math.nan


def job_failures(sweep_dir: Path) -> dict[int, JobFailure]:
    """The failed jobs the sweep's :data:`FAILED_JOBS_FILE` records, by job number (the last
    record of a job that failed twice); empty when none did. Unreadable lines are skipped."""
    path = Path(sweep_dir) / FAILED_JOBS_FILE
    failures: dict[int, JobFailure] = {}
    if not path.is_file():
        return failures
    for line in path.read_text(errors="replace").splitlines():
        try:
            failure = JobFailure(**json.loads(line))
        except (ValueError, TypeError):
            continue
        failures[failure.job] = failure
    return failures


RLPLAT_OPTUNA_SWEEPER = "hydra_plugins.rlplat_optuna_sweeper.RlplatOptunaSweeper"
"""``_target_`` of ``hydra/sweeper=rlplat_optuna``."""


def sweeper_reports_failures(hydra_cfg: Any) -> bool:
    """Whether the sweep's sweeper takes a failed job's exception itself (rlplat's Optuna
    sweeper: the trial fails, and the search goes on); other sweepers are given a NaN
    objective, the failure being reported at the sweep's end from :data:`FAILED_JOBS_FILE`."""
    return bool(hydra_cfg.sweeper.get("_target_") == RLPLAT_OPTUNA_SWEEPER)


JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
"""``_target_`` of ``hydra/launcher=parallel`` (conf/hydra/launcher/parallel.yaml)."""
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
"""``_target_`` of Hydra's default launcher (``hydra/launcher=basic``): one job after another."""


def runs_in_this_process(hydra_cfg: Any) -> bool:
    """Whether the sweep's jobs run one after another in the sweep's own process (Hydra's
    basic launcher, the default)."""
    return bool(hydra_cfg.launcher.get("_target_") == BASIC_LAUNCHER)


def runs_in_local_workers(hydra_cfg: Any) -> bool:
    """Whether the sweep's jobs run in worker processes of this machine (the parallel
    launcher, joblib's loky workers), which a Ctrl-C in the terminal reaches as it reaches
    the main process."""
    return bool(hydra_cfg.launcher.get("_target_") == JOBLIB_LAUNCHER)


def sweep_directory(hydra_cfg: Any) -> str:
    """The sweep's directory (``hydra.sweep.dir``) as an absolute path, from the sweep's
    working directory when it is relative (Hydra's default, ``multirun/...``): the
    ``SWEEP_TAG`` that resumes and reports find it by from any directory."""
    return str(Path(str(hydra_cfg.runtime.cwd), str(hydra_cfg.sweep.dir)))


def typed_overrides(hydra_cfg: Any) -> str:
    """A job's overrides as the user typed them, space-separated: Hydra's own ``hydra.*``
    ones left out, rlplat's ``++`` routing undone (what ``OVERRIDES_TAG`` holds)."""
    return " ".join(map(unroute, filter_overrides(list(hydra_cfg.overrides.task))))


def child_tags(parent: ParentRun, hydra_cfg: HydraConf) -> dict[str, str]:
    """Tags that make a job's run the child of ``parent``.

    Args:
        parent: The sweep's parent run.
        hydra_cfg: The job's Hydra config (``HydraConfig.get()``).

    Returns:
        Parent id, sweep directory, job number, and the job's overrides as typed
        (without rlplat's ``++`` routing).
    """
    return {
        PARENT_TAG: parent.run_id,
        SWEEP_TAG: sweep_directory(hydra_cfg),
        JOB_TAG: str(hydra_cfg.job.num),
        OVERRIDES_TAG: typed_overrides(hydra_cfg),
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


def job_tags(hydra_cfg: HydraConf, uri: str, reporter: Any = None) -> dict[str, str]:
    """A job's sweep tags: its overrides as typed (what ``rlplat-compare`` groups runs by); in a
    recorded sweep, :func:`child_tags` when the job records in its parent run's store ``uri``
    (else a warning: it is not nested), or :func:`started_job_tags` for a job that
    ``resume=<sweep dir>`` started; an Optuna trial's number and seed index (``reporter``)."""
    from hydra.types import RunMode

    tags = {OVERRIDES_TAG: typed_overrides(hydra_cfg)}
    parent = active_parent()
    if parent is not None and hydra_cfg.mode == RunMode.MULTIRUN:
        if parent.uri != uri:
            print(f"rlplat-train: warning: tracking.uri={uri!r} differs from the sweep's ({parent.uri!r}): "
                  "this run is not nested under the sweep's parent run", file=sys.stderr)  # fmt: skip
        else:
            tags.update(child_tags(parent, hydra_cfg))
    elif (started := started_job_tags()) is not None:
        tags.update(started)
    if reporter is not None:
        tags[TRIAL_TAG] = str(reporter.number)
        if reporter.seeds > 1:
            tags[SEED_INDEX_TAG] = str(reporter.seed_index)
    return tags


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
