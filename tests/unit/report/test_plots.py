"""The report's plots are written as real PNG and SVG files, and leave no figure open."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlplat.report.curves import RunCurve
from rlplat.report.plots import plot_final_scores, plot_learning_curves, plot_performance_profiles
from rlplat.report.stats import aggregate


def _curves():
    rng = np.random.default_rng(0)
    curves = []
    for group, scale in (("algo=ppo", 1.0), ("algo=a2c", 0.5)):
        for seed in range(3):
            frames = np.arange(1, 6) * 1000
            values = scale * frames / 10 + rng.normal(0, 20, 5)
            curves.append(RunCurve(f"{group}{seed}", group, "", seed, frames, frames / 500.0, values, 12.0))
    return curves


def _check(files, tmp_path, stem):
    assert [f.name for f in files] == [f"{stem}.png", f"{stem}.svg"]
    assert files[0].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert b"<svg" in files[1].read_bytes()[:2000]


def test_each_plot_writes_png_and_svg_and_closes_its_figure(tmp_path):
    curves = _curves()
    _check(plot_learning_curves(curves, "frames", "eval/return_mean", tmp_path / "frames"), tmp_path, "frames")
    _check(plot_learning_curves(curves, "seconds", "eval/return_mean", tmp_path / "secs"), tmp_path, "secs")
    scores = {g: {"": np.array([c.final for c in curves if c.group == g])} for g in ("algo=ppo", "algo=a2c")}
    intervals = {g: {s: aggregate(t, s) for s in ("mean", "median", "iqm")} for g, t in scores.items()}
    _check(plot_final_scores(intervals, "eval/return_mean", tmp_path / "final"), tmp_path, "final")
    _check(plot_performance_profiles(scores, "eval/return_mean", tmp_path / "profile"), tmp_path, "profile")
    assert plt.get_fignums() == []
