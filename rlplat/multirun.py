"""Sweeps in MLflow: one parent run per multirun, one child run per job, a table at the end.

``rlplat-train -m ...`` runs Hydra's multirun: a sweeper expands the overrides into jobs and
a launcher runs them (in this process, in worker processes, on Ray or Slurm). The
:class:`MlflowSweep` callback, listed under ``hydra.callbacks`` in conf/config.yaml, follows
that in MLflow:

* before any job starts, it creates the sweep's parent run (in the main process);
* each job's run is created as its child (tag ``mlflow.parentRunId``) and tagged with the
  job's overrides. Hydra pickles its callbacks along with each job, so the parent's id
  reaches jobs in worker processes and on remote Ray or Slurm workers alike;
* when every job has returned, it prints the jobs sorted by ``trainer.objective``, logs
  the same table on the parent run and ends the parent FINISHED; a sweep that stops with an
  error (Hydra's basic sweeper stops at the first failed job) leaves its parent FAILED.
"""

from __future__ import annotations

import atexit
import csv
import io
import math
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import filter_overrides
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlplat.config import unroute

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag: the UI shows children under parents
SWEEP_TAG = "rlplat.sweep"  # on parent and children: the sweep's output directory
OVERRIDES_TAG = "rlplat.overrides"  # on a child: the job's overrides, space-separated
JOB_TAG = "rlplat.job"  # on a child: the job's number in the sweep
PRUNED_TAG = "rlplat.pruned"  # on a child stopped early by a pruner: "true"


@dataclass(frozen=True)
class ParentRun:
    """Where a sweep's parent run lives: enough to reach it from any process."""

    uri: str
    experiment_id: str
    run_id: str


_active_parent: ParentRun | None = None


def active_parent() -> ParentRun | None:
    """The parent run of the sweep the current job (or sweeper) belongs to, if any."""
    return _active_parent


def log_to_active_parent(
    params: dict[str, str], metrics: dict[str, float], tags: dict[str, str], artifact: Path | None = None
) -> None:
    """Log a sweeper's results (e.g. the best trial's params) on the sweep's parent run, if any."""
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


def _end_if_abandoned() -> None:
    """At exit of a sweep that stopped with an error: end its parent run FAILED."""
    global _active_parent
    if _active_parent is not None:
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=_active_parent.uri).set_terminated(_active_parent.run_id, status="FAILED")
        _active_parent = None


def child_tags(parent: ParentRun, hydra_cfg: DictConfig) -> dict[str, str]:
    """Tags that make a job's run the child of ``parent``: parent id, sweep, job, overrides."""
    overrides = filter_overrides(list(hydra_cfg.overrides.task))
    return {
        PARENT_TAG: parent.run_id,
        SWEEP_TAG: str(hydra_cfg.sweep.dir),
        JOB_TAG: str(hydra_cfg.job.num),
        OVERRIDES_TAG: " ".join(map(unroute, overrides)),
    }


class MlflowSweep(Callback):
    """Hydra callback: an MLflow parent run per multirun, and the table of its jobs at the end.

    Holds only strings, so Hydra can pickle it to worker processes with each job.
    """

    def __init__(self) -> None:
        self.parent: ParentRun | None = None
        self.objective = "eval/return_mean"

    # main process -----------------------------------------------------------------------
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _active_parent
        from rlplat.optuna_sweeper import check_sweeper
        from rlplat.registry import ConfigError
        from rlplat.tracking import Tracker, TrackingConfig

        HydraConfig.instance().set_config(config)  # so that ${hydra:runtime.cwd} resolves
        try:
            check_sweeper(config)  # bad sweeper config: one message, nothing recorded
        except ConfigError as error:
            print(f"rlplat-train: error: {error}", file=sys.stderr)
            sys.exit(2)
        tracking = TrackingConfig.from_node(config.tracking)
        if not tracking.enabled:
            return
        self.objective = str(config.trainer.objective)
        hydra_cfg = config.hydra
        tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location)
        overrides = [unroute(o) for o in hydra_cfg.overrides.task]
        choices = hydra_cfg.runtime.choices
        tags = {
            SWEEP_TAG: str(hydra_cfg.sweep.dir),
            "command": shlex.join(["rlplat-train", *map(unroute, sys.argv[1:])]),
            "rlplat.sweeper": str(choices.get("hydra/sweeper")),
            "rlplat.launcher": str(choices.get("hydra/launcher")),
        }
        params = {"sweep.overrides": " ".join(overrides), "sweep.dir": str(hydra_cfg.sweep.dir)}
        name = tracking.run_name or f"sweep-{str(hydra_cfg.sweep.dir).rstrip('/').rsplit('/', 1)[-1]}"
        tracker.start(name, params, tags)
        self.parent = ParentRun(tracking.uri, tracker.experiment_id, tracker.run_id)
        _active_parent = self.parent
        atexit.register(_end_if_abandoned)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _active_parent
        if self.parent is None:
            return
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=self.parent.uri)
        rows = job_rows(client, self.parent, self.objective)
        print_job_table(rows, self.objective, str(config.hydra.sweep.dir))
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["job", "overrides", "status", self.objective, "seconds", "run_id"])
        writer.writerows([r.job, r.overrides, r.status, r.objective, r.seconds, r.run_id] for r in rows)
        client.log_text(self.parent.run_id, text.getvalue(), "jobs.csv")
        metrics = {"sweep/jobs": len(rows), "sweep/jobs_failed": sum(r.status == "FAILED" for r in rows)}
        tags = {}
        best = rows[0] if rows else None  # rows are sorted: a usable best comes first
        if best is not None and best.status == "FINISHED" and not math.isnan(best.objective):
            metrics[f"best/{self.objective}"] = best.objective
            tags = {"rlplat.best_run_id": best.run_id, "rlplat.best_overrides": best.overrides}
        log_to_active_parent(params={}, metrics=metrics, tags=tags)
        client.set_terminated(self.parent.run_id, status="FINISHED")  # failed jobs are counted above
        self.parent = _active_parent = None

    # job process (possibly a worker, or a remote machine) --------------------------------
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _active_parent
        _active_parent = self.parent


@dataclass(frozen=True)
class JobRow:
    """One job of a sweep as recorded in MLflow."""

    job: int
    overrides: str
    status: str
    objective: float
    seconds: float
    run_id: str


def job_rows(client: Any, parent: ParentRun, objective: str) -> list[JobRow]:
    """The parent's child runs, best ``objective`` first; failed, pruned and unfinished last.

    Args:
        client: An ``mlflow.MlflowClient`` on the parent's store.
        parent: The sweep's parent run.
        objective: Metric the jobs are sorted by, descending (larger is better).
    """
    runs = client.search_runs(
        [parent.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent.run_id}'", max_results=10000
    )
    rows = []
    for run in runs:
        tags = run.data.tags
        status = "PRUNED" if tags.get(PRUNED_TAG) == "true" else run.info.status
        rows.append(
            JobRow(
                job=int(tags.get(JOB_TAG, -1)),
                overrides=tags.get(OVERRIDES_TAG, ""),
                status=status,
                objective=float(run.data.metrics.get(objective, math.nan)),
                seconds=((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000,
                run_id=run.info.run_id,
            )
        )

    def rank(row: JobRow) -> tuple[int, float, int]:
        usable = row.status == "FINISHED" and not math.isnan(row.objective)
        return (0 if usable else 1, -row.objective if usable else 0.0, row.job)

    return sorted(rows, key=rank)


def _short_numbers(override: str) -> str:
    """``optim.lr=0.000162835910`` -> ``optim.lr=0.0001628``: a float value to 4 significant digits."""
    key, _, value = override.partition("=")
    if re.fullmatch(r"-?\d+\.\d{5,}(e-?\d+)?", value):
        return f"{key}={float(value):.4g}"
    return override


def print_job_table(rows: list[JobRow], objective: str, sweep_dir: str) -> None:
    """Print the sweep's jobs as a rich table, in the order given: the overrides that differ
    between jobs in a column, the ones they share on a line above."""
    from rich.console import Console
    from rich.table import Table

    split = [row.overrides.split() for row in rows]
    shared = set.intersection(*map(set, split)) if split else set()
    lines = [f"sweep {sweep_dir}: {len(rows)} jobs, best {objective} first"]
    if shared:
        lines.append("shared overrides: " + " ".join(o for o in split[0] if o in shared))
    table = Table()
    table.add_column("job", justify="right")
    table.add_column("overrides", overflow="fold")
    table.add_column("status")
    table.add_column(objective, justify="right", min_width=len(objective))
    table.add_column("wall (s)", justify="right")
    table.add_column("run id")
    for row, overrides in zip(rows, split):
        value = "-" if math.isnan(row.objective) else f"{row.objective:.2f}"
        style = {"FAILED": "red", "PRUNED": "yellow", "KILLED": "yellow"}.get(row.status)
        varying = " ".join(_short_numbers(o) for o in overrides if o not in shared)
        table.add_row(str(row.job), varying, row.status, value, f"{row.seconds:.0f}", row.run_id[:12], style=style)
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough that each job stays on one line
        console = Console(width=200)
    console.print("\n".join(lines), highlight=False)
    console.print(table)
