"""CNN PPO on Atari Pong through the real command line."""

from __future__ import annotations

import pytest
from conftest import TINY, TINY_OFF_POLICY, cli, only_run


def test_ppo_on_pong_trains_a_shared_cnn_on_clipped_rewards_and_records_it(tmp_path, store):
    result = cli(
        "rlplat-train", "algo=ppo", "env=pong", f"tracking.uri={store}", *TINY, "env.max_episode_steps=40",
        "buffer.minibatch_size=32", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "leaked" not in result.stderr, result.stderr  # the emulators are freed before exit
    assert "A.L.E" not in result.stderr  # no banner per env
    client, run = only_run(store)
    params = run.data.params
    assert run.info.status == "FINISHED" and run.data.tags["env"] == "pong"
    assert params["network.name"] == "cnn" and params["network.channels"] == "[32, 64, 64]"
    assert params["loss.share_torso"] == "True" and params["loss.features"] == "512"
    assert params["transforms.reward_clip"] == "{}" and params["transforms.obs_norm"] == "None"  # left out
    assert run.data.metrics["eval/episode_length"] == 40
    assert run.data.metrics["train/updates"] == 4 and any(key.startswith("loss/") for key in run.data.metrics)


def test_dqn_on_pong_replays_uint8_frames_stored_once(tmp_path, store):
    result = cli(
        "rlplat-train", "algo=dqn", "env=pong", f"tracking.uri={store}", *TINY_OFF_POLICY, "env.max_episode_steps=40",
        "buffer.learning_starts=128", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client, run = only_run(store)
    params = run.data.params
    assert run.info.status == "FINISHED" and params["network.name"] == "cnn" and params["network.hidden_sizes"] == "[]"
    assert params["buffer.frame_stack"] == "4" and params["loss.features"] == "512"
    assert run.data.metrics["train/updates"] > 0 and any(key.startswith("loss/") for key in run.data.metrics)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_the_pong_presets_run_20k_frames(algo, tmp_path, store):
    """The presets as published, 20k frames (DQN's updates from 5k frames instead of 100k)."""
    start = ["buffer.learning_starts=5000"] if algo == "dqn" else []
    result = cli(
        "rlplat-train", f"algo={algo}", "env=pong", f"tracking.uri={store}", "trainer.total_frames=20000",
        "trainer.eval_every_frames=20000", "trainer.eval_episodes=1", "env.max_episode_steps=2000", *start,
        cwd=tmp_path, timeout=3000,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client, run = only_run(store)
    assert run.info.status == "FINISHED"
    assert client.get_metric_history(run.info.run_id, "eval/return_mean")[-1].step >= 20000
    assert run.data.metrics["train/updates"] > 0
