"""IMPALA (algo=impala) through the real CLI: a short CartPole run, its loss terms and V-trace's
diagnostics recorded. The learning claim is in tests/integration/test_learning.py (slow)."""

from __future__ import annotations

import math

from conftest import cli, only_run

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
    result = cli("rlplat-train", *IMPALA, f"tracking.uri={store}", cwd=tmp_path)
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
