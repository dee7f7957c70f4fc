"""Comparing runs for real: a sweep's report on its parent run, and rlplat-compare on two
experiments, through the real entry points and a real MLflow store."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import TINY, cli
from mlflow import MlflowClient

from rlplat.tags import DESCRIPTION_TAG, PARENT_TAG

PLOTS = ("learning_curves_frames", "learning_curves_seconds", "final_scores", "performance_profiles")


def _parent(client: MlflowClient, experiment: str = "rlplat"):
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    [parent] = [r for r in runs if PARENT_TAG not in r.data.tags]
    return parent, [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]


def test_a_sweep_ends_with_a_report_on_its_parent_run(tmp_path, store):
    result = cli("rlplat-train", "-m", "+sweep=algos_cartpole", f"tracking.uri={store}", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    parent, children = _parent(client)
    assert len(children) == 9

    # the table, printed and as the parent run's description (the MLflow UI shows it as Markdown)
    assert "rlplat report: eval/return_mean" in result.stdout and "probability of improvement" in result.stdout
    description = parent.data.tags[DESCRIPTION_TAG]
    assert description.startswith("## rlplat report: eval/return_mean")
    for algo in ("ppo", "a2c", "reinforce"):
        assert f"| algo={algo} | 3 |" in description
    assert parent.info.run_name.startswith("sweep +sweep=algos_cartpole")

    # the files: in the sweep directory and as the parent's artifacts
    [sweep_dir] = (tmp_path / "outputs" / "multirun").glob("*/*")
    folder = sweep_dir / "report"
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    for name in ("report.md", "report.csv", *(f"{p}.{ext}" for p in PLOTS for ext in ("png", "svg"))):
        assert (folder / name).stat().st_size > 0, name
        assert f"report/{name}" in logged
    assert (folder / "final_scores.png").read_bytes().startswith(b"\x89PNG")

    # the parent run names its sweep directory absolutely: compared again from elsewhere, the
    # report goes back there
    assert parent.data.tags["rlplat.sweep"] == str(sweep_dir)
    (folder / "report.md").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = cli("rlplat-compare", parent.info.run_id, f"tracking.uri={store}", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert (folder / "report.md").is_file() and not (elsewhere / "outputs").exists()

    # the CSV holds what the runs logged: the mean of a group is the mean of its runs' final evals
    rows = {row["group"]: row for row in csv.DictReader((folder / "report.csv").open())}
    ppo = [c.data.metrics["eval/return_mean"] for c in children if c.data.tags["algo"] == "ppo"]
    assert float(rows["algo=ppo"]["mean"]) == pytest.approx(sum(ppo) / 3)
    assert float(rows["algo=ppo"]["iqm_low"]) <= float(rows["algo=ppo"]["iqm"]) <= float(rows["algo=ppo"]["iqm_high"])


def test_rlplat_compare_two_experiments_prints_the_probability_of_improvement(tmp_path, store):
    for algo in ("ppo", "a2c"):
        result = cli(
            "rlplat-train", "-m", f"algo={algo}", "env=cartpole", "seed=0,1,2",
            f"tracking.uri={store}", f"tracking.experiment={algo}-cartpole", *TINY, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr

    out = tmp_path / "compared"
    result = cli(
        "rlplat-compare", "ppo-cartpole", "a2c-cartpole", "threshold=30", f"tracking.uri={store}", f"out={out}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "probability of improvement" in result.stdout and "P(A > B) [95% CI]" in result.stdout
    markdown = (out / "report.md").read_text()
    [pair] = [line for line in markdown.splitlines() if line.startswith("| algo=") and line.count("|") == 4]
    probability = pair.split("|")[3].strip()  # e.g. "0.67 [0.22, 1.00]"
    value, low, high = (float(x) for x in probability.replace("[", "").replace("]", "").replace(",", "").split())
    assert 0 <= low <= value <= high <= 1
    assert "reached ≥ 30" in markdown
    assert all((out / f"{p}.svg").is_file() for p in PLOTS)
    # group_by a tag: one group across both experiments
    result = cli("rlplat-compare", "ppo-cartpole", "a2c-cartpole", "group_by=env", f"tracking.uri={store}",
                 f"out={tmp_path / 'by_env'}", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "| env=cartpole | 6 |" in (tmp_path / "by_env" / "report.md").read_text()


@pytest.mark.parametrize(
    "args,needle",
    [
        ([], "give what to compare"),
        (["rlplat", "metrc=x"], "unknown key 'metrc'"),
        (["rlplat", "confidence=2"], "confidence='2': must be between 0 and 1"),
        (["rlplat", "threshold=high"], "threshold='high': must be a number"),
        (["rlplat", "threshold=nan"], "threshold='nan': must be a finite number"),
        (["nosuch"], "'nosuch' is no run id, experiment or search filter"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(args, needle, tmp_path, store):
    MlflowClient(tracking_uri=store).create_experiment("rlplat")  # an existing store
    result = cli("rlplat-compare", *args, f"tracking.uri={store}", f"out={tmp_path / 'out'}", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlplat-compare: error:") and needle in lines[0], result.stderr
    assert not Path(tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["notes.txt", "notes.txt/report"])
def test_an_out_that_is_a_file_is_one_line_before_any_report(out, tmp_path, store):
    result = cli("rlplat-train", *TINY, "algo=ppo", "env=cartpole", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (tmp_path / "notes.txt").write_text("a file\n")
    result = cli("rlplat-compare", "rlplat", f"tracking.uri={store}", f"out={out}", cwd=tmp_path)
    assert result.returncode == 2 and "rlplat report" not in result.stdout, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"rlplat-compare: error: out={out!r}") and "file" in line, line
    assert (tmp_path / "notes.txt").read_text() == "a file\n" and not (tmp_path / "outputs" / "compare").exists()
