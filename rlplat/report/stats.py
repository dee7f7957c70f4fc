"""Aggregate statistics over runs with stratified bootstrap confidence intervals.

Scores come as ``task -> 1-D array of runs`` (a task is a stratum: an env, or one setting
of the keys not compared). A statistic is computed on all runs pooled; its interval is the
percentile interval of the statistic over bootstrap resamples in which each task's runs are
drawn with replacement separately (the stratified bootstrap), computed by
``scipy.stats.bootstrap``. A task with a single run cannot be resampled and enters every
resample as it is; when no task has two runs, the interval is the point itself.

Scores must be finite: a nan or infinite score (a run that never evaluated, one that
diverged) raises ``ValueError`` naming its task, rather than being dropped silently; the
caller chooses which runs to leave out and says so.

Reference: Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS 2021): interquartile mean, stratified bootstrap intervals, performance
profiles, probability of improvement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from rlplat.report.curves import RunCurve

STATISTICS = ("mean", "median", "iqm")
RESAMPLES = 2000  # bootstrap resamples per interval: its ends vary by 1-4% of its width from one seed to another


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    value: float  # the statistic on the data as given
    low: float  # lower end of the interval
    high: float  # upper end


def iqm(scores: ArrayLike, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle half of ``scores`` along ``axis``.

    With n runs, ``int(0.25 n)`` are cut from each end of the sorted runs, as in
    ``scipy.stats.trim_mean(scores, 0.25, axis)`` (the same values; sorting is faster on the
    bootstrap's many small resamples). Agarwal et al. (2021), section 4.

    Returns:
        float64 array without ``axis`` (a 0-d array for 1-D input); nan for no runs.
    """
    ordered = np.sort(np.moveaxis(np.asarray(scores, dtype=np.float64), axis, -1), axis=-1)
    n = ordered.shape[-1]
    if n == 0:
        return np.full(ordered.shape[:-1], np.nan)
    cut = int(0.25 * n)
    return np.asarray(np.mean(ordered[..., cut : n - cut], axis=-1))


_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "mean": lambda x, axis: np.asarray(np.mean(x, axis=axis)),
    "median": lambda x, axis: np.asarray(np.median(x, axis=axis)),
    "iqm": iqm,
}


def _arrays(scores_by_task: Mapping[str, ArrayLike], name: str) -> dict[str, np.ndarray]:
    """Each task's scores as a float64 1-D array; checked."""
    arrays = {task: np.asarray(scores, dtype=np.float64).reshape(-1) for task, scores in scores_by_task.items()}
    if not arrays or not any(len(a) for a in arrays.values()):
        raise ValueError(f"{name}: no scores")
    for task, array in arrays.items():
        if not np.isfinite(array).all():
            raise ValueError(f"{name}: task {task!r} has a nan or infinite score: {array.tolist()}")
    return {task: array for task, array in arrays.items() if len(array)}


def _bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Callable[[list[np.ndarray]], np.ndarray],
    confidence: float,
    resamples: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``statistic`` on ``samples`` and its percentile interval from the stratified bootstrap.

    Args:
        samples: The strata, each ``(*lead, n_i)``: runs along the last axis, the same leading
            shape for all (e.g. grid points); each stratum is resampled on its own, the same
            draw of runs for every leading index.
        statistic: ``[arrays (*lead, *batch, n_i)] -> values (*out, *lead, *batch)``, vectorized
            over the leading and batch dims, reducing the last (runs) axis.
        confidence: Level of the interval.
        resamples: Bootstrap resamples.
        seed: Seed of the generator.

    Returns:
        The statistic's values ``(*out, *lead)``, and the interval's ends, each the same shape.
    """
    value = statistic(list(samples))
    resampled = [i for i, s in enumerate(samples) if s.shape[-1] >= 2]
    if not resampled:  # nothing to resample: every stratum has one run
        return value, value, value

    def on_resample(*drawn: np.ndarray, axis: int) -> np.ndarray:
        # drawn: (*lead, resamples, n_i); a stratum of one run enters every resample as it is
        shape = drawn[0].shape[:-1]
        full: list[np.ndarray] = []
        it = iter(drawn)
        for i, sample in enumerate(samples):
            kept = np.broadcast_to(sample[..., None, :], (*shape, sample.shape[-1])) if i not in resampled else None
            full.append(next(it) if kept is None else kept)
        return statistic(full)

    result = stats.bootstrap(
        [samples[i] for i in resampled],
        on_resample,
        n_resamples=resamples,
        vectorized=True,
        axis=-1,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return value, np.asarray(interval.low).reshape(value.shape), np.asarray(interval.high).reshape(value.shape)


def aggregate(
    scores_by_task: Mapping[str, ArrayLike],
    statistic: str,
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """A statistic of all runs pooled, with its stratified bootstrap interval.

    Args:
        scores_by_task: Task -> scores of its runs, 1-D.
        statistic: ``mean``, ``median`` or ``iqm`` (:func:`iqm`).
        confidence: Level of the interval, in (0, 1).
        resamples: Bootstrap resamples.
        seed: Seed of the bootstrap's generator (the same data give the same interval).

    Returns:
        The statistic and its interval; ``low == high == value`` when no task has two runs.

    Raises:
        ValueError: for an unknown statistic, no scores, or a nan or infinite score.
    """
    if statistic not in _FUNCTIONS:
        raise ValueError(f"statistic={statistic!r}: valid: {', '.join(STATISTICS)}")
    function = _FUNCTIONS[statistic]
    samples = list(_arrays(scores_by_task, statistic).values())

    def pooled(arrays: list[np.ndarray]) -> np.ndarray:
        return np.asarray(function(np.concatenate(arrays, axis=-1), axis=-1))[None]

    value, low, high = _bootstrap(samples, pooled, confidence, resamples, seed)
    return Interval(float(value[0]), float(low[0]), float(high[0]))


def probability_of_improvement(
    x_by_task: Mapping[str, ArrayLike],
    y_by_task: Mapping[str, ArrayLike],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    """P(X > Y): the chance that a run of X scores above a run of Y, with its interval.

    Per task, the Mann-Whitney U statistic over ``n * m`` (each pair of runs counts 1 when
    X's is higher, 1/2 when equal); averaged over the tasks both have. The interval comes
    from the stratified bootstrap, X's and Y's runs of each task resampled separately.

    Args:
        x_by_task: Task -> scores of X's runs.
        y_by_task: Task -> scores of Y's runs.
        confidence, resamples, seed: As in :func:`aggregate`.

    Raises:
        ValueError: when X and Y share no task, or for nan scores.
    """
    x, y = _arrays(x_by_task, "X"), _arrays(y_by_task, "Y")
    tasks = [task for task in x if task in y]
    if not tasks:
        raise ValueError(f"probability of improvement: no task in common (X: {sorted(x)}, Y: {sorted(y)})")
    samples = [array for task in tasks for array in (x[task], y[task])]

    def improvement(arrays: list[np.ndarray]) -> np.ndarray:
        per_task = []
        for a, b in zip(arrays[::2], arrays[1::2]):
            a, b = a[..., :, None], b[..., None, :]
            per_task.append(np.mean((a > b) + 0.5 * (a == b), axis=(-2, -1)))
        return np.mean(per_task, axis=0)[None]

    value, low, high = _bootstrap(samples, improvement, confidence, resamples, seed)
    return Interval(float(value[0]), float(low[0]), float(high[0]))


def performance_profile(
    scores_by_task: Mapping[str, ArrayLike],
    taus: ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run-score distribution: the fraction of runs scoring above each threshold.

    Args:
        scores_by_task: Task -> scores of its runs.
        taus: Thresholds, 1-D.
        confidence, resamples, seed: As in :func:`aggregate`.

    Returns:
        The fraction of all runs (pooled) with score > tau, and the interval's ends; each
        float64 ``(len(taus),)``.
    """
    thresholds = np.asarray(taus, dtype=np.float64).reshape(-1)
    samples = list(_arrays(scores_by_task, "performance profile").values())

    def fraction_above(arrays: list[np.ndarray]) -> np.ndarray:
        pooled = np.concatenate(arrays, axis=-1)
        return np.moveaxis(np.mean(pooled[..., None, :] > thresholds[:, None], axis=-1), -1, 0)

    return _bootstrap(samples, fraction_above, confidence, resamples, seed)


def value_at(curve: RunCurve, x: Literal["frames", "seconds"], grid: np.ndarray) -> np.ndarray:
    """The curve as a step function of frames (or seconds), read at ``grid``: the last value
    logged at or before each point; nan outside the curve's first and last point."""
    xs = curve.frames if x == "frames" else curve.seconds
    index = np.searchsorted(xs, grid, side="right") - 1
    values = curve.values[np.clip(index, 0, len(xs) - 1)]
    return np.where((grid >= xs[0]) & (grid <= xs[-1]), values, np.nan)


def _checked_curves(curves: Sequence[RunCurve], x: str) -> list[RunCurve]:
    """The curves with values; raises ValueError for an unknown ``x`` or a nan or infinite value."""
    if x not in ("frames", "seconds"):
        raise ValueError(f"x={x!r}: valid: frames, seconds")
    curves = [c for c in curves if len(c.values)]
    for c in curves:
        if not np.isfinite(c.values).all():
            raise ValueError(f"curve_band: run {c.run_id} has a nan or infinite value: {c.values.tolist()}")
    return curves


def curve_band(
    curves: Sequence[RunCurve],
    grid: ArrayLike,
    x: Literal["frames", "seconds"] = "frames",
    statistic: str = "iqm",
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A statistic of the runs' curves at each grid point, with its stratified interval.

    At each point, the runs covering it (a run covers its first to its last logged point)
    give one value each (:func:`value_at`); the statistic of these values pooled, and its
    interval from the stratified bootstrap over the runs, as in :func:`aggregate`. Points
    covered by the same runs share one bootstrap call (and its draws of runs).

    Args:
        curves: The runs (one group).
        grid: Points along ``x``, 1-D.
        x: ``frames`` or ``seconds`` (wall time since each run's start).
        statistic: As in :func:`aggregate`.
        confidence, resamples, seed: As in :func:`aggregate`.

    Returns:
        Value, low and high at each grid point, float64 ``(len(grid),)``; nan where no run
        covers the point.

    Raises:
        ValueError: for an unknown statistic or ``x``, or a curve with a nan or infinite value.
    """
    function = _FUNCTIONS.get(statistic)
    if function is None:
        raise ValueError(f"statistic={statistic!r}: valid: {', '.join(STATISTICS)}")
    points = np.asarray(grid, dtype=np.float64).reshape(-1)
    curves = _checked_curves(curves, x)
    if not curves:
        return np.full(len(points), np.nan), np.full(len(points), np.nan), np.full(len(points), np.nan)
    table = np.stack([value_at(c, x, points) for c in curves])  # (runs, points)
    covered = ~np.isnan(table)
    tasks = np.array([c.task for c in curves])

    def pooled(arrays: list[np.ndarray]) -> np.ndarray:
        return np.asarray(function(np.concatenate(arrays, axis=-1), axis=-1))

    # Points with the same covering runs and the same values (a step function's flat parts)
    # are computed once; points with the same covering runs share one bootstrap call.
    keys = np.vstack([covered, np.where(covered, table, 0.0)]).T  # (points, 2 runs)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    masks, by_mask = np.unique(distinct[:, : len(curves)].astype(bool), axis=0, return_inverse=True)
    columns = distinct[:, len(curves) :].T  # (runs, distinct points)
    result = np.full((3, len(distinct)), np.nan)  # value, low, high of each distinct point
    for k, mask in enumerate(masks):
        if not mask.any():
            continue
        at = np.flatnonzero(by_mask.reshape(-1) == k)  # the distinct points these runs cover
        strata = [columns[np.ix_(mask & (tasks == task), at)].T for task in dict.fromkeys(tasks[mask])]
        result[:, at] = _bootstrap(strata, pooled, confidence, resamples, seed)  # each stratum (points, runs)
    value, low, high = result[:, inverse.reshape(-1)]
    return value, low, high
