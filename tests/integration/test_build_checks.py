"""Mismatches between components stop the CLI with exit status 2 and one message, before any
run, run directory or store exists."""

from __future__ import annotations

import pytest
from conftest import TINY_OFF_POLICY, cli
from mlflow import MlflowClient

MISMATCHES = [
    (
        ["algo=dqn", "env=cartpole", "loss.n_step=3", "buffer.sequence_length=1"],
        "buffer.sequence_length=1: loss 'dqn' needs samples of 3 consecutive steps (loss.n_step=3); "
        "set buffer.sequence_length=3",
    ),
    (
        ["algo=ppo", "env=cartpole", "buffer=replay"],
        "buffer='replay' does not fit loss 'ppo': the loss is on-policy and learns from only the latest rollout "
        "(an on-policy buffer). Buffers that fit: rollout.",
    ),
    (
        ["algo=dqn", "env=cartpole", "buffer=rollout"],
        "buffer='rollout' does not fit loss 'dqn': the loss is off-policy and learns from replayed data. "
        "Buffers that fit: prioritized, replay.",
    ),
    (
        ["algo=ppo", "env=cartpole", "collector=async"],
        "collector=async does not fit loss 'ppo': its workers act with weights some updates older than the "
        "learner's, and the loss is on-policy without a correction for that lag. Use algo=impala",
    ),
    (
        ["algo=sac", "env=pendulum", "buffer.capacity=10"],
        "buffer.capacity=10: must be at least buffer.batch_size=64",
    ),
    (
        [
            "algo=sac",
            "env=pendulum",
            "collector.num_envs=4",
            "buffer.capacity=300",
            "buffer.batch_size=64",
            "buffer.sequence_length=100",
            "loss=sac",
        ],
        "buffer.capacity=300: holds 75 steps per env over collector.num_envs=4",
    ),
    (
        ["algo=ppo", "env=cartpole", "buffer.minibatch_size=100000"],
        "buffer.minibatch_size=100000: must be in [1, 1024]",
    ),
    (
        ["algo=sac", "env=pendulum", "optim.policy.lr=0.001"],
        "optim.policy: the loss has no parameter group 'policy'. Its groups: actor, critic, temperature.",
    ),
    (
        ["algo=ppo", "env=cartpole", "optim.actor.lrr=0.001"],
        "optim.actor.lrr=0.001: optim.actor 'adam' has no key 'lrr'",
    ),
    (["algo=sac", "env=pendulum", "loss.features=0"], "loss.features=0: must be >= 1"),  # not network.hidden_sizes
    (  # rlplat's own key is among the valid ones
        ["algo=ppo", "env=cartpole", "optim.max_grad_nrom=0.5"],
        "optim.max_grad_nrom=0.5: optim 'adam' has no key 'max_grad_nrom'. Valid keys: name, lr, eps, betas, "
        "weight_decay, fused, max_grad_norm. Did you mean 'max_grad_norm'?",
    ),
    (
        ["algo=td3", "env=pendulum", "optim.critic.max_grad_norm=-1"],
        "optim.critic.max_grad_norm=-1: must be a number > 0, or null to not clip",
    ),
    (["algo=dqn", "env=pendulum"], "loss 'dqn' cannot act in env 'Pendulum-v1'"),
    (  # a loss without n-step returns: no hint at a key it does not have
        ["algo=sac", "env=pendulum", "buffer.sequence_length=3"],
        "buffer.sequence_length=3: loss 'sac' needs samples of 1 consecutive steps; set buffer.sequence_length=1",
    ),
    (
        ["algo=ppo", "env=cartpole", "transforms.obs_nrom={}"],
        "transforms.obs_nrom: no transform is named 'obs_nrom'. Valid: clip_action, frame_stack, from_pixels, "
        "grayscale, mask_observation, noop_reset, obs_norm, rescale_action, resize, reward_clip, reward_scale, "
        "reward_shaping, step_counter, time_limit, to_tensor_image, tokenize. Did you mean 'obs_norm'?",
    ),
    # a group's optimizer settings are named under the group's node
    (["algo=ppo", "env=cartpole", "optim.critic.lr=-1"], "optim.critic.lr=-1: must be > 0 (adam)"),
    (["algo=ppo", "env=cartpole", "optim.betas=[2,0.9]"], "optim.betas=[2, 0.9]: must be numbers in [0, 1) (adam)"),
    (
        ["algo=ppo", "env=cartpole", "optim.critic.betas=[0.9]"],
        "optim.critic.betas=[0.9]: must be two numbers in [0, 1), e.g. [0.9, 0.999] (adam)",
    ),
    (["algo=a2c", "env=cartpole", "optim.alpha=1.5"], "optim.alpha=1.5: must be a number in [0, 1) (rmsprop)"),
    (
        ["algo=ppo", "env=cartpole", "trainer.record_every_frames=500"],
        "trainer.record_every_frames=500: videos are recorded at log steps, which come every 1000 frames",
    ),
]


@pytest.mark.parametrize("args,message", MISMATCHES, ids=[" ".join(a) for a, _ in MISMATCHES])
def test_mismatch_stops_before_any_run_with_one_message(args, message, tmp_path, store):
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"rlplat-train: error: {lines[0].removeprefix('rlplat-train: error: ')}"], result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.*"))
    assert not (tmp_path / "mlflow.db").exists()  # the store was never opened: no run exists


def test_bad_input_leaves_a_run_directory_that_holds_the_users_files(tmp_path, store):
    """hydra.run.dir naming a directory of the user's: bad input removes what the command made
    there, never the directory and what it held (it used to remove the whole directory)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept\n")
    bad = ["algo=ppo", "env=cartpole", "loss.gamma=7", f"tracking.uri={store}"]
    result = cli("rlplat-train", *bad, "hydra.run.dir=mine", cwd=tmp_path)
    assert result.returncode == 2 and "loss.gamma=7: must be in [0, 1]" in result.stderr, result.stderr
    assert (mine / "notes.txt").read_text() == "kept\n"
    result = cli("rlplat-train", *bad, "hydra.run.dir=.", cwd=mine)
    assert result.returncode == 2 and mine.is_dir() and (mine / "notes.txt").is_file()


def test_a2c_with_fewer_envs_than_its_preset_trains(tmp_path, store):
    """buffer.minibatch_size=null (the whole rollout) passes the check before torch for any
    rollout size; a number of frames fixed in the preset was refused for fewer envs."""
    args = ["algo=a2c", "env=cartpole", "collector.num_envs=2", "trainer.total_frames=200", "trainer.eval_episodes=1"]
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.data.params["buffer.minibatch_size"] == "None"


def test_n_step_dqn_samples_windows_of_n_steps_without_extra_keys(tmp_path, store):
    """``algo=dqn loss.n_step=3`` alone trains 3-step returns: the preset ties the buffer's
    sequence length to ``loss.n_step``."""
    result = cli(
        "rlplat-train",
        "algo=dqn",
        "env=cartpole",
        "loss.n_step=3",
        f"tracking.uri={store}",
        *TINY_OFF_POLICY,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.data.params["buffer.sequence_length"] == "3" and run.data.params["loss.n_step"] == "3"
    assert run.info.status == "FINISHED"
