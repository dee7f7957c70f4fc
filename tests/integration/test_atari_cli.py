"""CNN PPO on Atari Pong through the real command line."""

from __future__ import annotations

from conftest import TINY, cli
from mlflow import MlflowClient


def test_ppo_on_pong_trains_a_shared_cnn_on_clipped_rewards_and_records_it(tmp_path, store):
    result = cli(
        "rlplat-train", "algo=ppo", "env=pong", f"tracking.uri={store}", *TINY, "env.max_episode_steps=40",
        "buffer.minibatch_size=32", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "leaked" not in result.stderr, result.stderr  # the emulators are freed before exit
    assert "A.L.E" not in result.stderr  # no banner per env
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    params = run.data.params
    assert run.info.status == "FINISHED" and run.data.tags["env"] == "pong"
    assert params["network.name"] == "cnn" and params["network.channels"] == "[32, 64, 64]"
    assert params["loss.share_torso"] == "True" and params["loss.features"] == "512"
    assert params["transforms.reward_clip"] == "{}" and params["transforms.obs_norm"] == "None"  # left out
    assert run.data.metrics["eval/episode_length"] == 40
    assert run.data.metrics["train/updates"] == 4 and any(key.startswith("loss/") for key in run.data.metrics)


def test_an_off_policy_algo_on_frames_names_the_network_keys_that_do_not_fit(tmp_path, store):
    result = cli("rlplat-train", "algo=dqn", "env=pong", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "network.hidden_sizes=[256]: network 'cnn' has no key 'hidden_sizes'" in result.stderr
    assert not (tmp_path / "mlflow.db").exists()
