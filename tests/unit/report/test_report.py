"""The report's table: intervals shown with as many decimals as their width needs."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.report.curves import RunCurve
from rlplat.report.report import compare, report_markdown, write_report


def _curves(group: str, finals: list[float]) -> list[RunCurve]:
    frames = np.array([1000, 2000])
    return [
        RunCurve(f"{group}{seed}", group, "", seed, frames, np.array([1.0, 2.0]), np.array([0.0, value]), 2.0)
        for seed, value in enumerate(finals)
    ]


def test_small_scores_show_the_decimals_that_tell_their_interval_apart():
    report = compare(_curves("algo=a", [0.121, 0.15, 0.153, 0.187]) + _curves("algo=b", [0.5, 0.5]), "m", resamples=200)
    table = report_markdown(report)
    row = next(line for line in table.splitlines() if line.startswith("| algo=a "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    iqm = cells[4]
    value, low, high = (float(x) for x in iqm.replace("[", "").replace("]", "").replace(",", " ").split())
    assert low < value < high, iqm  # one decimal showed 0.2 [0.1, 0.2]
    assert iqm.split()[0] == f"{value:.3f}"
    assert "0.50 [0.50, 0.50]" in table  # a collapsed interval: two significant digits of its value


def test_returns_keep_one_decimal():
    table = report_markdown(compare(_curves("algo=a", [-210.6, -163.2, -158.7]), "m", resamples=200))
    row = next(line for line in table.splitlines() if line.startswith("| algo=a "))
    assert all(
        len(number.split(".")[1]) == 1
        for number in row.split("|")[3].replace("[", "").replace("]", "").replace(",", "").split()
    )


def test_printed_tables_show_brackets_as_text_not_markup(capsys):
    """rich reads ``[csv]`` as a style tag and drops it."""
    from rlplat.report.report import print_report
    from rlplat.sweep.table import JobRow, print_job_table

    curves = _curves("tracking.also=[csv]", [1.0, 2.0]) + _curves("tracking.also=[tensorboard]", [3.0, 3.0])
    print_report(compare(curves, "m", resamples=200))
    rows = [
        JobRow(0, "algo=ppo tracking.also=[csv]", "FINISHED", 1.0, 2.0, "a" * 32),
        JobRow(1, "algo=ppo tracking.also=[tensorboard]", "FINISHED", 2.0, 2.0, "b" * 32),
    ]
    print_job_table(rows, "eval/return_mean", "sweep")
    out = capsys.readouterr().out
    assert "tracking.also=[csv]" in out and "tracking.also=[tensorboard]" in out


def test_a_report_is_moved_into_its_folder_only_once_every_file_is_written(tmp_path):
    report = compare(_curves("algo=a", [1.0, 2.0, 3.0]), "m", resamples=200)
    written = write_report(report, tmp_path / "new")
    assert sorted(p.name for p in written) == sorted(p.name for p in (tmp_path / "new").iterdir())  # no staging left
    assert {"report.md", "report.csv", "learning_curves_frames.png"} <= {p.name for p in written}

    existing = tmp_path / "existing"  # its report.md cannot be replaced: a folder holding a file has that name
    (existing / "report.md").mkdir(parents=True)
    (existing / "report.md" / "kept").write_text("kept")
    (existing / "notes.txt").write_text("the user's")
    with pytest.raises(OSError):
        write_report(report, existing)
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt", "report.md"]  # as it was
    assert (existing / "report.md" / "kept").read_text() == "kept"
