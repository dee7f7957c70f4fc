"""Reading runs back from a real MLflow store: selecting, grouping, curves, and the report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from rlplat.registry import ConfigError
from rlplat.report.curves import RunCurve
from rlplat.report.report import compare, report_csv, report_markdown
from rlplat.report.runs import client_for, group_runs, read_curves, run_overrides, select_runs
from rlplat.tags import OVERRIDES_TAG, PARENT_TAG, SWEEP_TAG


def _run(client, experiment_id, *, algo, env, seed, finals, overrides="", parent=None, status="FINISHED"):
    """A run as rlplat-train records it: tags, and eval/return_mean at 100, 200, ... frames."""
    tags = {"algo": algo, "env": env, "seed": str(seed), OVERRIDES_TAG: overrides}
    if parent is not None:
        tags[PARENT_TAG] = parent
    run = client.create_run(experiment_id, tags=tags, start_time=1_000_000)
    metrics = [Metric("eval/return_mean", v, 1_000_000 + 1000 * (i + 1), 100 * (i + 1)) for i, v in enumerate(finals)]
    client.log_batch(run.info.run_id, metrics=metrics)
    client.set_terminated(run.info.run_id, status=status, end_time=1_000_000 + 1000 * (len(finals) + 1))
    return run.info.run_id


@pytest.fixture
def recorded(store):
    """A sweep parent with 3 ppo and 3 a2c children on cartpole, a failed child, and a plain run
    in another experiment."""
    client = MlflowClient(tracking_uri=store)
    sweep = client.create_experiment("sweep")
    parent = client.create_run(sweep, tags={SWEEP_TAG: "/nowhere"}).info.run_id
    for seed, final in enumerate([500.0, 480.0, 200.0]):
        _run(client, sweep, algo="ppo", env="cartpole", seed=seed, finals=[100, final], parent=parent,
             overrides=f"algo=ppo env=cartpole seed={seed} tracking.uri=x")  # fmt: skip
    for seed, final in enumerate([100.0, 150.0, 120.0]):
        _run(client, sweep, algo="a2c", env="cartpole", seed=seed, finals=[50, final], parent=parent,
             overrides=f"algo=a2c env=cartpole seed={seed}")  # fmt: skip
    _run(client, sweep, algo="a2c", env="cartpole", seed=9, finals=[1.0], parent=parent, status="FAILED",
         overrides="algo=a2c env=cartpole seed=9")  # fmt: skip
    other = client.create_experiment("other")
    _run(client, other, algo="ppo", env="pendulum", seed=0, finals=[-900, -200], overrides="env=pendulum")
    return client, parent


def test_a_parent_run_gives_its_finished_children_grouped_by_all_but_seed(recorded):
    client, parent = recorded
    selection = select_runs(client, [parent])
    assert selection.parent_run_id == parent
    assert len(selection.runs) == 6 and selection.left_out == {"FAILED": 1}
    labelled = group_runs(selection.runs, None)
    assert sorted({group for _, group, _ in labelled}) == ["algo=a2c env=cartpole", "algo=ppo env=cartpole"]
    curves = read_curves(client, labelled, "eval/return_mean")
    ppo = sorted(c.final for c in curves if "ppo" in c.group)
    assert ppo == [200.0, 480.0, 500.0]
    assert all(list(c.frames) == [100, 200] and list(c.seconds) == [1.0, 2.0] for c in curves)


def test_report_ranks_groups_and_gives_the_probability_of_improvement(recorded):
    client, parent = recorded
    labelled = group_runs(select_runs(client, [parent]).runs, None)
    report = compare(read_curves(client, labelled, "eval/return_mean"), "eval/return_mean", threshold=475)
    best, worst = report.groups
    assert best.group == "algo=ppo" and report.shared == "env=cartpole"
    assert best.runs == 3 and best.reached == 2 and best.frames_to_threshold == 200
    assert best.intervals["mean"].value == pytest.approx(1180 / 3)
    [improvement] = report.improvements
    assert (improvement.better, improvement.worse) == ("algo=ppo", "algo=a2c")
    assert improvement.probability.value == 1.0  # every ppo run beats every a2c run
    markdown = report_markdown(report)
    assert markdown.startswith("## rlplat report: eval/return_mean")
    assert "| algo=ppo | 3 |" in markdown and "P(A > B)" in markdown
    assert report_csv(report).splitlines()[0].startswith("group,seeds,mean,mean_low,mean_high")


def test_group_by_splits_other_overrides_into_tasks(recorded):
    client, parent = recorded
    runs = select_runs(client, ["sweep", "other"]).runs
    labelled = group_runs(runs, ["algo"])
    tasks = {(group, task) for _, group, task in labelled}
    assert ("algo=ppo", "env=pendulum") in tasks and ("algo=ppo", "env=cartpole") in tasks


def test_experiments_and_filters_select_runs_but_never_a_parent(recorded):
    client, parent = recorded
    assert len(select_runs(client, ["sweep"]).runs) == 6
    pendulum = select_runs(client, ["tags.env = 'pendulum'"]).runs
    assert [r.data.tags["env"] for r in pendulum] == ["pendulum"]
    assert run_overrides(pendulum[0]) == {"algo": "ppo", "env": "pendulum"}


@pytest.mark.parametrize(
    "targets,group_by,metric,message",
    [
        (["nosuch"], None, "eval/return_mean", "'nosuch' is no run id, experiment or search filter"),
        (["swep"], None, "eval/return_mean", "Did you mean 'sweep'?"),
        (["0" * 32], None, "eval/return_mean", "no such run"),
        (["tags.env = "], None, "eval/return_mean", "filter 'tags.env = '"),
        (["sweep"], ["algoo"], "eval/return_mean", "group_by=algoo: no run has 'algoo'"),
        (["sweep"], None, "eval/return_man", "metric='eval/return_man': no run logged it"),
    ],
)
def test_bad_targets_keys_and_metrics_name_the_problem(recorded, targets, group_by, metric, message):
    client, _ = recorded
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        labelled = group_runs(select_runs(client, targets).runs, group_by)
        read_curves(client, labelled, metric)


def test_a_store_that_does_not_exist_is_not_created(tmp_path):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(ConfigError, match="no MLflow store there"):
        client_for(uri)
    assert not (tmp_path / "none.db").exists()


def test_single_run_groups_have_collapsed_intervals(recorded):
    client, parent = recorded
    labelled = group_runs(select_runs(client, ["other"]).runs, None)
    report = compare(read_curves(client, labelled, "eval/return_mean"), "eval/return_mean")
    [only] = report.groups
    iqm = only.intervals["iqm"]
    assert iqm.value == iqm.low == iqm.high == -200.0
    assert not report.improvements and math.isnan(only.frames_to_threshold)
    assert np.isclose(only.wall_seconds, 3.0)


def test_seconds_to_a_target_rank_lowest_first_with_the_improvement_the_other_way():
    from rlplat.report.curves import RunCurve

    def run(group: str, seed: int, seconds: float) -> RunCurve:
        frames = np.array([5000])
        return RunCurve(f"{group}{seed}", group, "", seed, frames, np.array([seconds]), np.array([seconds]), seconds)

    fast = [run("preset=fast", s, v) for s, v in enumerate((2.0, 2.5, 3.0))]
    slow = [run("preset=slow", s, v) for s, v in enumerate((6.0, 7.0, 8.0))]
    report = compare([*slow, *fast], "time/to_target_s")
    assert [g.group for g in report.groups] == ["preset=fast", "preset=slow"]
    [improvement] = report.improvements
    assert (improvement.better, improvement.worse) == ("preset=fast", "preset=slow")
    assert improvement.probability.value == 1.0  # every fast run is below every slow one
    assert report.improvement_header == "P(A < B)" and "lower is better" in report_markdown(report)

    # a threshold of a lower-is-better metric is reached at or below it
    report = compare([*slow, *fast], "time/to_target_s", threshold=2.5)
    assert {g.group: g.reached for g in report.groups} == {"preset=fast": 2, "preset=slow": 0}
    assert "reached ≤ 2.5" in report_markdown(report)


def test_seconds_and_wall_time_leave_out_the_time_a_resumed_run_was_down(store):
    # metrics at 1, 2 s; down 10 s; metric at 14 s; down 5 s more (15 in all); metric at 22 s; end at 23 s
    client = MlflowClient(tracking_uri=store)
    experiment = client.create_experiment("resumed")
    run_id = client.create_run(experiment, tags={"algo": "ppo", "seed": "0"}, start_time=1_000_000).info.run_id
    values = [(1, 100), (2, 200), (14, 300), (22, 400)]
    metrics = [Metric("eval/return_mean", 1.0, 1_000_000 + 1000 * s, step) for s, step in values]
    metrics += [Metric("time/downtime_s", 10.0, 1_012_000, 200), Metric("time/downtime_s", 15.0, 1_020_000, 300)]
    client.log_batch(run_id, metrics=metrics)
    client.set_terminated(run_id, status="FINISHED", end_time=1_023_000)
    [curve] = read_curves(client, [(client.get_run(run_id), "ppo", "")], "eval/return_mean")
    assert list(curve.seconds) == [1.0, 2.0, 4.0, 7.0] and curve.wall_seconds == 8.0


def test_group_by_a_list_param_labels_each_group_by_its_whole_value(store):
    client = MlflowClient(tracking_uri=store)
    experiment = client.create_experiment("betas")
    for seed, betas in enumerate(["[0.9, 0.999]", "[0.9, 0.999]", "[0.8, 0.999]"]):
        run_id = _run(client, experiment, algo="ppo", env="cartpole", seed=seed, finals=[1.0, 2.0 + seed])
        client.log_param(run_id, "optim.betas", betas)
    runs = select_runs(client, ["betas"]).runs
    labels = sorted({group for _, group, _ in group_runs(runs, ["optim.betas"])})
    assert labels == ["optim.betas=[0.8,0.999]", "optim.betas=[0.9,0.999]"]
    with pytest.raises(ConfigError, match="no run has 'nokey'"):
        group_runs(runs, ["optim.betas", "nokey"])


def test_a_group_with_only_the_shared_overrides_is_labelled_so():
    one = {"frames": np.array([1]), "seconds": np.array([1.0]), "wall_seconds": 1.0}
    curves = [
        RunCurve("a", "algo=ppo env=cartpole", "", 0, values=np.array([1.0]), **one),
        RunCurve("b", "algo=ppo env=cartpole optim.lr=0.003", "", 0, values=np.array([2.0]), **one),
    ]
    report = compare(curves, "eval/return_mean")
    assert {g.group for g in report.groups} == {"(shared overrides only)", "optim.lr=0.003"}
