"""The report's plots, each written as PNG and SVG: learning curves (IQM with a confidence
band, over frames or wall time), final-score intervals, performance profiles.

matplotlib is imported when a plot is drawn. Figures are built as
``matplotlib.figure.Figure`` objects, not through pyplot: they are never registered with
pyplot (nothing to close, nothing leaks, no backend is switched under a user's open
figures), and PNGs are rendered by matplotlib's Agg renderer whatever the backend.

Reference: Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS 2021): interval estimates, performance profiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from rlplat.report.curves import RunCurve
from rlplat.report.stats import STATISTICS, Interval, curve_band, performance_profile

MAX_GRID_POINTS = 200  # at most this many points along x per learning curve (else evenly spaced)
BAND_RESAMPLES = 500  # bootstrap resamples per band and profile: smooth enough to see, fast to draw
LABELS = {"mean": "mean", "median": "median", "iqm": "IQM"}
LINESTYLES = ("-", "--", ":", "-.")  # after the 10 colors of the cycle, the next 10 groups dashed, ...


def _figure(width: float, height: float, columns: int = 1) -> tuple[Any, Any]:
    """A new figure (not registered with pyplot) and its row of ``columns`` axes."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    axes = figure.subplots(1, columns, sharey=True, squeeze=False)[0]
    return figure, axes


def _style(index: int) -> dict[str, str]:
    """Color and line style of the ``index``-th group: the color cycle, then line styles."""
    import matplotlib

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return {"color": colors[index % len(colors)], "linestyle": LINESTYLES[index // len(colors) % len(LINESTYLES)]}


def _save(figure: Any, path: Path) -> list[Path]:
    """Write ``figure`` as ``path``.png (150 dpi) and ``path``.svg, legends outside the axes included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files = [path.with_suffix(".png"), path.with_suffix(".svg")]
    figure.savefig(files[0], dpi=150, bbox_inches="tight")
    figure.savefig(files[1], bbox_inches="tight")
    return files


def _legend(axes: Any) -> None:
    """The groups' legend, right of the axes (many groups would hide the curves)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def plot_learning_curves(
    curves: Sequence[RunCurve], x: Literal["frames", "seconds"], metric: str, path: Path
) -> list[Path]:
    """Per group, the IQM of the runs' metric with its 95% stratified bootstrap band, over
    frames or over wall seconds since each run's start (:func:`rlplat.report.stats.curve_band`).

    Each run is a step function (its last value logged at or before x), so the IQM is drawn
    as steps, at every point where a run's value changes (evenly spaced points when there
    are more than ``MAX_GRID_POINTS``). Runs without values are left out.

    Args:
        curves: The runs, each with its group (and task: the band's strata).
        x: ``frames`` or ``seconds``.
        metric: The metric's name (the y axis).
        path: Where to write, without suffix.

    Returns:
        The PNG and SVG files written.

    Raises:
        ValueError: for ``x`` other than frames or seconds, or a curve with a nan or infinite value.
    """
    if x not in ("frames", "seconds"):
        raise ValueError(f"x={x!r}: valid: frames, seconds")
    bands = []
    for group in dict.fromkeys(c.group for c in curves):
        members = [c for c in curves if c.group == group and len(c.values)]
        if not members:
            continue
        xs = np.concatenate([c.frames if x == "frames" else c.seconds for c in members])
        grid = np.unique(xs)  # every point where a run's value changes: the IQM's steps, exactly
        if len(grid) > MAX_GRID_POINTS:
            grid = np.linspace(xs.min(), xs.max(), MAX_GRID_POINTS)
        band = curve_band(members, grid, x, "iqm", resamples=BAND_RESAMPLES)
        bands.append((f"{group} ({len(members)} runs)", grid, band))
    figure, (axes,) = _figure(7, 4.5)
    for index, (label, grid, (value, low, high)) in enumerate(bands):
        style = _style(index)
        axes.plot(grid, value, drawstyle="steps-post", label=label, **style)
        axes.fill_between(grid, low, high, step="post", color=style["color"], alpha=0.2, linewidth=0)
    axes.set_xlabel("frames" if x == "frames" else "wall time (s)")
    axes.set_ylabel(f"{metric} (IQM, 95% CI)")
    axes.grid(alpha=0.3)
    _legend(axes)
    return _save(figure, path)


def plot_final_scores(intervals: Mapping[str, Mapping[str, Interval]], metric: str, path: Path) -> list[Path]:
    """Per group (rows) and statistic (columns: mean, median, IQM): the final score as a
    black tick, its 95% interval as a bar.

    Args:
        intervals: Group -> statistic name (every one of ``STATISTICS``) -> interval.
        metric: The metric's name (the x axis).
        path: Where to write, without suffix.

    Returns:
        The PNG and SVG files written.

    Raises:
        ValueError: when there is no group, or a group lacks one of ``STATISTICS``.
    """
    groups = list(intervals)
    if not groups:
        raise ValueError("plot_final_scores: no group")
    for group, by_statistic in intervals.items():
        missing = [name for name in STATISTICS if name not in by_statistic]
        if missing:
            raise ValueError(f"plot_final_scores: group {group!r} lacks {', '.join(missing)}")
    figure, axes = _figure(9, 0.6 * len(groups) + 1.6, columns=len(STATISTICS))
    for column, name in zip(axes, STATISTICS):
        for row, group in enumerate(groups):
            interval = intervals[group][name]
            color = _style(row)["color"]
            column.barh(row, interval.high - interval.low, left=interval.low, height=0.6, color=color, alpha=0.6)
            column.plot([interval.value, interval.value], [row - 0.3, row + 0.3], color="black", linewidth=1.5)
        column.set_title(LABELS[name])
        column.grid(axis="x", alpha=0.3)
        column.set_xlabel(metric)
    axes[0].set_yticks(range(len(groups)), groups)
    axes[0].invert_yaxis()
    figure.suptitle("final score: point estimate and 95% CI", fontsize="medium")
    figure.tight_layout()
    return _save(figure, path)


def plot_performance_profiles(scores: Mapping[str, Mapping[str, ArrayLike]], metric: str, path: Path) -> list[Path]:
    """Per group, the fraction of runs whose final score is above tau, over tau, with its
    95% stratified bootstrap band (:func:`rlplat.report.stats.performance_profile`).

    The profile is a step function that drops at each run's score; it is drawn exactly, at
    every score of any group, from a little below the lowest to a little above the highest.

    Args:
        scores: Group -> task -> final scores of the runs.
        metric: The metric's name (the x axis).
        path: Where to write, without suffix.

    Returns:
        The PNG and SVG files written.

    Raises:
        ValueError: when there is no group, a group has no score, or a nan or infinite one.
    """
    if not scores:
        raise ValueError("plot_performance_profiles: no group")
    every = []
    for group, by_task in scores.items():
        finals = [np.asarray(s, dtype=np.float64).reshape(-1) for s in by_task.values()]
        if not sum(len(f) for f in finals):
            raise ValueError(f"plot_performance_profiles: group {group!r} has no score")
        if not all(np.isfinite(f).all() for f in finals):
            raise ValueError(f"plot_performance_profiles: group {group!r} has a nan or infinite score")
        every.extend(finals)
    points = np.unique(np.concatenate(every))
    margin = 0.05 * (points[-1] - points[0]) or 1.0
    taus = np.concatenate([[points[0] - margin], points, [points[-1] + margin]])
    profiles = [(group, performance_profile(t, taus, resamples=BAND_RESAMPLES)) for group, t in scores.items()]
    figure, (axes,) = _figure(7, 4.5)
    for index, (group, (value, low, high)) in enumerate(profiles):
        style = _style(index)
        axes.plot(taus, value, drawstyle="steps-post", label=group, **style)
        axes.fill_between(taus, low, high, step="post", color=style["color"], alpha=0.2, linewidth=0)
    axes.set_xlabel(f"final {metric} (tau)")
    axes.set_ylabel("fraction of runs with score > tau")
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    _legend(axes)
    return _save(figure, path)
