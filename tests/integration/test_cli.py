"""Runs: the real rlplat-train entry point as a subprocess, recorded in a real MLflow store."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import BENCHMARK_ENVS, EXTRA_ENVS, FRAME_ENVS, TINY, TINY_OFF_POLICY, cli
from mlflow import MlflowClient


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def test_train_records_params_metrics_artifacts_and_tags_in_the_default_store(tmp_path):
    result = cli("rlplat-train", "algo=ppo", "env=cartpole", "seed=3", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "eval @" in result.stdout and "Traceback" not in result.stderr
    assert "INFO mlflow" not in result.stdout + result.stderr  # creating the store stays off the console

    db = tmp_path / "outputs" / "mlflow.db"
    assert db.exists(), "default store is sqlite under outputs/ of the working directory"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("rlplat")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not MLflow 3's GenAI view
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.info.artifact_uri.startswith((tmp_path / "outputs" / "mlartifacts").as_uri())

    params = run.data.params
    assert params["trainer.total_frames"] == "256"
    assert params["loss.gamma"] == "0.98" and params["env.id"] == "CartPole-v1"
    assert params["network.hidden_sizes"] == "[64]" and params["seed"] == "3"

    tags = run.data.tags
    assert (tags["algo"], tags["env"], tags["seed"]) == ("ppo", "cartpole", "3")
    assert tags["rlplat.version"] and tags["command"].startswith("rlplat-train algo=ppo env=cartpole")

    evals = client.get_metric_history(run.info.run_id, "eval/return_mean")
    assert [m.step for m in evals] == [128, 256]
    for metric in (
        "eval/return_std",
        "rollout/return_mean",
        "time/fps",
        "loss/objective",
        "loss/critic",
        "train/approx_kl",
        "train/explained_variance",
        "train/value_mean",
    ):
        assert metric in run.data.metrics, metric
    assert [m.step for m in client.get_metric_history(run.info.run_id, "time/fps")] == [128, 256]
    # the run starts when the command did (its run is created beside the training, later):
    # every metric after it, and its duration the command's, start-up and training included
    timestamps = [m.timestamp for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)]
    assert run.info.start_time <= min(timestamps) and max(timestamps) <= run.info.end_time
    startup_s, train_s = run.data.metrics["time/startup_s"], run.data.metrics["time/train_s"]
    assert (run.info.end_time - run.info.start_time) / 1000 >= startup_s + train_s

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "hydra", "checkpoints"} <= artifacts
    assert {a.path for a in client.list_artifacts(run.info.run_id, "hydra")} >= {
        "hydra/config.yaml",
        "hydra/hydra.yaml",
        "hydra/overrides.yaml",
    }
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {
        "checkpoints/final.pt",
        "checkpoints/best.pt",
    }


BAD_INPUTS = [
    ("algo=ppoo", ["algo='ppoo'", "Valid: a2c, a2c_lstm, ddpg, dqn, impala, ppo, ppo_kl", "Did you mean 'ppo'"]),
    ("env=pendulumm", ["env='pendulumm'", "cartpole", "gym", "Did you mean 'pendulum'"]),
    ("network.hiden_sizes=[8]", ["network.hiden_sizes=[8]", "hidden_sizes, activation", "Did you mean 'hidden_sizes'"]),
    ("trainer.total_frames=-5", ["trainer.total_frames=-5", "integer >= 1"]),
]


@pytest.mark.parametrize("arg,needles", BAD_INPUTS, ids=[a for a, _ in BAD_INPUTS])
def test_bad_input_exits_non_zero_with_one_clear_message_and_writes_nothing(arg, needles, tmp_path, store):
    result = cli("rlplat-train", arg, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith("rlplat-train: error:") and len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message
    assert "Traceback" not in result.stderr + result.stdout
    assert files_under(tmp_path / "outputs") == []
    assert not (tmp_path / "mlflow.db").exists()


def test_full_error_shows_the_traceback(tmp_path, store):
    result = cli(
        "rlplat-train", "trainer.total_frames=-5", f"tracking.uri={store}", cwd=tmp_path, env={"HYDRA_FULL_ERROR": "1"}
    )
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_plugin_env_is_selectable_and_a_crash_ends_the_run_failed(tmp_path, store):
    """An env from an installed plugin is an option of env= with no YAML; a run that
    raises mid-training is recorded FAILED, not left RUNNING."""
    site = tmp_path / "site"
    info = site / "exploding_env-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: exploding-env\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlplat.envs]\nexploding = exploding_env:make\n")
    (site / "exploding_env.py").write_text(
        textwrap.dedent("""
        import gymnasium

        class Explode(gymnasium.Wrapper):
            steps = 0
            def step(self, action):
                Explode.steps += 1
                if Explode.steps > 40:
                    raise RuntimeError("boom at step 40")
                return self.env.step(action)

        def make():
            return Explode(gymnasium.make("CartPole-v1"))
    """)
    )
    result = cli(
        "rlplat-train", "env=exploding", f"tracking.uri={store}", *TINY, cwd=tmp_path, env={"PYTHONPATH": str(site)}
    )
    assert result.returncode != 0
    assert "boom at step 40" in result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["env"] == "exploding" and run.data.params["env.name"] == "exploding"


def compatible_pairs():
    """Every algo preset with every env preset whose action space it can act in (the env
    presets of extras in the slow suite: see EXTRA_ENVS; not the benchmarks' BENCHMARK_ENVS)."""
    from rlplat.build import action_spaces
    from rlplat.envs.probe import build_env
    from rlplat.hydra_ext import compose_config, yaml_options
    from rlplat.registry import LOSSES

    pairs = []
    for env in sorted(set(yaml_options("env")) - set(EXTRA_ENVS) - set(BENCHMARK_ENVS)):
        space = build_env(dict(compose_config([f"env={env}"]).env)).action_space
        for algo in sorted(yaml_options("algo")):
            loss = LOSSES.get(compose_config([f"algo={algo}"]).loss.name)
            if isinstance(space, action_spaces(loss)):
                pairs.append((algo, env))
    return pairs


@pytest.mark.parametrize("algo,env", compatible_pairs())
def test_every_algo_runs_end_to_end_on_every_compatible_env(algo, env, tmp_path, store):
    from conftest import tiny

    short = ["env.max_episode_steps=40"] if env in FRAME_ENVS else []  # a game of Pong is thousands of steps
    overrides = [f"algo={algo}", f"env={env}", f"tracking.uri={store}", *tiny(algo), *short]
    result = cli("rlplat-train", *overrides, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr  # a run prints no Python warning
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["algo"] == algo
    assert "eval/return_mean" in run.data.metrics
    assert any(k.startswith("loss/") for k in run.data.metrics)


def test_a_run_on_the_generic_gym_env_is_named_after_its_id(tmp_path, store):
    from conftest import TINY

    overrides = ["algo=ppo", "env=gym", "env.id=Acrobot-v1", "seed=3", f"tracking.uri={store}", *TINY]
    result = cli("rlplat-train", *overrides, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert run.info.run_name == "ppo-Acrobot-v1-s3"  # every such run was ppo-gym-s<seed>


def test_algorithm_that_cannot_act_in_the_env_names_both(tmp_path, store):
    result = cli("rlplat-train", "algo=dqn", "env=pendulum", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2
    assert "loss 'dqn' cannot act in env 'Pendulum-v1'" in result.stderr
    assert "Discrete" in result.stderr and "Algorithms for this env: a2c, ddpg" in result.stderr


def test_a_relative_sqlite_store_is_recorded_absolutely_and_found_from_elsewhere(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result = cli(
        "rlplat-train", "algo=ppo", "env=cartpole", *TINY, "tracking.uri=sqlite:///rel/m.db", cwd=tmp_path / "a"
    )
    assert result.returncode == 0, result.stderr
    [record] = (tmp_path / "a" / "outputs").rglob("rlplat_run.json")
    store = f"sqlite:///{tmp_path / 'a' / 'rel' / 'm.db'}"
    assert json.loads(record.read_text())["tracking_uri"] == store

    result = cli("rlplat-eval", str(record.parent), "episodes=2", cwd=tmp_path / "b")  # the run's store, from b
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 2 and not (tmp_path / "b" / "rel").exists()

    result = cli("rlplat-train", f"resume={record.parent}", cwd=tmp_path / "b")  # the checkpoint's config names it too
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "b" / "rel").exists()


@pytest.mark.parametrize(
    "algo,env_id,tiny",
    [("dqn", "FrozenLake-v1", TINY_OFF_POLICY), ("ppo", "Taxi-v4", TINY)],
    ids=["dqn-frozenlake", "ppo-taxi"],
)
def test_toy_text_envs_with_discrete_observations_train_and_checkpoint(algo, env_id, tiny, tmp_path):
    args = [f"algo={algo}", "env=gym", f"env.id={env_id}", *tiny, "tracking.enabled=false"]
    result = cli("rlplat-train", *args, "checkpoint.every_frames=128", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "outputs").rglob("step_*.pt")) and list((tmp_path / "outputs").rglob("final.pt"))
