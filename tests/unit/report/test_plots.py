"""The report's plots are written as real PNG and SVG files, and leave no figure open."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ElementTree

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from rlplat.report.curves import RunCurve
from rlplat.report.plots import plot_final_scores, plot_learning_curves, plot_performance_profiles
from rlplat.report.stats import STATISTICS, aggregate

METRIC = "eval/return_mean"


def _curves():
    """Three runs each of two groups, logged every 1000 frames, at different wall times."""
    rng = np.random.default_rng(0)
    curves = []
    for group, scale in (("algo=ppo", 1.0), ("algo=a2c", 0.5)):
        for seed in range(3):
            frames = np.arange(1, 6) * 1000
            values = scale * frames / 10 + rng.normal(0, 20, 5)
            seconds = np.cumsum(rng.uniform(1.0, 3.0, 5))
            curves.append(RunCurve(f"{group}{seed}", group, "", seed, frames, seconds, values, float(seconds[-1])))
    return curves


def _check(files, stem, texts=()):
    """Both files written; the PNG decodes to an image, the SVG parses and holds ``texts``."""
    assert [f.name for f in files] == [f"{stem}.png", f"{stem}.svg"]
    height, width, _ = matplotlib.image.imread(files[0]).shape
    assert height > 300 and width > 500
    root = ElementTree.parse(files[1]).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    svg = files[1].read_text()
    for text in texts:  # matplotlib writes text as glyph paths, with the string, escaped, as a comment
        assert html.escape(text, quote=False) in svg, text


def test_each_plot_writes_png_and_svg_and_leaves_no_figure_open(tmp_path):
    curves = _curves()
    scores = {g: {"": np.array([c.final for c in curves if c.group == g])} for g in ("algo=ppo", "algo=a2c")}
    intervals = {g: {s: aggregate(t, s) for s in STATISTICS} for g, t in scores.items()}
    figures_before = plt.get_fignums()

    files = plot_learning_curves(curves, "frames", METRIC, tmp_path / "learning_curves_frames")
    _check(files, "learning_curves_frames", ["frames", METRIC, "algo=ppo (3 runs)", "algo=a2c (3 runs)"])
    files = plot_learning_curves(curves, "seconds", METRIC, tmp_path / "learning_curves_seconds")
    _check(files, "learning_curves_seconds", ["wall time (s)", METRIC])
    _check(plot_final_scores(intervals, METRIC, tmp_path / "final_scores"), "final_scores", ["IQM", "median"])
    files = plot_performance_profiles(scores, METRIC, tmp_path / "performance_profiles")
    _check(files, "performance_profiles", ["fraction of runs with score > tau", "algo=ppo"])
    assert plt.get_fignums() == figures_before


def test_bad_input_is_refused_before_any_figure(tmp_path):
    curves = _curves()
    with pytest.raises(ValueError, match="x='steps'"):
        plot_learning_curves(curves, "steps", METRIC, tmp_path / "a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group 'algo=ppo' has a nan"):
        plot_performance_profiles({"algo=ppo": {"": [1.0, float("nan")]}}, METRIC, tmp_path / "b")
    with pytest.raises(ValueError, match="group 'algo=ppo' has no score"):
        plot_performance_profiles({"algo=ppo": {"": []}}, METRIC, tmp_path / "c")
    with pytest.raises(ValueError, match="lacks median, iqm"):
        plot_final_scores({"algo=ppo": {"mean": aggregate({"": [1.0]}, "mean")}}, METRIC, tmp_path / "d")
    assert list(tmp_path.iterdir()) == []
    assert plt.get_fignums() == []
