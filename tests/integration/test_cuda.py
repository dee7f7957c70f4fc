"""``trainer.device=cuda`` through the real CLI: each algorithm family trains on the GPU,
records finite losses and an evaluation, and its checkpoint evaluates on the CPU. Skipped
where torch sees no CUDA device (CI has none); run on a GPU machine with
``pytest tests/integration/test_cuda.py``."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from conftest import cli, tiny
from mlflow import MlflowClient

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

RUNS = [
    pytest.param(["algo=ppo", "env=pendulum"], id="ppo-pendulum"),
    pytest.param(["algo=ppo", "env=cartpole", "trainer.compile=true"], id="ppo-cartpole-compiled"),
    pytest.param(["algo=sac", "env=pendulum"], id="sac-pendulum"),
    pytest.param(["algo=sac", "env=pendulum", "trainer.compile=true"], id="sac-pendulum-compiled"),
    pytest.param(["algo=td3", "env=pendulum"], id="td3-pendulum"),
    pytest.param(["algo=dqn", "env=cartpole"], id="dqn-cartpole"),
    pytest.param(
        ["algo=ppo", "env=pong", "env.max_episode_steps=100"],
        id="ppo-pong-cnn",
        marks=pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs rlplat[atari]"),
    ),
]


@pytest.mark.parametrize("overrides", RUNS)
def test_a_run_on_the_gpu_trains_and_its_checkpoint_evaluates_on_the_cpu(tmp_path: Path, store: str, overrides):
    algo = overrides[0].removeprefix("algo=")
    result = cli("rlplat-train", *overrides, *tiny(algo), "trainer.device=cuda", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.device"] == "cuda"
    losses = {k: v for k, v in run.data.metrics.items() if k.startswith("loss/")}
    assert losses and all(math.isfinite(v) for v in losses.values()), losses
    assert math.isfinite(run.data.metrics["eval/return_mean"])

    evaluated = cli("rlplat-eval", run.info.run_id, "episodes=2", "device=cpu", f"tracking.uri={store}", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "Traceback" not in evaluated.stderr
