"""Aggregate statistics over runs with stratified bootstrap confidence intervals.

Scores come as ``task -> 1-D array of runs`` (a task is a stratum: an env, or one setting
of the keys not compared). A statistic is computed on all runs pooled; its interval is the
percentile interval of the statistic over bootstrap resamples in which each task's runs are
drawn with replacement separately (the stratified bootstrap), computed by
``scipy.stats.bootstrap``. A task with a single run cannot be resampled and enters every
resample as it is.

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
RESAMPLES = 2000  # bootstrap resamples per interval: the ends move by well under 1% of the spread between seeds


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    value: float  # the statistic on the data as given
    low: float  # lower end of the interval
    high: float  # upper end


def iqm(scores: ArrayLike, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle half of ``scores`` along ``axis`` (25% cut
    from each end, ``scipy.stats.trim_mean``; with n runs, ``int(0.25 n)`` from each end).

    Returns:
        float64 array without ``axis`` (a 0-d array for 1-D input).
    """
    return np.asarray(stats.trim_mean(np.asarray(scores, dtype=np.float64), 0.25, axis=axis))


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
        samples: The strata, each a 1-D array; each is resampled on its own.
        statistic: ``[arrays with batch dims (..., n_i)] -> values (k, ...)``, vectorized.
        confidence: Level of the interval.
        resamples: Bootstrap resamples.
        seed: Seed of the generator.

    Returns:
        The statistic's values (k,), and the interval's ends (k,) each.
    """
    value = statistic(list(samples))
    resampled = [i for i, s in enumerate(samples) if len(s) >= 2]
    if not resampled:  # nothing to resample: every stratum has one run
        return value, value, value

    def on_resample(*drawn: np.ndarray, axis: int) -> np.ndarray:
        batch = drawn[0].shape[:-1]
        full: list[np.ndarray] = []
        it = iter(drawn)
        for i, sample in enumerate(samples):
            full.append(next(it) if i in resampled else np.broadcast_to(sample, (*batch, len(sample))))
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

    Args:
        curves: The runs (one group).
        grid: Points along ``x``, 1-D.
        x: ``frames`` or ``seconds`` (wall time since each run's start).
        statistic: As in :func:`aggregate`.
        confidence, resamples, seed: As in :func:`aggregate`.

    Returns:
        Value, low and high at each grid point, float64 ``(len(grid),)``; nan where no run
        covers the point (a run covers its first to its last logged point).
    """
    points = np.asarray(grid, dtype=np.float64).reshape(-1)
    table = np.stack([value_at(c, x, points) for c in curves]) if curves else np.empty((0, len(points)))
    tasks = [c.task for c in curves]
    value, low, high = (np.full(len(points), np.nan) for _ in range(3))
    for j in range(len(points)):
        covered = ~np.isnan(table[:, j])
        if not covered.any():
            continue
        by_task: dict[str, list[float]] = {}
        for task, v in zip(np.array(tasks)[covered], table[covered, j]):
            by_task.setdefault(str(task), []).append(float(v))
        interval = aggregate(by_task, statistic, confidence=confidence, resamples=resamples, seed=seed)
        value[j], low[j], high[j] = interval.value, interval.low, interval.high
    return value, low, high
