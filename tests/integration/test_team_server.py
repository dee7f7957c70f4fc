"""A sweep against ``mlflow server`` on PostgreSQL whose server is killed and restarted
mid-sweep loses no job (slow: about two minutes per launcher).

The server (its whole process group) is killed once the sweep's first jobs have their runs,
and started again once a job has started while it was away (the job's warning line says so),
so that some jobs start, train and end while it is away. Every job's run must end FINISHED, nested under the parent run,
with as many metric points as it logged (its ``metrics.csv``, written beside MLflow, holds
every value MLflow got); the parent FINISHED with the count of jobs that waited; exit 0.
"""

from __future__ import annotations

import csv
import os
import subprocess
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from servers import BIN, MlflowServer, free_port, postgres_or_skip
from waiting import printed, wait_until

from rlplat.tags import PARENT_TAG, WAITED_TAG

JOBS = 16
STARTED_AWAY = "training goes on, and the run is created when it answers"  # a job that started while it was away
JOB = [
    "algo=ppo", "env=cartpole", "trainer.total_frames=4096", "trainer.eval_every_frames=2048",
    "trainer.eval_episodes=2", "collector.num_envs=2", "collector.steps_per_env=64", "checkpoint.every_frames=1024",
    "tracking.also=[csv]", "tracking.artifact_location=null",
]  # fmt: skip


@pytest.fixture
def server_on_postgres(tmp_path: Path):
    database = postgres_or_skip()
    root = tmp_path / "server"
    root.mkdir()
    server = MlflowServer(root, free_port(), store=database.uri)
    try:
        if not server.start(timeout=180):
            pytest.skip(f"mlflow server did not start on PostgreSQL: {server.log()[-500:]}")
        yield server
    finally:
        server.kill()
        database.stop()


def children_of(client: MlflowClient, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id], f"tags.`{PARENT_TAG}` != ''")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["parallel", "basic"])
def test_a_sweep_loses_no_job_when_its_tracking_server_restarts(launcher, tmp_path, server_on_postgres):
    server = server_on_postgres
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    args = ["-m", f"hydra/launcher={launcher}", f"seed=range(0,{JOBS})", f"tracking.uri={server.uri}", *JOB]
    out = tmp_path / "sweep.txt"
    start = time.monotonic()
    with open(out, "w") as log:
        sweep = subprocess.Popen([str(BIN / "rlplat-train"), *args], cwd=tmp_path, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        client = MlflowClient(tracking_uri=server.uri)
        while len(children_of(client, "rlplat")) < 2:
            assert sweep.poll() is None and time.monotonic() - start < 300, out.read_text()[-3000:]
            time.sleep(0.5)
        killed_at = time.monotonic() - start
        server.kill()
        wait_until(lambda: printed(out, STARTED_AWAY), sweep, "a job started while the server was away", timeout=600)
        assert server.start(timeout=180), server.log()
        back_at = time.monotonic() - start
        code = sweep.wait(timeout=900)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    text = out.read_text()
    assert code == 0, text[-4000:]
    assert "Traceback" not in text and "no MLflow tracking server answers there" not in text, text[-4000:]

    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    [parent] = [r for r in runs if PARENT_TAG not in r.data.tags]
    children = [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
    assert len(runs) == JOBS + 1 and len(children) == JOBS
    assert {r.info.status for r in runs} == {"FINISHED"}
    sweep_dir = Path(parent.data.tags["rlplat.sweep"])
    points = {}
    for child in children:
        job_dir = sweep_dir / child.data.tags["rlplat.job"]
        with open(job_dir / "metrics.csv") as rows:
            logged = sum(1 for _ in csv.DictReader(rows))
        recorded = sum(len(client.get_metric_history(child.info.run_id, key)) for key in child.data.metrics)
        assert recorded == logged, (child.data.tags["rlplat.job"], recorded, logged)
        points[int(child.data.tags["rlplat.job"])] = recorded
        assert not (job_dir / "mlflow-pending.json").exists()
    waited = sum(c.data.tags.get(WAITED_TAG) == "true" for c in children)
    started_away = text.count(STARTED_AWAY)
    assert parent.data.metrics["sweep/jobs_waited_for_server"] == waited and waited >= started_away >= 1
    assert parent.data.metrics["sweep/jobs"] == JOBS and parent.data.metrics["sweep/jobs_failed"] == 0
    print(
        f"{launcher}: server killed at {killed_at:.0f} s, back at {back_at:.0f} s, sweep ended at "
        f"{time.monotonic() - start:.0f} s; {JOBS} of {JOBS} runs FINISHED under the parent; {started_away} jobs "
        f"started while it was away, {waited} waited; metric points per run {sorted(set(points.values()))}"
    )
