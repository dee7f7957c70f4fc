"""The comparison of groups of runs: final scores with confidence intervals, time to a
threshold, probability of improvement; printed, written as CSV, Markdown and plots, and
logged on a sweep's parent run.

Scores are each run's last value of the metric (its final evaluation). Per group: the
number of runs (seeds), the mean, median and interquartile mean (IQM) of the final scores
with percentile confidence intervals from the stratified bootstrap, and, given a
threshold, how many runs reached it and the median frames and wall seconds they took. Between
groups: the probability of improvement P(A > B), the chance that a run of A scores above a
run of B (ties count half), with its interval. Higher scores are better, but for a metric
where lower is (:data:`rlplat.metrics.LOWER_IS_BETTER`, e.g. ``time/to_target_s``): groups
are then ranked lowest first and the improvement is P(A < B).

Reference: Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS 2021).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlplat.metrics import LOWER_IS_BETTER
from rlplat.registry import ConfigError
from rlplat.report.curves import RunCurve
from rlplat.report.stats import STATISTICS, Interval, aggregate, probability_of_improvement
from rlplat.tags import DESCRIPTION_TAG, DIRECTION_PARAM, SWEEP_TAG

ARTIFACT_DIR = "report"  # artifact folder of the report on the parent run, and folder in the sweep dir
MAX_ALL_PAIRS = 6  # up to this many groups, every pair is compared; beyond, the best against each other
PLOTS = ("learning_curves_frames", "learning_curves_seconds", "final_scores", "performance_profiles")


@dataclass(frozen=True)
class GroupResult:
    """One group's final scores and times.

    Attributes:
        group: The group's label (``key=value ...``, without what every group shares).
        scores: Final scores by task (the strata): task -> float64 array (runs,).
        intervals: ``mean``, ``median``, ``iqm`` of the pooled scores with their intervals.
        frames: Median frames the runs trained for (their last logged step).
        wall_seconds: Median wall time of the runs, seconds.
        reached: Runs whose metric reached the threshold at some evaluation (None: no threshold).
        frames_to_threshold: Median frames at which they first reached it (nan: none did).
        seconds_to_threshold: Median wall seconds from the run's start to that point.
    """

    group: str
    scores: dict[str, np.ndarray]
    intervals: dict[str, Interval]
    frames: float
    wall_seconds: float
    reached: int | None = None
    frames_to_threshold: float = math.nan
    seconds_to_threshold: float = math.nan

    @property
    def runs(self) -> int:
        """Number of runs (seeds) in the group."""
        return sum(len(s) for s in self.scores.values())


@dataclass(frozen=True)
class Improvement:
    """P(a run of ``better`` scores better than a run of ``worse``), with its interval."""

    better: str
    worse: str
    probability: Interval


@dataclass(frozen=True)
class Report:
    """A comparison of groups of runs (see the module doc).

    Attributes:
        metric: The metric compared, e.g. ``eval/return_mean``.
        groups: One result per group, highest IQM first.
        improvements: Probability of improvement of each higher-ranked group over a lower one.
        curves: The runs' curves, with the groups' short labels.
        shared: Overrides every group has in common (not repeated in the labels).
        threshold: The threshold, when given.
        confidence: Confidence level of the intervals, e.g. 0.95.
        left_out: Runs not compared, by reason (status, or "no <metric>").
        lower_is_better: The metric is better lower (seconds to a target): groups ranked
            lowest first, improvements P(A < B).
    """

    metric: str
    groups: list[GroupResult]
    improvements: list[Improvement]
    curves: list[RunCurve]
    shared: str
    threshold: float | None
    confidence: float
    left_out: dict[str, int] = field(default_factory=dict)
    lower_is_better: bool = False

    @property
    def improvement_header(self) -> str:
        """``P(A > B)``, or ``P(A < B)`` when lower is better."""
        return "P(A < B)" if self.lower_is_better else "P(A > B)"


def _short_labels(labels: Sequence[str]) -> tuple[dict[str, str], str]:
    """Each label without the ``key=value`` words every label has; and those words. A single
    label is kept whole; one with no other word reads "(shared overrides only)"."""
    if len(labels) == 1:
        return {labels[0]: labels[0]}, ""
    split = {label: label.split() for label in labels}
    shared_words = set.intersection(*map(set, split.values())) if split else set()
    first = next(iter(split.values()), [])
    shared = " ".join(w for w in first if w in shared_words)
    short = {
        label: " ".join(w for w in words if w not in shared_words) or "(shared overrides only)"
        for label, words in split.items()
    }
    return short, shared


def _first_reach(curve: RunCurve, threshold: float, lower: bool) -> tuple[float, float] | None:
    """Frames and seconds at which ``curve`` first reaches ``threshold`` (at or above it, or
    at or below it for a ``lower``-is-better metric); None when it never does."""
    hits = np.flatnonzero(curve.values <= threshold if lower else curve.values >= threshold)
    if len(hits) == 0:
        return None
    return float(curve.frames[hits[0]]), float(curve.seconds[hits[0]])


def _group_result(
    group: str, members: Sequence[RunCurve], threshold: float | None, lower: bool, options: Mapping[str, Any]
) -> GroupResult:
    """One group's final scores by task, their statistics with intervals, frames, wall time,
    and with a ``threshold`` how many runs reached it and when."""
    scores: dict[str, list[float]] = {}
    for curve in members:
        scores.setdefault(curve.task, []).append(curve.final)
    arrays = {task: np.array(values, dtype=np.float64) for task, values in scores.items()}
    reach: dict[str, Any] = {}
    if threshold is not None:
        hits = [h for h in (_first_reach(c, threshold, lower) for c in members) if h is not None]
        reach = {
            "reached": len(hits),
            "frames_to_threshold": float(np.median([h[0] for h in hits])) if hits else math.nan,
            "seconds_to_threshold": float(np.median([h[1] for h in hits])) if hits else math.nan,
        }
    return GroupResult(
        group=group,
        scores=arrays,
        intervals={name: aggregate(arrays, name, **options) for name in STATISTICS},
        frames=float(np.median([c.frames[-1] for c in members])),
        wall_seconds=float(np.median([c.wall_seconds for c in members])),
        **reach,
    )


def compare(
    curves: Sequence[RunCurve],
    metric: str,
    *,
    threshold: float | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    left_out: Mapping[str, int] | None = None,
    lower_is_better: bool | None = None,
) -> Report:
    """Compare the groups of ``curves`` (see the module doc).

    Args:
        curves: One per run, each with a group and a task label; none empty.
        metric: Name of the metric the curves hold.
        threshold: Score counted as reached, at or above it (at or below it for a metric of
            :data:`rlplat.metrics.LOWER_IS_BETTER`); frames and seconds to it are reported.
        confidence: Confidence level of every interval, in (0, 1).
        resamples: Bootstrap resamples per interval.
        seed: Seed of the bootstrap's generator: the same runs give the same report.
        left_out: Runs not compared, by reason, to mention in the report.
        lower_is_better: The metric is better lower (an Optuna sweep that minimizes it); None:
            for a metric of :data:`rlplat.metrics.LOWER_IS_BETTER` only.

    Returns:
        The report, groups sorted by IQM, best first (highest, or lowest when lower is better).

    Raises:
        ValueError: when ``curves`` is empty.
    """
    if not curves:
        raise ValueError("no runs to compare")
    lower = metric in LOWER_IS_BETTER if lower_is_better is None else lower_is_better
    short, shared = _short_labels(sorted({c.group for c in curves}))
    curves = [dataclasses.replace(c, group=short[c.group]) for c in curves]
    options: dict[str, Any] = {"confidence": confidence, "resamples": resamples, "seed": seed}
    groups = dict.fromkeys(c.group for c in curves)
    results = [_group_result(g, [c for c in curves if c.group == g], threshold, lower, options) for g in groups]
    results.sort(key=lambda r: r.intervals["iqm"].value if lower else -r.intervals["iqm"].value)
    rank = {r.group: i for i, r in enumerate(results)}
    curves = sorted(curves, key=lambda c: rank[c.group])  # plots list the groups as the table does
    pairs = [(a, b) for i, a in enumerate(results) for b in results[i + 1 :]]
    if len(results) > MAX_ALL_PAIRS:
        pairs = [(results[0], b) for b in results[1:]]
    improvements = []
    for a, b in pairs:
        if set(a.scores) & set(b.scores):
            x, y = (b.scores, a.scores) if lower else (a.scores, b.scores)  # P(A < B) is P(B > A)
            improvements.append(Improvement(a.group, b.group, probability_of_improvement(x, y, **options)))
    return Report(metric, results, improvements, curves, shared, threshold, confidence, dict(left_out or {}), lower)


def _interval(value: Interval) -> str:
    digits = _decimals(value)
    return f"{value.value:.{digits}f} [{value.low:.{digits}f}, {value.high:.{digits}f}]"


def _decimals(value: Interval, most: int = 6) -> int:
    """Decimals that show the interval's width to two significant digits (at least one
    decimal): ``-163.2 [-210.6, -158.7]``, ``0.153 [0.121, 0.187]``. A collapsed interval
    (one run, or every run equal) shows its value to two significant digits."""
    width = value.high - value.low
    scale = width if math.isfinite(width) and width > 0 else abs(value.value)
    if not math.isfinite(scale) or scale == 0:
        return 1
    return min(most, max(1, 1 - math.floor(math.log10(scale))))


def _probability(value: Interval) -> str:
    return f"{value.value:.2f} [{value.low:.2f}, {value.high:.2f}]"


def _number(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _columns(report: Report) -> list[str]:
    level = f"{report.confidence:.0%} CI"
    columns = ["group", "seeds", f"mean [{level}]", f"median [{level}]", f"IQM [{level}]", "frames", "wall (s)"]
    if report.threshold is not None:
        reached = "≤" if report.lower_is_better else "≥"
        columns += [f"reached {reached} {report.threshold:g}", "frames to it", "seconds to it"]
    return columns


def _cells(report: Report, result: GroupResult) -> list[str]:
    cells = [
        result.group,
        str(result.runs),
        *(_interval(result.intervals[name]) for name in STATISTICS),
        _number(result.frames),
        _number(result.wall_seconds, 1),
    ]
    if report.threshold is not None:
        cells += [
            f"{result.reached}/{result.runs}",
            _number(result.frames_to_threshold),
            _number(result.seconds_to_threshold, 1),
        ]
    return cells


def _caption(report: Report) -> str:
    runs, groups = sum(r.runs for r in report.groups), len(report.groups)
    text = (
        f"{runs} runs in {groups} group{'s' if groups != 1 else ''}; final {report.metric} per run; "
        f"{report.confidence:.0%} intervals by stratified bootstrap (Agarwal et al. 2021); "
        f"{'lower' if report.lower_is_better else 'higher'} is better"
    )
    if report.shared:
        text += f"; all runs: {report.shared}"
    if report.left_out:
        text += "; left out: " + ", ".join(f"{n} {reason}" for reason, n in report.left_out.items())
    return text


def report_markdown(report: Report, images: Sequence[str] = ()) -> str:
    """The report as Markdown: a heading, the group table, the improvement table, a caption.

    Args:
        report: The report.
        images: Relative paths of plots to show below the tables (none by default).
    """
    columns = _columns(report)
    lines = [f"## rlplat report: {report.metric}", ""]
    lines += [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|",
    ]
    lines += ["| " + " | ".join(_cells(report, r)) + " |" for r in report.groups]
    if report.improvements:
        level = f"{report.confidence:.0%} CI"
        lines += ["", f"| A | B | {report.improvement_header} [{level}] |", "|---|---|---:|"]
        lines += [f"| {i.better} | {i.worse} | {_probability(i.probability)} |" for i in report.improvements]
    lines += ["", _caption(report) + "."]
    for image in images:
        lines += ["", f"![{Path(image).stem}]({image})"]
    return "\n".join(lines) + "\n"


def report_csv(report: Report) -> str:
    """One row per group: seeds, each statistic with its interval ends, frames, wall time and
    the threshold columns (empty without a threshold)."""
    text = io.StringIO()
    writer = csv.writer(text)
    header = ["group", "seeds"]
    for name in STATISTICS:
        header += [name, f"{name}_low", f"{name}_high"]
    header += ["frames", "wall_seconds", "threshold", "reached", "frames_to_threshold", "seconds_to_threshold"]
    writer.writerow(header)
    for r in report.groups:
        row: list[Any] = [r.group, r.runs]
        for name in STATISTICS:
            value = r.intervals[name]
            row += [value.value, value.low, value.high]
        row += [r.frames, r.wall_seconds, "" if report.threshold is None else report.threshold]
        row += ["" if r.reached is None else r.reached, r.frames_to_threshold, r.seconds_to_threshold]
        writer.writerow(row)
    return text.getvalue()


def print_report(report: Report, console: Any = None) -> None:
    """Print the report's tables with rich (200 columns wide off a terminal)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # cells as text: a label like tracking.also=[csv] is no markup

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    table = Table(title=f"rlplat report: {report.metric}", caption=_caption(report), caption_justify="left")
    for index, column in enumerate(_columns(report)):
        table.add_column(column, justify="left" if index == 0 else "right", overflow="fold")
    for result in report.groups:
        table.add_row(*map(Text, _cells(report, result)))
    console.print(table)
    if report.improvements:
        level = f"{report.confidence:.0%} CI"
        pairs = Table(title="probability of improvement")
        pairs.add_column("A", overflow="fold")
        pairs.add_column("B", overflow="fold")
        pairs.add_column(f"{report.improvement_header} [{level}]", justify="right")
        for i in report.improvements:
            pairs.add_row(Text(i.better), Text(i.worse), Text(_probability(i.probability)))
        console.print(pairs)


def write_report(report: Report, directory: Path) -> list[Path]:
    """Write report.md, report.csv and the plots (PNG and SVG) into ``directory``.

    The files are written into a staging folder inside ``directory`` and moved into place once
    all of them are: a report stopped half-way (an error, Ctrl-C) leaves ``directory`` as it
    was, or no ``directory`` when it did not exist.

    Returns:
        The files written.
    """
    from rlplat.report.plots import plot_final_scores, plot_learning_curves, plot_performance_profiles

    new = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".report-", dir=directory))
    try:
        plots = plot_learning_curves(report.curves, "frames", report.metric, staging / "learning_curves_frames")
        plots += plot_learning_curves(report.curves, "seconds", report.metric, staging / "learning_curves_seconds")
        intervals = {r.group: r.intervals for r in report.groups}
        plots += plot_final_scores(intervals, report.metric, staging / "final_scores")
        plots += plot_performance_profiles(
            {r.group: r.scores for r in report.groups}, report.metric, staging / "performance_profiles"
        )
        markdown, table = staging / "report.md", staging / "report.csv"
        markdown.write_text(report_markdown(report, [f"{name}.png" for name in PLOTS]))
        table.write_text(report_csv(report))
        return [file.replace(directory / file.name) for file in (markdown, table, *plots)]
    except BaseException:
        if new:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def log_report(client: Any, run_id: str, report: Report, directory: Path) -> None:
    """Log the written report on ``run_id``: the files of ``directory`` as artifacts under
    ``report/``, and the tables as the run's description (shown on its page in the MLflow UI).

    Args:
        client: An ``mlflow.MlflowClient`` on the run's store.
        run_id: The run, e.g. a sweep's parent.
        report: The report.
        directory: Where :func:`write_report` wrote it.
    """
    client.log_artifacts(run_id, str(directory), ARTIFACT_DIR)
    description = report_markdown(report)
    description += "\n" + "Plots: artifacts " + ", ".join(f"`{ARTIFACT_DIR}/{name}.png`" for name in PLOTS) + ".\n"
    client.set_tag(run_id, DESCRIPTION_TAG, description)


@dataclass(frozen=True)
class Written:
    """A report made by :func:`report_runs`: the report, its files, the run it was logged on."""

    report: Report
    files: list[Path]
    logged_on: str | None


def _report_dir(parent: Any) -> Path:
    """Where a report goes by default: ``report/`` in the sweep directory of the parent run
    it compares, else ``outputs/compare/<date>/<time>`` under the working directory."""
    sweep_dir = Path(parent.data.tags.get(SWEEP_TAG, "")) if parent is not None else None
    if sweep_dir is not None and sweep_dir.is_dir():
        return sweep_dir / ARTIFACT_DIR
    return Path("outputs") / "compare" / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")


def report_runs(
    uri: str,
    targets: Sequence[str],
    *,
    metric: str,
    out: Path | None,
    group_by: Sequence[str] | None = None,
    threshold: float | None = None,
    confidence: float = 0.95,
    console: Any = None,
    lower_is_better: bool | None = None,
) -> Written:
    """Read the runs ``targets`` name from the store at ``uri``, compare their groups, print
    the report, write it, and log it on the sweep's parent run when the one target is one.

    Args:
        uri: MLflow tracking URI of the store.
        targets: Run ids, experiment names or search filters (see
            :func:`rlplat.report.runs.select_runs`).
        metric: Metric compared (its last value per run is the run's score).
        out: Folder to write into; None: ``report/`` in a parent run's sweep directory, else
            ``outputs/compare/<date>/<time>`` under the working directory.
        group_by: Keys that make a group; None: every override but the seed.
        threshold: Score counted as reached, if any.
        confidence: Level of the intervals.
        console: A rich console to print on (a new one on stdout when None).
        lower_is_better: The metric is better lower; None: as the sweep that the one target
            is the parent of was directed (its ``sweep.direction`` param, an Optuna sweep's),
            else for a metric of :data:`rlplat.metrics.LOWER_IS_BETTER` only.

    Raises:
        ConfigError: for targets that name nothing, a ``group_by`` key or metric no run has.
    """
    from rlplat.report.runs import client_for, group_runs, read_curves, select_runs

    client = client_for(uri)
    selection = select_runs(client, targets)
    labelled = group_runs(selection.runs, group_by)
    curves = read_curves(client, labelled, metric)
    left_out = dict(selection.left_out)
    if len(curves) < len(labelled):
        left_out[f"without {metric}"] = len(labelled) - len(curves)
    finite = [c for c in curves if math.isfinite(c.final)]  # e.g. time/to_target_s of a target never reached
    if len(finite) < len(curves):
        left_out[f"with an infinite {metric}"] = len(curves) - len(finite)
    if not finite:
        raise ConfigError(f"metric={metric}: every run's last value is infinite: no score to compare")
    parent = client.get_run(selection.parent_run_id) if selection.parent_run_id else None
    direction = parent.data.params.get(DIRECTION_PARAM) if parent is not None else None
    if lower_is_better is None and direction is not None:  # as the sweep that made the runs ranked them
        lower_is_better = direction == "minimize"
    report = compare(
        finite, metric, threshold=threshold, confidence=confidence, left_out=left_out, lower_is_better=lower_is_better
    )
    out = out or _report_dir(parent)
    print_report(report, console)
    files = write_report(report, out)
    if parent is not None:
        log_report(client, parent.info.run_id, report, out)
    return Written(report, files, parent.info.run_id if parent is not None else None)
