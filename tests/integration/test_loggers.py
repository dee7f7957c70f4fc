"""tracking.also: CSV and TensorBoard files beside MLflow, written through the real CLI and
read back: the same (metric, step, value) as MLflow holds."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import TINY, cli
from mlflow import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlplat.cli.locate import RUN_FILE


def _run_dir(tmp_path: Path) -> Path:
    [record] = (tmp_path / "outputs" / "runs").rglob(RUN_FILE)
    return record.parent


def _csv(path: Path) -> dict[str, dict[int, float]]:
    values: dict[str, dict[int, float]] = defaultdict(dict)
    with path.open(newline="") as file:
        for row in csv.DictReader(file):
            assert int(row["frames"]) not in values[row["metric"]], f"step written twice: {row}"
            values[row["metric"]][int(row["frames"])] = float(row["value"])
    return values


def _tensorboard(directory: Path) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def test_csv_and_tensorboard_hold_the_metrics_mlflow_holds(tmp_path, store):
    result = cli(
        "rlplat-train", "algo=ppo", "env=cartpole", "tracking.also=[csv,tensorboard]", "trainer.log_every_frames=0",
        f"tracking.uri={store}", *TINY, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = _run_dir(tmp_path)
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    mlflow = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in run.data.metrics
    }
    table, events = _csv(run_dir / "metrics.csv"), _tensorboard(run_dir / "tensorboard")
    assert {"eval/return_mean", "loss/objective", "time/fps", "time/startup_s"} <= set(mlflow)
    assert set(table) == set(mlflow) == set(events)
    for key, steps in mlflow.items():
        assert table[key] == pytest.approx(steps, rel=1e-12), key  # MLflow keeps doubles, so does the CSV
        assert events[key] == pytest.approx(steps, rel=1e-6, abs=1e-6), key  # TensorBoard keeps float32
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.csv", "tensorboard"} <= logged
    assert client.list_artifacts(run.info.run_id, "tensorboard")[0].path.startswith("tensorboard/events.out.tfevents")


def test_loggers_write_without_mlflow_and_a_resumed_run_appends(tmp_path):
    args = ["algo=ppo", "env=cartpole", "tracking.enabled=false", "tracking.also=[csv]", "hydra.run.dir=run", *TINY]
    first = cli("rlplat-train", *args, "checkpoint.every_frames=128", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = _csv(tmp_path / "run" / "metrics.csv")
    assert sorted(before["time/fps"]) == [128, 256]
    checkpoints = tmp_path / "run" / "checkpoints"
    for name in ("final.pt", "step_000000000256.pt"):  # as if the run had died after 128 frames
        (checkpoints / name).unlink()
    resumed = cli("rlplat-train", "resume=run", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout.lower() or (checkpoints / "final.pt").is_file()
    after = _csv(tmp_path / "run" / "metrics.csv")  # no step written twice (checked in _csv)
    assert after == before  # the steps after 128 were written once, by the first run


@pytest.mark.parametrize(
    "value,needle",
    [
        ("[wandb]", "tracking.also=['wandb']: 'wandb' is no logger; valid: csv, tensorboard"),
        ("csv", "tracking.also='csv': must be a list, like the default []"),
    ],
)
def test_an_unknown_logger_exits_2_before_anything_runs(value, needle, tmp_path, store):
    result = cli("rlplat-train", f"tracking.also={value}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"rlplat-train: error: {needle}"]
    assert not (tmp_path / "outputs").exists()
