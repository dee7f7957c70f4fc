"""RND-PPO (algo=ppo_rnd) through the real CLI: one short CartPole run, shared by the tests
here, trained by autograd (the closed-form PPO path covers exactly PPOLoss), logging the
predictor's loss and the intrinsic reward, its statistics in the checkpoint; rlplat-eval and
rlplat-record on it; a resume from its middle checkpoint that ends with the same weights.
The learning claim on MiniGrid DoorKey-8x8 is in tests/integration/test_learning.py (slow)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch
from conftest import cli
from mlflow import MlflowClient

RND = [
    "algo=ppo_rnd",
    "env=cartpole",
    "trainer.total_frames=256",
    "trainer.eval_every_frames=128",
    "trainer.eval_episodes=2",
    "collector.num_envs=2",
    "collector.steps_per_env=64",
    "buffer.epochs=2",
    "buffer.minibatch_size=64",
    "checkpoint.every_frames=128",
    "optim.predictor.lr=0.0005",
]
"""Two rollouts of 2 envs x 64 steps, a checkpoint and an evaluation after each; the
predictor's parameter group with a learning rate of its own."""


@dataclass(frozen=True)
class Trained:
    cwd: Path
    store: str
    run_id: str
    run_dir: Path
    output: str  # the training command's stdout and stderr

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.store)

    def final_eval(self) -> float:
        return self.client.get_metric_history(self.run_id, "eval/return_mean")[-1].value


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    cwd = tmp_path_factory.mktemp("rnd")
    store = f"sqlite:///{cwd / 'mlflow.db'}"
    result = cli("rlplat-train", *RND, f"tracking.uri={store}", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FINISHED"
    return Trained(cwd, store, run.info.run_id, Path(run.data.tags["rlplat.run_dir"]), result.stdout + result.stderr)


def test_a_short_run_trains_by_autograd_and_logs_the_predictor_loss_and_the_intrinsic_reward(trained):
    assert "accel: update by autograd (the loss is PPORNDLoss, a subclass of PPOLoss)" in trained.output
    assert "Warning" not in trained.output
    metrics = trained.client.get_run(trained.run_id).data.metrics
    for key in ("loss/predictor", "loss/intrinsic_critic", "loss/objective", "loss/critic", "train/intrinsic_reward"):
        assert math.isfinite(metrics[key]), key
    assert metrics["loss/predictor"] > 0 and metrics["train/intrinsic_reward"] > 0
    assert metrics["train/predictor/lr"] == 0.0005 and metrics["train/lr"] == 0.0003  # the groups' optimizers
    state = torch.load(trained.run_dir / "checkpoints" / "final.pt", weights_only=True)["loss"]
    assert tuple(state["observation_stats.entries.observation.mean"].shape) == (4,)
    assert float(state["observation_stats.entries.observation.count"]) == pytest.approx(256, abs=1e-3)
    assert tuple(state["intrinsic_return._extra_state"]["discounted_return"].shape) == (2,)  # one return per env
    assert tuple(state["agent.value_head.weight"].shape) == (2, 64)  # V_E and V_I


def test_eval_reproduces_the_runs_final_evaluation(trained, tmp_path):
    result = cli("rlplat-eval", trained.run_id, "episodes=2", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    client = trained.client
    [evaluation] = client.search_runs(
        [client.get_run(trained.run_id).info.experiment_id], f"tags.`rlplat.source_run` = '{trained.run_id}'"
    )
    assert evaluation.data.metrics["eval/return_mean"] == trained.final_eval()  # same weights and seeds: exact


def test_record_writes_a_video_of_the_run(trained, tmp_path):
    out = tmp_path / "rnd.gif"
    result = cli(
        "rlplat-record", str(trained.run_dir), "episodes=1", f"out={out}", "env.max_episode_steps=10", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first = iio.imread(out, index=0)
    assert first.ndim == 3 and first.shape[2] in (3, 4)


def test_a_resume_from_the_middle_checkpoint_ends_with_the_same_weights(trained, tmp_path):
    """Observation and intrinsic-return statistics, per-env returns, predictor and target
    come back from the checkpoint: the resumed run ends where the uninterrupted one did."""
    checkpoints = trained.run_dir / "checkpoints"
    uninterrupted = torch.load(checkpoints / "final.pt", weights_only=True)["loss"]
    middle, end = sorted(checkpoints.glob("step_*.pt"))
    end.unlink()  # as if killed before writing it
    result = cli("rlplat-train", f"resume={trained.run_dir}", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"from {middle} (" in result.stderr
    resumed = torch.load(checkpoints / "final.pt", weights_only=True)["loss"]
    assert resumed.keys() == uninterrupted.keys()
    extra = "intrinsic_return._extra_state"
    different = [k for k in resumed if k != extra and not torch.equal(resumed[k], uninterrupted[k])]
    assert different == [], different
    assert torch.equal(resumed[extra]["discounted_return"], uninterrupted[extra]["discounted_return"])
