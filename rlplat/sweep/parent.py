"""Sweeps in MLflow: one parent run per multirun, one child run per job, a table at the end.

``rlplat-train -m ...`` runs Hydra's multirun: a sweeper expands the overrides into jobs and
a launcher runs them (in this process, in worker processes, on Ray or Slurm). The
:class:`MlflowSweep` callback, listed under ``hydra.callbacks`` in conf/config.yaml, follows
that in MLflow:

* before any job starts, it checks the sweeper's config and creates the sweep's parent run
  (in the main process);
* each job's run is created as its child (:func:`child_tags`: tag ``mlflow.parentRunId`` and
  the job's overrides). Hydra pickles its callbacks along with each job, so the parent's id
  reaches jobs in worker processes and on remote Ray or Slurm workers alike;
* when every job has returned, it waits for the tracking server (when one is away), records
  what jobs kept while it was (:mod:`rlplat.tracking.sync`), prints the jobs sorted by
  ``trainer.objective`` (failed ones too: a failed job records why in the sweep directory,
  :func:`rlplat.sweep.runs.record_job_failure`, and returns NaN, so that no launcher or
  sweeper raises), logs the same table on the parent run, compares the groups of jobs that
  differ only in their seed (:mod:`rlplat.report`: IQM with confidence intervals, plots,
  logged on the parent run and written to ``<sweep dir>/report/``), ends the parent
  FINISHED, then prints one line per failed job and exits 1 when any failed (but under the
  Optuna sweeper, which goes on past failed trials); a sweep that stops with an error leaves
  its parent FAILED, one stopped by a signal (Ctrl-C) KILLED, with the signal's tag as its
  jobs have.

The tag names, :class:`ParentRun` and the active-parent helpers are defined in
:mod:`rlplat.sweep.runs` (below the sweeper and the table, which use them too) and
re-exported here.
"""

from __future__ import annotations

import atexit
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlplat.hydra_ext.compose import activate_hydra_config
from rlplat.hydra_ext.overrides import unroute
from rlplat.registry import ConfigError
from rlplat.signals import LIFE, exit_status
from rlplat.sweep.optuna import check_sweeper
from rlplat.sweep.runs import (
    JOB_TAG,
    OVERRIDES_TAG,
    PARENT_TAG,
    PRUNED_TAG,
    SWEEP_TAG,
    JobFailure,
    ParentRun,
    active_parent,
    child_tags,
    job_failures,
    log_to_active_parent,
    runs_in_local_workers,
    runs_in_this_process,
    set_active_parent,
    started_job_tags,
    sweep_directory,
    sweeper_reports_failures,
)
from rlplat.sweep.table import JobRow, failed_job_rows, job_rows, jobs_csv, print_job_table
from rlplat.tags import DESCRIPTION_TAG, DIRECTION_PARAM, SIGNAL_TAG

__all__ = [
    "JOB_TAG",
    "OVERRIDES_TAG",
    "PARENT_TAG",
    "PRUNED_TAG",
    "SWEEP_TAG",
    "MlflowSweep",
    "ParentRun",
    "active_parent",
    "child_tags",
    "log_to_active_parent",
    "started_job_tags",
]

MAX_NAME = 100  # characters of a parent run's name: "sweep <overrides>"
END_WAIT_S = 600.0  # seconds a sweep's end waits for a tracking server that does not answer


def _end_if_abandoned() -> None:
    """At exit of a sweep that stopped before its end: end its parent run KILLED, with the
    ``rlplat.signal`` tag of its children, when a signal stopped its jobs (a child carries
    that tag and none FAILED, or the signal reached this process, ``rlplat.signals.LIFE.stopped_by``);
    else FAILED (an error)."""
    parent = active_parent()
    if parent is None:
        return
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from rlplat.tracking.store import PROBE_TIMEOUT_S, http_limits, why

    set_active_parent(None)
    client = MlflowClient(tracking_uri=parent.uri)
    try:
        with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
            children = client.search_runs([parent.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.run_id}'")
            signals = sorted({c.data.tags[SIGNAL_TAG] for c in children if SIGNAL_TAG in c.data.tags})
            if not signals and (stopped := LIFE.stopped_by) is not None:  # no job had begun its run
                signals = [stopped]
            if signals and not any(c.info.status == "FAILED" for c in children):
                client.set_tag(parent.run_id, SIGNAL_TAG, signals[0])
                client.set_terminated(parent.run_id, status="KILLED")
            else:
                client.set_terminated(parent.run_id, status="FAILED")
    except MlflowException as error:
        print(f"rlplat-train: warning: the sweep's parent run {parent.run_id} could not be ended ({why(error)}); "
              "it shows RUNNING", file=sys.stderr)  # fmt: skip


def _start_parent(config: DictConfig) -> ParentRun | None:
    """Create the sweep's parent run from the composed ``config``; None when tracking is off."""
    from rlplat.tracking.settings import TrackingConfig
    from rlplat.tracking.store import Tracker

    tracking = TrackingConfig.from_node(config.tracking)
    if not tracking.enabled:
        return None
    hydra_cfg = config.hydra
    sweep_dir = sweep_directory(hydra_cfg)
    choices = hydra_cfg.runtime.choices
    tags = {
        SWEEP_TAG: sweep_dir,
        "command": shlex.join(["rlplat-train", *map(unroute, sys.argv[1:])]),
        "rlplat.sweeper": str(choices.get("hydra/sweeper")),
        "rlplat.launcher": str(choices.get("hydra/launcher")),
    }
    overrides = " ".join(map(unroute, hydra_cfg.overrides.task))
    params = {"sweep.overrides": overrides, "sweep.dir": sweep_dir}
    if (direction := sweep_direction(config)) is not None:  # an Optuna sweep's: reports rank as it did
        params[DIRECTION_PARAM] = direction
    shown = " ".join(o for o in overrides.split() if not o.startswith(("tracking.", "hydra.", "hydra/")))
    name = tracking.run_name or f"sweep {shown or sweep_dir.rstrip('/').rsplit('/', 1)[-1]}"[:MAX_NAME]
    tags[DESCRIPTION_TAG] = f"Sweep `{tags['command']}` in `{sweep_dir}`: its report replaces this line when it ends."
    tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location)
    run_id = tracker.start(name, params, tags)
    return ParentRun(tracking.uri, str(tracker.experiment_id), run_id)


def sweep_direction(config: DictConfig) -> str | None:
    """``hydra.sweeper.direction`` ("maximize" or "minimize") of a sweeper that has one (the
    Optuna sweeper's); None for Hydra's basic sweeper."""
    direction = config.hydra.sweeper.get("direction")
    return None if direction is None else str(direction)


SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def check_launcher(config: DictConfig) -> None:
    """Check that the sweep's launcher can run its jobs here, before a sweep records anything:
    ``hydra/launcher=slurm`` needs a Slurm cluster (``srun`` found, as submitit looks for it).

    Raises:
        ConfigError: for the Slurm launcher where there is no Slurm.
    """
    if config.hydra.launcher.get("_target_") != SLURM_LAUNCHER:
        return
    import submitit

    if submitit.SlurmExecutor.affinity() <= 0:  # submitit's own test: -1 without srun on the PATH
        raise ConfigError(
            "hydra/launcher=slurm: no Slurm cluster here (srun is not on the PATH); run the sweep on a "
            "Slurm login node, or use hydra/launcher=basic or parallel"
        )


def _record_the_jobs(uri: str, sweep_dir: Path) -> list[tuple[Path, str]]:
    """At a sweep's end: wait for its tracking server (at most :data:`END_WAIT_S` seconds; a
    signal stops the wait), then record what its jobs kept while the server was away
    (:func:`rlplat.tracking.sync.record_kept_runs`). Returns the kept files left, with why.

    Raises:
        SystemExit: 1 when the server did not answer (the parent run stays RUNNING, the
            command that records the jobs later is printed); 130 or 143 on a signal.
    """
    from rlplat.tracking.sync import record_kept_runs, wait_for_server

    def say_waiting(reason: str) -> None:
        print(f"rlplat-train: the tracking server at {uri} does not answer ({reason}): waiting up to "
              f"{END_WAIT_S:g} s to record the sweep's end", file=sys.stderr, flush=True)  # fmt: skip

    problem = wait_for_server(uri, END_WAIT_S, say_waiting, give_up=lambda: LIFE.stopped_by is not None)
    if (stopped := LIFE.stopped_by) is not None:
        raise SystemExit(exit_status(stopped))
    if problem is not None:
        set_active_parent(None)  # nothing more can be recorded at exit either
        print(f"rlplat-train: error: the tracking server at {uri} did not answer within {END_WAIT_S:g} s "
              f"({problem}): the sweep's jobs are kept in their directories; record them with: "
              f"rlplat-sync {shlex.quote(str(sweep_dir))}", file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    synced = record_kept_runs(sweep_dir)
    if synced.recorded:
        runs = "1 run" if len(synced.recorded) == 1 else f"{len(synced.recorded)} runs"
        print(f"rlplat-train: recorded {runs} that jobs kept while the tracking server was away", file=sys.stderr)
    return synced.failed


def _say_failures(failures: dict[int, JobFailure], rows: list[JobRow]) -> None:
    """One line per failed job, in job order: which job, why, the command that runs it again;
    a job whose run ended FAILED without a record of why (its process died) is named by its run."""
    lines = {
        job: f"job {job} failed: {f.reason}"
        + (f" (traceback: {f.details})" if f.details else "")
        + f"; run it again: {f.command}"
        for job, f in failures.items()
    }
    for row in rows:
        if row.status == "FAILED" and row.job not in lines:
            again = f"; run it again: {row.command}" if row.command else ""
            lines[row.job] = f"job {row.job} failed: its run {row.run_id} ended FAILED{again}"
    for job in sorted(lines):
        print(f"rlplat-train: error: {lines[job]}", file=sys.stderr)


class MlflowSweep(Callback):
    """Hydra callback: an MLflow parent run per multirun, and the table of its jobs at the end.

    Holds only strings, so Hydra can pickle it to worker processes with each job.
    """

    def __init__(self) -> None:
        self.parent: ParentRun | None = None
        self.objective = "eval/return_mean"

    # main process -----------------------------------------------------------------------
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check the sweeper's config (exit 2 with one line when bad), then start the parent run.

        From here on, where the jobs run in this process or in local workers, signals are
        recorded rather than raised (:meth:`rlplat.signals.Life.sweep_waits`): one
        that comes while the parent run is created stops the sweep before any job starts,
        with one line and exit status 130 or 143, the parent run ended KILLED. Before, the
        command has recorded nothing: Ctrl-C stops it with one line
        (:func:`rlplat.cli.launch.main`)."""
        activate_hydra_config(config)  # so that ${hydra:runtime.cwd} in tracking.* resolves
        try:
            check_sweeper(config)  # bad sweeper config: one message, nothing recorded
            check_launcher(config)
            if runs_in_local_workers(config.hydra) or runs_in_this_process(config.hydra):
                LIFE.sweep_waits(main_process=True)
            LIFE.start_up_done()  # the sweep records from here
            self.parent = _start_parent(config)  # a store that cannot be used: one message (Hydra only warns)
        except ConfigError as error:
            print(f"rlplat-train: error: {error}", file=sys.stderr)
            sys.exit(2)
        self.objective = str(config.trainer.objective)
        if self.parent is not None:
            set_active_parent(self.parent)
            atexit.register(_end_if_abandoned)
        if (stopped := LIFE.stopped_by) is not None:  # while the parent run was created
            recorded = "nothing recorded" if self.parent is None else f"its parent run {self.parent.run_id} ends KILLED"
            print(f"rlplat-train: stopped by {stopped} before the sweep's first job: {recorded}", file=sys.stderr)
            raise SystemExit(exit_status(stopped))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Print the job table, log it and the best job on the parent run, end the parent
        FINISHED; or, when a signal stopped the jobs of local workers, exit 130 or 143 (the
        parent ends KILLED at exit, as when a signal stops the basic launcher's job)."""
        if (stopped := LIFE.stopped_by) is not None:
            raise SystemExit(exit_status(stopped))
        sweep_dir = Path(sweep_directory(config.hydra))
        failures = job_failures(sweep_dir)
        if self.parent is None:
            _say_failures(failures, [])
            if failures and not sweeper_reports_failures(config.hydra):
                raise SystemExit(1)
            return
        from mlflow import MlflowClient

        unrecorded = _record_the_jobs(self.parent.uri, sweep_dir)
        client = MlflowClient(tracking_uri=self.parent.uri)
        direction = sweep_direction(config)
        rows = job_rows(client, self.parent, self.objective, None if direction is None else direction == "minimize")
        rows += failed_job_rows(failures.values(), rows)  # failed before their run existed
        print_job_table(rows, self.objective, str(config.hydra.sweep.dir), self.parent.run_id)
        client.log_text(self.parent.run_id, jobs_csv(rows, self.objective), "jobs.csv")
        self._report(Path(str(config.hydra.sweep.dir)))
        failed = sum(r.status == "FAILED" for r in rows)
        metrics: dict[str, float] = {
            "sweep/jobs": len(rows),
            "sweep/jobs_failed": failed,
            "sweep/jobs_waited_for_server": sum(r.waited for r in rows),
        }
        tags = {}
        best = rows[0] if rows else None  # rows are sorted: a usable best comes first
        if best is not None and best.status == "FINISHED" and not math.isnan(best.objective):
            metrics[f"best/{self.objective}"] = best.objective
            tags = {"rlplat.best_run_id": best.run_id, "rlplat.best_overrides": best.overrides}
        log_to_active_parent(params={}, metrics=metrics, tags=tags)
        client.set_terminated(self.parent.run_id, status="FINISHED")  # failed jobs are counted above
        self.parent = None
        set_active_parent(None)
        _say_failures(failures, rows)
        for path, why in unrecorded:
            print(f"rlplat-train: error: {path} was not recorded: {why}", file=sys.stderr)
        if unrecorded or (failed and not sweeper_reports_failures(config.hydra)):  # a search goes on past failed trials
            raise SystemExit(1)

    def _report(self, sweep_dir: Path) -> None:
        """Compare the sweep's groups of jobs (every override but the seed) on the objective:
        printed, written into ``<sweep_dir>/report``, logged on the parent run (:mod:`rlplat.report`)."""
        from rlplat.report.report import ARTIFACT_DIR, report_runs

        assert self.parent is not None
        try:
            report_runs(self.parent.uri, [self.parent.run_id], metric=self.objective, out=sweep_dir / ARTIFACT_DIR)
        except ConfigError as error:  # e.g. no job finished: the job table says why
            print(f"rlplat-train: no report: {error}", file=sys.stderr)

    # job process (possibly a worker, or a remote machine) --------------------------------
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Make the sweep's parent this job process's active parent."""
        set_active_parent(self.parent)
