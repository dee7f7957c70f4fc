"""The speed options through the real CLI: a target return that stops the run, the compiled
update, the accelerated paths and autograd, EnvPool's envs."""

from __future__ import annotations

import math
import re

import pytest
from conftest import TINY, cli, tiny
from mlflow import MlflowClient


def _run(store: str):
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    return client, run


def test_a_target_return_stops_the_run_at_the_first_evaluation_that_reaches_it(tmp_path, store):
    # CartPole's return is at least 8 per episode: a target of 5 is reached at the first evaluation.
    args = ["algo=ppo", "env=cartpole", *TINY, "trainer.total_frames=1024", "trainer.target_return=5"]
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, run = _run(store)
    assert run.info.status == "FINISHED"
    [hit] = client.get_metric_history(run.info.run_id, "time/to_target_s")
    assert hit.step == 128 and 0 < hit.value < 60  # the first evaluation, at 128 frames
    assert max(m.step for m in client.get_metric_history(run.info.run_id, "time/fps")) == 128  # stopped there
    assert run.data.metrics["time/train_s"] >= hit.value
    assert "time/to_target_s" in result.stdout  # in the end-of-run table


def test_a_target_never_reached_gives_an_infinite_objective_and_trains_the_whole_budget(tmp_path, store):
    args = ["algo=ppo", "env=cartpole", *TINY, "trainer.target_return=10000", "trainer.objective=time/to_target_s"]
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, run = _run(store)
    [never] = client.get_metric_history(run.info.run_id, "time/to_target_s")  # logged at the last evaluation
    assert never.step == 256 and never.value >= 1.7e308  # an sqlite store keeps inf as the largest float
    assert max(m.step for m in client.get_metric_history(run.info.run_id, "time/fps")) == 256
    assert re.search(r"time/to_target_s\s+inf\b", result.stdout), result.stdout[-2000:]  # the end-of-run table

    # compared, the run is counted as one that never reached it, not as one without the metric
    result = cli("rlplat-train", *args[:-2], "trainer.target_return=0", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    result = cli("rlplat-compare", "rlplat", "metric=time/to_target_s", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "1 runs in 1 group" in text and "1 with an infinite time/to_target_s" in text, result.stdout


@pytest.mark.parametrize("bad,message", [("trainer.target_return=abc", "trainer.target_return='abc'")])
def test_a_bad_target_return_is_one_line(tmp_path, store, bad, message):
    result = cli("rlplat-train", "algo=ppo", "env=cartpole", bad, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    "algo,env,metrics",
    [
        ("ppo", "pendulum", ("loss/objective", "loss/critic", "train/grad_norm")),
        ("sac", "pendulum", ("loss/qvalue", "loss/actor", "loss/alpha", "train/critic/grad_norm")),
        # the update count (TD3's delay) and epsilon change at every update: neither may
        # recompile the loss (dynamo stops at 8 and runs it eager) or break its graph
        ("td3", "pendulum", ("loss/qvalue", "loss/actor", "train/actor/grad_norm")),
        ("ddpg", "pendulum", ("loss/qvalue", "loss/actor")),
        ("dqn", "cartpole", ("loss/qvalue", "train/epsilon")),
    ],
)
def test_a_compiled_update_trains_and_records_the_same_metrics(tmp_path, store, algo, env, metrics):
    args = [f"algo={algo}", f"env={env}", *tiny(algo), "trainer.compile=true"]
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert "recompile" not in result.stderr and "Graph break" not in result.stderr, result.stderr
    client, run = _run(store)
    assert run.info.status == "FINISHED" and run.data.params["trainer.compile"] == "True"
    for metric in (*metrics, "eval/return_mean"):
        assert math.isfinite(run.data.metrics[metric]), metric


@pytest.mark.parametrize(
    "algo,terms",
    [("ppo", ("loss/objective", "loss/critic")), ("sac", ("loss/qvalue", "loss/actor", "loss/alpha"))],
)
def test_closed_form_and_autograd_updates_record_the_same_losses(tmp_path, store, algo, terms):
    """trainer.accel through the real CLI: one seed, each way (SAC drawing the same actions
    either way); the first log step's losses agree to float rounding (the runs' parameters
    then drift apart by rounding alone); the console says which update runs."""
    first = {}
    for accel in ("true", "false"):
        args = [f"algo={algo}", "env=pendulum", *tiny(algo), f"trainer.accel={accel}", "seed=3"]
        result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        [line] = [line for line in result.stdout.splitlines() if line.startswith("accel: update by")]
        assert ("closed-form gradients" in line) is (accel == "true"), line
        client = MlflowClient(tracking_uri=store)
        [run] = client.search_runs(
            [client.get_experiment_by_name("rlplat").experiment_id],
            f"params.`trainer.accel` = '{accel.capitalize()}'",
        )
        history = {m: client.get_metric_history(run.info.run_id, m) for m in terms}
        first[accel] = {m: min(h, key=lambda x: x.step).value for m, h in history.items()}
    for metric, value in first["true"].items():
        assert value == pytest.approx(first["false"][metric], rel=1e-3, abs=1e-6), metric


@pytest.mark.parametrize("threads", [[], ["+env.kwargs.num_threads=1"]], ids=["default", "num_threads"])
def test_envpool_envs_train_and_evaluate(tmp_path, store, threads):
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    # EnvPool's thread options reach its pool alone: the gymnasium probe and evaluation envs take none
    args = ["algo=ppo", "env=cartpole", *TINY, "env.backend=envpool", *threads]
    result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    client, run = _run(store)
    assert run.data.params["env.backend"] == "envpool"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/return_mean")] == [128, 256]
    assert run.data.metrics["rollout/episodes"] > 0  # episodes ended and were counted across EnvPool's resets


@pytest.mark.parametrize(
    "args,message",
    [
        (["env.backend=envpoo"], "env.backend='envpoo': valid: gymnasium, envpool"),
        (["env=gym", "env.id=CartPole-v3", "+env.backend=envpool"], "EnvPool has no task env.id='CartPole-v3'"),
        (
            ["env=cartpole", "env.backend=envpool", "+env.kwargs.num_envs=4"],
            "env.kwargs.num_envs=4: rlplat sets EnvPool's num_envs; set collector.num_envs",
        ),
        (
            ["env=cartpole", "env.backend=envpool", "+env.kwargs.threads=1"],
            "env.kwargs.threads: EnvPool's 'CartPole-v1' has no such option; it takes num_threads, "
            "thread_affinity_offset, and those of its own (reward_threshold) that gymnasium's env takes too",
        ),
        (
            ["env=cartpole", "env.backend=envpool", "+env.kwargs.num_threads=0"],
            "env.kwargs.num_threads=0: must be an int >= 1",
        ),
        (  # one of EnvPool's own options that gymnasium's env does not take: the evaluation envs refuse it
            ["env=cartpole", "env.backend=envpool", "+env.kwargs.reward_threshold=400"],
            "env.kwargs={'reward_threshold': 400} rejected by 'CartPole-v1'",
        ),
    ],
)
def test_envpool_bad_input_is_one_line_and_writes_nothing(tmp_path, store, args, message):
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    result = cli("rlplat-train", "algo=ppo", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("rlplat-train: error:") and message in line, line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()
