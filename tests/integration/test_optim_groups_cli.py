"""``optim.<group>`` through the real CLI: each group's learning rate and gradient norm are
logged in MLflow under ``train/<group>/``."""

from __future__ import annotations

import pytest
from conftest import TINY, TINY_OFF_POLICY, cli, only_run


def test_sac_logs_each_groups_learning_rate_and_grad_norm(tmp_path, store):
    result = cli(
        "rlplat-train",
        "algo=sac",
        "env=pendulum",
        "optim.actor.lr=0.0001",
        "optim.critic.lr=0.002",
        f"tracking.uri={store}",
        *TINY_OFF_POLICY,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    _, run = only_run(store)
    metrics = run.data.metrics
    assert metrics["train/actor/lr"] == pytest.approx(0.0001)
    assert metrics["train/critic/lr"] == pytest.approx(0.002)
    assert metrics["train/temperature/lr"] == pytest.approx(float(run.data.params["optim.lr"]))
    for group in ("actor", "critic", "temperature"):
        assert metrics[f"train/{group}/grad_norm"] >= 0.0
    assert "train/lr" not in metrics  # no shared optimizer: every group has its own


def test_ppo_actor_and_critic_rates_follow_the_schedule_together(tmp_path, store):
    result = cli(
        "rlplat-train",
        "algo=ppo",
        "env=cartpole",
        "optim.actor.lr=0.001",
        "optim.critic.lr=0.003",
        f"tracking.uri={store}",
        *TINY,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    metrics = only_run(store)[1].data.metrics
    assert metrics["train/critic/lr"] == pytest.approx(3 * metrics["train/actor/lr"])  # linear decay, same factor
    assert "train/actor/grad_norm" in metrics and "train/critic/grad_norm" in metrics
