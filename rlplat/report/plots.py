"""The report's plots, each written as PNG and SVG: learning curves (IQM with a confidence
band, over frames or wall time), final-score intervals, performance profiles.

matplotlib is imported when a plot is drawn, with its non-interactive Agg backend, and
every figure is closed once written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from rlplat.report.curves import RunCurve
from rlplat.report.stats import STATISTICS, Interval, curve_band, performance_profile

GRID_POINTS = 60  # points along x at which learning curves are drawn
LABELS = {"mean": "mean", "median": "median", "iqm": "IQM"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, path: Path) -> list[Path]:
    """Write ``figure`` as ``path``.png (150 dpi) and ``path``.svg; close it."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    files = [path.with_suffix(".png"), path.with_suffix(".svg")]
    try:
        figure.tight_layout()
        figure.savefig(files[0], dpi=150)
        figure.savefig(files[1])
    finally:
        plt.close(figure)
    return files


def _groups(curves: Sequence[RunCurve]) -> list[str]:
    return list(dict.fromkeys(c.group for c in curves))


def plot_learning_curves(
    curves: Sequence[RunCurve], x: Literal["frames", "seconds"], metric: str, path: Path
) -> list[Path]:
    """Per group, the IQM of the runs' metric with its 95% stratified bootstrap band, over
    frames or over wall seconds since each run's start.

    Args:
        curves: The runs, each with its group.
        x: ``frames`` or ``seconds``.
        metric: The metric's name (the y axis).
        path: Where to write, without suffix.

    Returns:
        The PNG and SVG files written.
    """
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for group in _groups(curves):
        members = [c for c in curves if c.group == group]
        xs = np.concatenate([c.frames if x == "frames" else c.seconds for c in members])
        grid = np.unique(np.concatenate([np.linspace(xs.min(), xs.max(), GRID_POINTS), xs]))
        value, low, high = curve_band(members, grid, x, "iqm", resamples=500)
        (line,) = axes.plot(grid, value, label=f"{group} ({len(members)} runs)")
        axes.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("frames" if x == "frames" else "wall time (s)")
    axes.set_ylabel(f"{metric} (IQM, 95% CI)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return _save(figure, path)


def plot_final_scores(intervals: Mapping[str, Mapping[str, Interval]], metric: str, path: Path) -> list[Path]:
    """Per group (rows) and statistic (columns: mean, median, IQM): the final score with its
    interval as a bar.

    Args:
        intervals: Group -> statistic name -> interval.
        metric: The metric's name.
        path: Where to write, without suffix.
    """
    plt = _pyplot()
    groups = list(intervals)
    figure, axes = plt.subplots(1, len(STATISTICS), figsize=(9, 0.6 * len(groups) + 1.6), sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, name in zip(axes[0], STATISTICS):
        for row, group in enumerate(groups):
            interval = intervals[group][name]
            color = colors[row % len(colors)]
            column.barh(row, interval.high - interval.low, left=interval.low, height=0.6, color=color, alpha=0.6)
            column.plot([interval.value, interval.value], [row - 0.3, row + 0.3], color="black", linewidth=1.5)
        column.set_title(LABELS[name])
        column.grid(axis="x", alpha=0.3)
        column.set_xlabel(metric)
    axes[0][0].set_yticks(range(len(groups)), groups)
    axes[0][0].invert_yaxis()
    figure.suptitle("final score: point estimate and 95% CI", fontsize="medium")
    return _save(figure, path)


def plot_performance_profiles(scores: Mapping[str, Mapping[str, ArrayLike]], metric: str, path: Path) -> list[Path]:
    """Per group, the fraction of runs whose final score is above tau, over tau, with its
    95% stratified bootstrap band.

    Args:
        scores: Group -> task -> final scores of the runs.
        metric: The metric's name (the x axis).
        path: Where to write, without suffix.
    """
    plt = _pyplot()
    every = np.concatenate([np.asarray(s, dtype=np.float64).reshape(-1) for g in scores.values() for s in g.values()])
    low_end, high_end = float(every.min()), float(every.max())
    margin = 0.05 * (high_end - low_end) or 1.0
    taus = np.linspace(low_end - margin, high_end + margin, 101)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for group, by_task in scores.items():
        value, low, high = performance_profile(by_task, taus, resamples=500)
        (line,) = axes.plot(taus, value, label=group)
        axes.fill_between(taus, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel(f"final {metric} (tau)")
    axes.set_ylabel("fraction of runs with score > tau")
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return _save(figure, path)
