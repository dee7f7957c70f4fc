"""The team guide (docs/guides/team-tracking-server.md) as a user follows it: its commands run
here against a real PostgreSQL and a real ``mlflow server``, with small frame budgets.

Each runnable block of the guide follows a ``<!-- test: NAME -->`` line; the test gives the
variables the guide asks for, adds a small budget to each ``rlplat-train`` command and one
worker to the server's (a 2-core machine), and, between
the blocks, kills the server (its whole process group) while a run trains, so that the run
ends while the server is away and the guide's ``rlplat-sync`` records it.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import TINY
from mlflow import MlflowClient
from servers import BIN, free_port, postgres_or_skip

from rlplat.tracking.pending import PENDING_FILE
from rlplat.tracking.records import RUN_FILE, read_run_file

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "team-tracking-server.md"
BLOCK = re.compile(r"<!-- test: (\w+) -->\n```bash\n(.*?)```", re.DOTALL)


def guide_blocks() -> dict[str, str]:
    """The guide's runnable blocks, by name."""
    return dict(BLOCK.findall(GUIDE.read_text()))


def test_the_guide_names_each_runnable_block_once():
    names = [name for name, _ in BLOCK.findall(GUIDE.read_text())]
    assert names == ["database", "server", "health", "sweep", "run", "sync"]
    assert GUIDE.read_text().count("```bash") == len(names)  # every bash block runs; the rest are ```text


def bash(script: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-ec", script], env=env, capture_output=True, text=True, timeout=timeout)


def start_server(script: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The guide's server command, in a process group of its own, with one worker (the
    default is one per core, each importing MLflow); waits until it answers."""
    script = script.rstrip() + " --workers 1"
    with open(log, "ab") as out:
        server = subprocess.Popen(["bash", "-ec", script], env=env, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{env['MLFLOW_PORT']}/health", timeout=1):
                return server
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"mlflow server did not start: {log.read_text()[-2000:]}")


def kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.mark.slow  # two mlflow server starts on PostgreSQL and three rlplat-train commands: about 90 s
def test_the_team_guides_commands_run_against_postgresql_and_mlflow_server(tmp_path):
    blocks = guide_blocks()
    database = postgres_or_skip(database=None)  # the guide creates it
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '')}", PGHOST="127.0.0.1", PGPORT=str(database.port), MLFLOW_HOST="127.0.0.1",
        MLFLOW_PORT=str(free_port()), ARTIFACTS=str(tmp_path / "artifacts"),
        MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true",
    )  # fmt: skip
    uri = f"http://127.0.0.1:{env['MLFLOW_PORT']}"
    server = None
    try:
        start = time.monotonic()
        done = bash(blocks["database"], env)
        assert done.returncode == 0, done.stderr
        server = start_server(blocks["server"], env, tmp_path / "server.log")
        print(f"server up {time.monotonic() - start:.1f}")
        health = bash(blocks["health"], env)
        assert health.returncode == 0 and health.stdout.strip() == "OK", health.stdout + health.stderr

        sweep = subprocess.run(["bash", "-ec", blocks["sweep"].rstrip() + " " + " ".join(TINY)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)  # fmt: skip
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        print(f"sweep done {time.monotonic() - start:.1f}")
        client = MlflowClient(tracking_uri=uri)
        team = client.get_experiment_by_name("team")
        runs = client.search_runs([team.experiment_id])
        [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert len(children) == 4 and {r.info.status for r in runs} == {"FINISHED"}
        assert team.artifact_location.startswith("mlflow-artifacts:")  # kept by the server, not a member's disk

        # a run that ends while the server is away keeps what is left; the guide's rlplat-sync records it
        run_dir = tmp_path / "laptop"
        command = blocks["run"].replace("tracking.end_wait_s=60", "tracking.end_wait_s=1").rstrip()
        command += (
            f" trainer.total_frames=40000 trainer.eval_every_frames=0 tracking.also=[csv] hydra.run.dir={run_dir}"
        )
        stderr = tmp_path / "run.stderr"
        with open(stderr, "w") as err:
            run = subprocess.Popen(["bash", "-ec", command], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                   stderr=err, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while not (run_dir / RUN_FILE).is_file() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        kill(server)
        print(f"server killed {time.monotonic() - start:.1f}")
        assert run.wait(timeout=300) == 0, stderr.read_text()[-3000:]
        print(f"run ended {time.monotonic() - start:.1f}")
        said = stderr.read_text()
        assert f"kept in {run_dir / PENDING_FILE}; record them with: rlplat-sync {run_dir}" in said, said[-3000:]
        server = start_server(blocks["server"], env, tmp_path / "server.log")
        print(f"server up again {time.monotonic() - start:.1f}")
        synced = bash(blocks["sync"], {**env, "RUN_DIR": str(run_dir)})
        print(f"synced {time.monotonic() - start:.1f}")
        assert synced.returncode == 0, synced.stderr
        run_id = read_run_file(run_dir)["run_id"]
        assert synced.stdout.strip() == f"rlplat-sync: recorded run {run_id}" and not (run_dir / PENDING_FILE).exists()
        recorded = client.get_run(run_id)
        assert recorded.info.status == "FINISHED" and recorded.data.tags["rlplat.waited_for_server"] == "true"
        with open(run_dir / "metrics.csv") as rows:  # every value MLflow got, written beside it
            expected = sum(1 for _ in csv.DictReader(rows))
        points = sum(len(client.get_metric_history(run_id, key)) for key in recorded.data.metrics)
        assert points == expected
        assert "checkpoints/final.pt" in {a.path for a in client.list_artifacts(run_id, "checkpoints")}
        print(f"sweep: {len(children)} child runs FINISHED; the run kept at its end: {points} metric values recorded")
    finally:
        if server is not None:
            kill(server)
        database.stop()
