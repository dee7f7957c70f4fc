"""IMPALA (algo=impala) through the real CLI: a short CartPole run on the synchronous collector
(its loss terms and V-trace's diagnostics recorded, nothing to correct), and one on its default,
asynchronous collector (the lag logged; stopped by Ctrl-C, its workers gone, resumed to its
budget, evaluated). The learning claim is in tests/integration/test_learning.py (slow)."""

from __future__ import annotations

import math
import signal
import subprocess
from pathlib import Path

from conftest import cli, only_run
from test_resume_cli import printed_resume, start, wait_for_checkpoint

IMPALA = [
    "algo=impala",
    "env=cartpole",
    "trainer.total_frames=480",
    "trainer.eval_every_frames=240",
    "trainer.eval_episodes=2",
    "collector.num_envs=2",
    "collector.steps_per_env=20",
]
"""Twelve rollouts of 2 envs x 20 steps, each taken once as one batch, an evaluation every 240 frames."""


def test_a_short_run_logs_the_loss_terms_and_the_importance_weights(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = cli("rlplat-train", *IMPALA, "collector=sync", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    client, run = only_run(store)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for key in ("loss/objective", "loss/critic", "loss/entropy", "train/entropy", "train/explained_variance"):
        assert math.isfinite(metrics[key]), key
    params = run.data.params  # the algo preset, then tuned/impala_cartpole.yaml
    assert params["loss.clip_rho_threshold"] == "1.0" and params["loss.vtrace_lambda"] == "0.95"
    assert params["buffer.epochs"] == "1" and params["buffer.minibatch_size"] == "None"
    updates = client.get_metric_history(run.info.run_id, "train/updates")  # counts since the previous log
    assert sum(m.value for m in updates) == 12  # one update per rollout
    # the synchronous collector acts with the learner's parameters: no lag, nothing clipped
    for m in client.get_metric_history(run.info.run_id, "train/rho_mean"):
        assert abs(m.value - 1.0) < 1e-4, m
    for m in client.get_metric_history(run.info.run_id, "train/rho_clip_fraction"):
        assert m.value == 0.0, m


def test_on_its_asynchronous_collector_a_run_logs_the_lag_stops_on_ctrl_c_and_resumes(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [*IMPALA, "trainer.total_frames=4000", "checkpoint.every_frames=400", f"tracking.uri={store}"]
    process = start(args, tmp_path)
    wait_for_checkpoint(tmp_path, process)
    workers = [pid for pid in children(process.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert len(workers) == 2, workers
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]  # every worker ended with the run
    result = cli(*printed_resume(stderr), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "acting by the policy's own act (collector=async acts in worker processes)" in result.stdout + result.stderr

    client, run = only_run(store)
    assert run.info.status == "FINISHED" and run.data.params["collector.name"] == "async"
    assert run.data.params["collector.num_workers"] == "2"
    lags = client.get_metric_history(run.info.run_id, "collector/policy_lag")
    # rollouts learned from since the weights were sent: never negative, and with two workers
    # the learner takes one's rollouts while the other collects (unbounded: it grows with the load)
    assert lags and all(m.value >= 0 for m in lags) and max(m.value for m in lags) > 0
    assert max(m.step for m in lags) == 4000
    evaluations = client.get_metric_history(run.info.run_id, "eval/return_mean")
    assert evaluations[-1].step == 4000

    result = cli("rlplat-eval", run.info.run_id, "episodes=2", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(line) for line in listed.split()]
