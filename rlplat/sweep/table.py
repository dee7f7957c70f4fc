"""The job table of a sweep: its child runs read back from MLflow, best first, printed and as CSV."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rlplat.metrics import DOWNTIME_SECONDS, LOWER_IS_BETTER
from rlplat.report.runs import metric_value
from rlplat.sweep.runs import JOB_TAG, OVERRIDES_TAG, PARENT_TAG, PRUNED_TAG, JobFailure, ParentRun
from rlplat.tags import RESTARTED_TAG, WAITED_TAG


@dataclass(frozen=True)
class JobRow:
    """One job of a sweep as recorded in MLflow."""

    job: int  # the job's number in the sweep (-1 when untagged)
    overrides: str  # the job's overrides as typed, space-separated
    status: str  # MLflow run status, or PRUNED for a run a pruner stopped
    objective: float  # the sorted-by metric's last value; nan when never logged
    seconds: float  # wall time of the run, less the time it was down before a resume
    run_id: str  # "-" for a job that failed before its run existed
    waited: bool = False  # its run's creation or writes waited for the tracking server
    command: str = ""  # the command that runs the job alone (its run's "command" tag)


def job_rows(client: Any, parent: ParentRun, objective: str, lower_is_better: bool | None = None) -> list[JobRow]:
    """The parent's child runs, best ``objective`` first; failed, pruned and unfinished last.

    Args:
        client: An ``mlflow.MlflowClient`` on the parent's store.
        parent: The sweep's parent run.
        objective: Metric the jobs are sorted by: descending, but ascending when lower is better.
        lower_is_better: The objective is better lower (an Optuna sweep that minimizes it);
            None: for a metric of :data:`rlplat.metrics.LOWER_IS_BETTER` (seconds to a target).

    Returns:
        One row per child run (but those whose job was started again, tag ``rlplat.restarted``);
        ties and unusable rows in job order.
    """
    runs = client.search_runs(
        [parent.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent.run_id}'", max_results=10000
    )
    rows = []
    for run in runs:
        tags = run.data.tags
        if tags.get(RESTARTED_TAG) == "true":  # its job ran again, as another run
            continue
        status = "PRUNED" if tags.get(PRUNED_TAG) == "true" else run.info.status
        rows.append(
            JobRow(
                job=int(tags.get(JOB_TAG, -1)),
                overrides=tags.get(OVERRIDES_TAG, ""),
                status=status,
                objective=metric_value(float(run.data.metrics.get(objective, math.nan))),
                seconds=((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000
                - run.data.metrics.get(DOWNTIME_SECONDS, 0.0),
                run_id=run.info.run_id,
                waited=tags.get(WAITED_TAG) == "true",
                command=tags.get("command", ""),
            )
        )

    lower = objective in LOWER_IS_BETTER if lower_is_better is None else lower_is_better

    def rank(row: JobRow) -> tuple[int, float, int]:
        usable = row.status == "FINISHED" and not math.isnan(row.objective)
        sign = 1.0 if lower else -1.0
        return (0 if usable else 1, sign * row.objective if usable else 0.0, row.job)

    return sorted(rows, key=rank)


def failed_job_rows(failures: Iterable[JobFailure], rows: list[JobRow]) -> list[JobRow]:
    """Rows for the ``failures`` whose job has no row among ``rows``: jobs that failed before
    their run existed (status FAILED, no objective, run id ``-``), in job order."""
    listed = {row.job for row in rows}
    return [
        JobRow(f.job, f.overrides, "FAILED", math.nan, 0.0, "-", command=f.command)
        for f in sorted(failures, key=lambda f: f.job)
        if f.job not in listed
    ]


def jobs_csv(rows: list[JobRow], objective: str) -> str:
    """The rows as CSV text with a header line: job, overrides, status, objective, seconds, run_id."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["job", "overrides", "status", objective, "seconds", "run_id"])
    writer.writerows([r.job, r.overrides, r.status, r.objective, r.seconds, r.run_id] for r in rows)
    return text.getvalue()


def _short_numbers(override: str) -> str:
    """``optim.lr=0.000162835910`` -> ``optim.lr=0.0001628``: a float value to 4 significant digits."""
    key, _, value = override.partition("=")
    if re.fullmatch(r"-?\d+\.\d{5,}(e-?\d+)?", value):
        return f"{key}={float(value):.4g}"
    return override


def print_job_table(rows: list[JobRow], objective: str, sweep_dir: str, parent_run_id: str | None = None) -> None:
    """Print the sweep's jobs as a rich table, in the order given.

    The overrides that differ between jobs go in a column, the ones they share on a line
    above. Off a terminal the table is 200 columns wide, so each job stays on one line.

    Args:
        rows: The jobs, e.g. from :func:`job_rows`.
        objective: Name of the objective column.
        sweep_dir: The sweep's output directory, shown in the heading.
        parent_run_id: The sweep's parent run, named in the heading (``rlplat-compare`` takes it).
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # overrides as text: tracking.also=[csv] is no markup

    split = [row.overrides.split() for row in rows]
    shared = set.intersection(*map(set, split)) if split else set()
    parent = f" (parent run {parent_run_id})" if parent_run_id else ""
    lines = [f"sweep {sweep_dir}{parent}: {len(rows)} jobs, best {objective} first"]
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
        # the whole run id: rlplat-eval and rlplat-compare take it
        cells = (str(row.job), Text(varying), row.status, value, f"{row.seconds:.0f}", row.run_id)
        table.add_row(*cells, style=style)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print("\n".join(lines), highlight=False, markup=False)
    console.print(table)
