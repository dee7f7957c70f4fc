"""The report's statistics against values computed independently, by hand or with plain numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

from rlplat.report.curves import RunCurve
from rlplat.report.stats import aggregate, curve_band, iqm, performance_profile, probability_of_improvement

RETURNS = np.array([12.0, -3.5, 40.0, 7.25, 19.0, 22.5, 8.0, 31.0])
"""Final returns of eight runs: sorted -3.5, 7.25, 8, 12, 19, 22.5, 31, 40."""


def numpy_bootstrap(strata: list[np.ndarray], statistic, resamples: int, seed: int) -> tuple[float, float]:
    """A plain stratified percentile bootstrap: each stratum resampled with replacement on its own."""
    rng = np.random.default_rng(seed)
    drawn = [s[rng.integers(0, len(s), size=(resamples, len(s)))] for s in strata]
    values = statistic(np.concatenate(drawn, axis=1))
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def by_hand_iqm(rows: np.ndarray) -> np.ndarray:
    """The mean of the middle half of each row: sort, drop a quarter from each end."""
    n = rows.shape[-1]
    cut = n // 4
    return np.sort(rows, axis=-1)[..., cut : n - cut].mean(axis=-1)


def test_iqm_is_the_mean_of_the_middle_half():
    assert float(iqm(RETURNS)) == pytest.approx((8 + 12 + 19 + 22.5) / 4)  # 15.375
    assert float(iqm([1.0, 2.0, 3.0, 4.0, 100.0])) == pytest.approx(3.0)  # 5 runs: one cut from each end


def test_iqm_equals_scipy_trim_mean_along_any_axis():
    rows = np.random.default_rng(0).normal(size=(3, 7, 11))
    for axis in (0, 1, -1):
        assert np.allclose(iqm(rows, axis=axis), scipy.stats.trim_mean(rows, 0.25, axis=axis))
    assert np.isnan(iqm(np.empty((2, 0)))).all()


def test_iqm_interval_matches_a_plain_numpy_bootstrap():
    # Two independent Monte Carlo estimates of the same percentiles. Measured over 20 seeds,
    # an end's standard deviation is 1.5% of the interval's width at 20,000 resamples (the
    # IQM of 8 runs takes few distinct values), so about 1.0% at 50,000 and 0.5% at 200,000:
    # the two differ by 1.1% of the width (one sd); 4% is 3.7 sd.
    interval = aggregate({"task": RETURNS}, "iqm", resamples=50_000, seed=1)
    low, high = numpy_bootstrap([RETURNS], by_hand_iqm, resamples=200_000, seed=2)
    assert interval.value == pytest.approx(15.375)
    width = high - low
    assert interval.low == pytest.approx(low, abs=0.04 * width)
    assert interval.high == pytest.approx(high, abs=0.04 * width)
    assert interval.low < interval.value < interval.high


def test_stratified_interval_resamples_each_task_on_its_own():
    cartpole, pendulum = np.array([0.9, 1.0, 0.95, 0.2]), np.array([0.5, 0.7, 0.6])
    # An end's sd over seeds: 1.0% of the width at 20,000 resamples, so the 4% tolerance is 3.6 sd.
    interval = aggregate({"cartpole": cartpole, "pendulum": pendulum}, "mean", resamples=20_000, seed=0)
    low, high = numpy_bootstrap([cartpole, pendulum], lambda rows: rows.mean(axis=1), resamples=100_000, seed=3)
    # On tasks of very different scores, pooling without strata widens the interval: a resample
    # may then draw more runs of one task than it has.
    far = {"cartpole": [480.0, 500.0, 450.0, 490.0], "pendulum": [-200.0, -180.0, -220.0]}
    stratified = aggregate(far, "mean", seed=0)
    unstratified = aggregate({"": np.concatenate(list(far.values()))}, "mean", seed=0)
    assert unstratified.high - unstratified.low > 3 * (stratified.high - stratified.low)
    assert interval.value == pytest.approx(np.concatenate([cartpole, pendulum]).mean())
    assert interval.low == pytest.approx(low, abs=0.04 * (high - low))
    assert interval.high == pytest.approx(high, abs=0.04 * (high - low))


def test_intervals_are_reproducible_and_collapse_for_one_run():
    assert aggregate({"": RETURNS}, "median", seed=5) == aggregate({"": RETURNS}, "median", seed=5)
    single = aggregate({"": [7.0]}, "iqm")
    assert single.value == single.low == single.high == 7.0


@pytest.mark.parametrize(
    "scores,message",
    [({"": []}, "no scores"), ({"a": [1.0, float("nan")]}, "nan or infinite"), ({}, "no scores")],
)
def test_bad_scores_are_refused(scores, message):
    with pytest.raises(ValueError, match=message):
        aggregate(scores, "mean")
    with pytest.raises(ValueError, match="statistic='max'"):
        aggregate({"": [1.0]}, "max")


def test_probability_of_improvement_counts_pairs_with_ties_as_half():
    x = {"cartpole": [500.0, 480.0, 200.0], "acrobot": [-80.0, -90.0]}
    y = {"cartpole": [500.0, 150.0], "acrobot": [-100.0, -85.0], "only_y": [1.0]}
    expected = []
    for task in ("cartpole", "acrobot"):
        pairs = list(itertools.product(x[task], y[task]))
        expected.append(sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs))
    interval = probability_of_improvement(x, y, resamples=5000)
    assert interval.value == pytest.approx(np.mean(expected))  # (4.5/6 + 2/4) / 2
    assert 0.0 <= interval.low <= interval.value <= interval.high <= 1.0
    with pytest.raises(ValueError, match="no task in common"):
        probability_of_improvement({"a": [1.0]}, {"b": [1.0]})


def test_performance_profile_is_the_fraction_of_runs_above_tau():
    taus = np.array([-10.0, 8.0, 20.0, 50.0])
    value, low, high = performance_profile({"": RETURNS}, taus)
    assert value.tolist() == [(t < RETURNS).mean() for t in taus]  # 1, 5/8, 3/8, 0
    assert (low <= value).all() and (value <= high).all() and low[0] == high[0] == 1.0


def test_curve_band_reads_each_run_as_a_step_function():
    def curve(values, seed):
        frames = np.array([100, 200, 300])
        return RunCurve("r", "g", "", seed, frames, frames / 100.0, np.array(values, dtype=float), 3.0)

    curves = [curve([0, 10, 20], 0), curve([0, 20, 40], 1), curve([0, 30, 60], 2), curve([0, 40, 80], 3)]
    value, low, high = curve_band(curves, [50, 100, 250, 300], "frames")
    assert np.isnan(value[0])  # before any run's first point
    assert value[1] == 0.0 and low[1] == high[1] == 0.0
    assert value[2] == pytest.approx(iqm([10, 20, 30, 40]))  # at 250: the values logged at 200
    assert value[3] == pytest.approx(iqm([20, 40, 60, 80])) and low[3] <= value[3] <= high[3]
    assert curve_band(curves, [2.5], "seconds")[0][0] == pytest.approx(iqm([10, 20, 30, 40]))


def test_probability_of_improvement_interval_matches_a_plain_numpy_bootstrap():
    x, y = np.array([3.0, 5.0, 4.0, 9.0, 1.0]), np.array([2.0, 4.0, 4.0, 0.0])
    n = len(x)

    def improvement(rows):  # rows: resamples of x then y, side by side
        a, b = rows[:, :n, None], rows[:, None, n:]
        return ((a > b) + 0.5 * (a == b)).mean(axis=(1, 2))

    interval = probability_of_improvement({"": x}, {"": y}, resamples=20_000, seed=0)
    low, high = numpy_bootstrap([x, y], improvement, resamples=100_000, seed=4)
    assert interval.value == pytest.approx(improvement(np.concatenate([x, y])[None])[0])
    assert interval.low == pytest.approx(low, abs=0.04 * (high - low))
    assert interval.high == pytest.approx(high, abs=0.04 * (high - low))


def test_curve_band_equals_aggregate_at_each_point():
    # The band computes points covered by the same runs in one bootstrap call, and identical
    # points once; each point must still get what aggregate gives on that point's runs (the same
    # seed draws the same runs). Runs of two tasks, logged at different times and ending apart.
    rng = np.random.default_rng(0)
    curves = []
    for i in range(6):
        seconds = np.cumsum(rng.uniform(0.5, 1.5, 8 + i))
        frames = np.arange(1, len(seconds) + 1) * 100
        curves.append(RunCurve(f"r{i}", "g", f"task{i % 2}", i, frames, seconds, rng.normal(size=len(seconds)), 1.0))
    grid = np.linspace(0.0, 16.0, 50)
    value, low, high = curve_band(curves, grid, "seconds", "mean", resamples=300, seed=7)
    for j, point in enumerate(grid):
        by_task: dict[str, list[float]] = {}
        for c in curves:
            if c.seconds[0] <= point <= c.seconds[-1]:
                by_task.setdefault(c.task, []).append(float(c.values[np.searchsorted(c.seconds, point, "right") - 1]))
        if not by_task:
            assert np.isnan([value[j], low[j], high[j]]).all()
            continue
        expected = aggregate(by_task, "mean", resamples=300, seed=7)
        assert (value[j], low[j], high[j]) == pytest.approx((expected.value, expected.low, expected.high), abs=1e-12)


def test_curve_band_refuses_nan_values_and_skips_empty_runs():
    frames = np.array([100, 200])
    good = RunCurve("a", "g", "", 0, frames, frames / 100.0, np.array([1.0, 2.0]), 2.0)
    empty = RunCurve("b", "g", "", 1, frames[:0], frames[:0] / 1.0, np.array([]), 0.0)
    assert curve_band([good, empty], [150], "frames")[0].tolist() == [1.0]
    bad = RunCurve("c", "g", "", 2, frames, frames / 100.0, np.array([1.0, np.nan]), 2.0)
    with pytest.raises(ValueError, match="run c has a nan"):
        curve_band([good, bad], [150], "frames")
    with pytest.raises(ValueError, match="x='steps'"):
        curve_band([good], [150], "steps")  # type: ignore[arg-type]
