"""A real MLflow tracking server, absent at start and lost during a run.

Each test starts ``mlflow server`` on a free loopback port with an sqlite store in a temp dir
(skipped when it cannot start), runs the real ``rlplat-train`` against it, and reads the
store back directly (sqlite), so that reading needs no server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cli
from mlflow import MlflowClient
from servers import BIN, MlflowServer, free_port
from waiting import printed, wait_until

ROLLOUT = ["collector.num_envs=4", "collector.steps_per_env=64"]  # 256 frames per rollout
FRAMES_PER_ROLLOUT = 256
ROLLOUTS = 80
BUFFERED = r"rlplat-train: warning: tracking server unreachable; (\d+) metric values buffered, retrying"


@pytest.fixture
def server(tmp_path: Path):
    """A started tracking server; killed after the test."""
    started = MlflowServer(tmp_path / "server", free_port())
    started.root.mkdir()
    if not started.start():
        log = started.log()
        started.kill()
        pytest.skip(f"mlflow server could not start on 127.0.0.1:{started.port}: {log[-500:]}")
    yield started
    started.kill()


def test_an_absent_tracking_server_is_one_error_line_and_no_run(tmp_path):
    """How soon the line comes is measured by benchmarks/tracking_timeouts.py (make bench)."""
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = cli(
        "rlplat-train", "algo=ppo", "env=cartpole", f"tracking.uri={uri}", "trainer.total_frames=256", *ROLLOUT,
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"rlplat-train: error: tracking.uri='{uri}': no MLflow tracking server answers there (")
    assert "connection refused" in line
    assert not list((tmp_path / "outputs").rglob("*.pt")) and not list((tmp_path / "outputs").rglob("config.yaml"))


def test_a_run_outlives_a_tracking_server_restart_and_loses_no_metric(tmp_path, server):
    """The server is killed once the run has logged, and restarted on the same port and store
    a few seconds later: the run ends FINISHED with every metric at every step.

    The run trains against no server until it has buffered a log step's values (its warning
    line); it is then paused (SIGSTOP) while the server restarts, which takes 5-20 s
    depending on the machine's load, so that it is still training when the server answers
    again, whatever the load. Whether the buffered
    values are written before the run ends or by its end depends on the retry schedule (1 to
    16 s between tries); either way none is lost, none is written twice, and each keeps the
    time it was logged at.
    """
    args = [
        "algo=ppo", "env=cartpole", f"tracking.uri={server.uri}", "tracking.artifact_location=null",
        f"trainer.total_frames={ROLLOUTS * FRAMES_PER_ROLLOUT}", "trainer.log_every_frames=0",
        "trainer.eval_every_frames=0", "trainer.eval_episodes=2", *ROLLOUT,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        run = subprocess.Popen([str(BIN / "rlplat-train"), *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=err, start_new_session=True)  # fmt: skip
    try:
        store = MlflowClient(tracking_uri=f"sqlite:///{server.db}")  # read directly: no server needed
        logged = wait_for_steps(store, run, steps=2)
        server.kill()
        wait_until(lambda: printed(stderr, BUFFERED), run, "the run buffered its values")  # it goes on, buffering
        os.killpg(run.pid, signal.SIGSTOP)
        assert server.start(), server.log()
        os.killpg(run.pid, signal.SIGCONT)
        running = run.poll() is None
        assert run.wait(timeout=120) == 0, stderr.read_text()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    print(f"server killed after {logged} of {ROLLOUTS} log steps")
    assert running, "the run ended before the server was back"
    text = stderr.read_text()
    print(text)

    [recorded] = store.search_runs([store.get_experiment_by_name("rlplat").experiment_id])
    assert recorded.info.status == "FINISHED"
    expected = [FRAMES_PER_ROLLOUT * i for i in range(1, ROLLOUTS + 1)]
    every_step = [key for key in recorded.data.metrics if key == "time/fps" or key.startswith("loss/")]
    assert "time/fps" in every_step and len(every_step) > 1
    for key in recorded.data.metrics:
        history = sorted(store.get_metric_history(recorded.info.run_id, key), key=lambda metric: metric.step)
        steps, timestamps = [m.step for m in history], [m.timestamp for m in history]
        assert len(set(steps)) == len(steps), key  # no step twice
        assert timestamps == sorted(timestamps), key
        if key in every_step:
            assert steps == expected, key  # no gap
    fps_times = [m.timestamp for m in store.get_metric_history(recorded.info.run_id, "time/fps")]
    assert len(set(fps_times)) == len(fps_times)  # each stamped when logged, not when a batch was written
    artifacts = {a.path for a in MlflowClient(server.uri).list_artifacts(recorded.info.run_id, "checkpoints")}
    assert "checkpoints/final.pt" in artifacts

    [warning] = re.findall(BUFFERED, text)
    [written] = re.findall(r"rlplat-train: tracking server reachable again; (\d+) buffered metric values written", text)
    assert int(warning) > 0 and int(written) >= int(warning)
    values = [m for key in recorded.data.metrics for m in store.get_metric_history(recorded.info.run_id, key)]
    print(f"{warning} metric values buffered at the first failure, {written} written on recovery, {len(values)} in all")
    assert "Retrying" not in text and "Traceback" not in text  # no urllib3 retry noise


def wait_for_steps(store: MlflowClient, run: subprocess.Popen[bytes], steps: int, timeout: float = 120.0) -> int:
    """Wait until the run has logged ``time/fps`` at ``steps`` log steps; returns how many it has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.poll() is None:
        experiment = store.get_experiment_by_name("rlplat")
        runs = store.search_runs([experiment.experiment_id]) if experiment else []
        if runs:
            logged = len(store.get_metric_history(runs[0].info.run_id, "time/fps"))
            if logged >= steps:
                return logged
        time.sleep(0.2)
    raise AssertionError(f"the run logged fewer than {steps} steps in {timeout} s (exit status {run.poll()})")
