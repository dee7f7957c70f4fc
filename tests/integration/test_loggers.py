"""tracking.also: CSV and TensorBoard files beside MLflow, written through the real CLI and
read back: the same (metric, step, value) as MLflow holds, also after a resume; bad values
and a missing package exit 2 before anything runs."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import BIN, TINY, cli
from mlflow import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlplat.tracking.records import RUN_FILE


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


def test_loggers_write_without_mlflow(tmp_path):
    args = ["algo=ppo", "env=cartpole", "tracking.enabled=false", "tracking.also=[csv,tensorboard]", *TINY]
    result = cli("rlplat-train", *args, "hydra.run.dir=run", "trainer.log_every_frames=0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table, events = _csv(tmp_path / "run" / "metrics.csv"), _tensorboard(tmp_path / "run" / "tensorboard")
    assert sorted(table["time/fps"]) == sorted(events["time/fps"]) == [128, 256]
    assert set(table) == set(events) and "eval/return_mean" in table
    assert not (tmp_path / "outputs").exists()  # no MLflow store


RESUMED = [
    "algo=ppo", "env=cartpole", "tracking.also=[csv,tensorboard]", "hydra.run.dir=run",
    "trainer.total_frames=2048", "collector.num_envs=2", "collector.steps_per_env=128", "buffer.epochs=1",
    "buffer.minibatch_size=128", "trainer.eval_every_frames=1024", "trainer.eval_episodes=2",
    "trainer.log_every_frames=0", "checkpoint.every_frames=256",
]  # fmt: skip
"""A run of 8 rollouts of 256 frames, logged and checkpointed after each."""


def test_a_resumed_run_appends_to_the_files_without_writing_a_step_twice(tmp_path, store):
    full = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    process = subprocess.Popen(
        [str(BIN / "rlplat-train"), *RESUMED, f"tracking.uri={store}"],
        cwd=tmp_path, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    checkpoints = tmp_path / "run" / "checkpoints"
    deadline = time.monotonic() + 120
    while len(list(checkpoints.glob("step_*.pt"))) < 2:  # the stop then leaves one before its own
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)  # stops after this rollout, its log step and a checkpoint
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    *_, previous, newest = sorted(checkpoints.glob("step_*.pt"))
    stopped = int(newest.stem.removeprefix("step_"))
    assert stopped < 2048, "the run ended before the signal: nothing left to append"
    newest.unlink()  # resume from the rollout before: its log step is in MLflow and the files already
    resumed = cli("rlplat-train", "resume=run", f"tracking.uri={store}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"from run/checkpoints/{previous.name}" in resumed.stderr

    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FINISHED"
    mlflow = {}
    for key in run.data.metrics:
        history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        assert [step for step, _ in history] == sorted({step for step, _ in history}), key  # each step once
        mlflow[key] = dict(history)
    table, events = _csv(tmp_path / "run" / "metrics.csv"), _tensorboard(tmp_path / "run" / "tensorboard")
    assert sorted(table["time/fps"]) == list(range(256, 2049, 256))  # every rollout once, before and after
    # the resume's downtime is MLflow's alone: logged at a step the files hold already
    assert mlflow.pop("time/downtime_s")
    assert set(table) == set(mlflow) == set(events)
    for key, steps in mlflow.items():
        assert table[key] == pytest.approx(steps, rel=1e-12), key
        assert events[key] == pytest.approx(steps, rel=1e-6, abs=1e-6), key
    uploaded = Path(client.download_artifacts(run.info.run_id, "metrics.csv", str(tmp_path / "uploaded")))
    assert uploaded.read_bytes() == (tmp_path / "run" / "metrics.csv").read_bytes()  # the file as it ends
    assert len(client.list_artifacts(run.info.run_id, "tensorboard")) == 2  # an event file per process


def test_a_missing_tensorboard_package_exits_2_before_anything_runs(tmp_path, store):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['tensorboard'] = None  # as if not installed\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = cli("rlplat-train", "tracking.also=[csv,tensorboard]", f"tracking.uri={store}", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "rlplat-train: error: tracking.also=['csv', 'tensorboard']: the tensorboard package is not installed: "
        "pip install 'rlplat[tensorboard]'"
    ]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


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
