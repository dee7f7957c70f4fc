"""Sweeps for real: rlplat-train -m with Hydra's sweepers and launchers, read back from MLflow.

Each test runs the real entry point as a subprocess and reads the store it wrote through
MlflowClient: one parent run per sweep, one child run per job.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import TINY, cli
from mlflow import MlflowClient

from rlplat.sweep.parent import (
    JOB_TAG,
    OVERRIDES_TAG,
    PARENT_TAG,
    PRUNED_TAG,
    SWEEP_TAG,
)

BIN = Path(sys.executable).parent


def sweep_runs(uri: str, experiment: str = "rlplat"):
    """(parent, children) of the only sweep in the store."""
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    parents = [r for r in runs if PARENT_TAG not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = [r for r in runs if r.data.tags.get(PARENT_TAG) == parents[0].info.run_id]
    assert len(children) == len(runs) - 1, "every other run is a child of the parent"
    return client, parents[0], children


def table_values(stdout: str) -> list[float]:
    """The objective column of the printed job table (printed before the report), top to bottom."""
    table = stdout.split("rlplat report:", 1)[0]
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    return [float(cells[4]) for cells in rows if cells[4].strip() not in ("", "-")]


def test_multirun_records_a_parent_run_and_a_child_per_job_and_prints_them_sorted(tmp_path, store):
    result = cli(
        "rlplat-train",
        "-m",
        "algo=ppo,a2c",
        "env=cartpole",
        "seed=0,1,2",
        f"tracking.uri={store}",
        *TINY,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    client, parent, children = sweep_runs(store)

    assert len(children) == 6 and parent.info.status == "FINISHED"
    assert {c.info.status for c in children} == {"FINISHED"}
    jobs = {(c.data.tags["algo"], c.data.tags["seed"]) for c in children}
    assert jobs == {(a, s) for a in ("ppo", "a2c") for s in "012"}
    for child in children:
        tags = child.data.tags
        assert f"algo={tags['algo']}" in tags[OVERRIDES_TAG] and f"seed={tags['seed']}" in tags[OVERRIDES_TAG]
        assert tags[SWEEP_TAG] == parent.data.tags[SWEEP_TAG]
        assert tags["command"] == shlex.join(["rlplat-train", *tags[OVERRIDES_TAG].split()])  # reruns this job
        assert "trainer.total_frames=256" in tags[OVERRIDES_TAG] and "++" not in tags[OVERRIDES_TAG]
        assert child.data.metrics["time/startup_s"] >= 0
        # each job's run starts with the job, the first's too (not with the sweep's process),
        # so that wall times compare: the sweep's start-up is not the first group's
        assert child.info.start_time >= parent.info.start_time
    assert sorted(int(c.data.tags[JOB_TAG]) for c in children) == list(range(6))
    assert parent.data.params["sweep.overrides"].startswith("algo=ppo,a2c env=cartpole seed=0,1,2")

    assert parent.data.metrics["sweep/jobs"] == 6 and parent.data.metrics["sweep/jobs_failed"] == 0
    best = max(c.data.metrics["eval/return_mean"] for c in children)
    assert parent.data.metrics["best/eval/return_mean"] == best
    assert "jobs.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}

    assert f"(parent run {parent.info.run_id}): 6 jobs, best eval/return_mean first" in result.stdout
    assert all(c.info.run_id in result.stdout for c in children)  # whole ids, as rlplat-eval and -compare take them
    shown = table_values(result.stdout)
    assert len(shown) == 6 and shown == sorted(shown, reverse=True) and shown[0] == pytest.approx(best, abs=0.01)


@pytest.mark.parametrize("launcher", ["basic", "parallel"])
def test_a_failed_job_is_one_line_in_the_job_table_with_its_command_and_the_sweep_exits_1(launcher, tmp_path, store):
    """A bad value in one job: the other job trains, the sweep ends with its table and one line
    naming the failed job, why, and the command that runs it again; no traceback, on either
    launcher; the parent run FINISHED with the failure counted."""
    result = cli(
        "rlplat-train",
        "-m",
        f"hydra/launcher={launcher}",
        "algo=ppo",
        "env=cartpole",
        "trainer.total_frames=256,-5",
        f"tracking.uri={store}",
        *TINY[1:],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Error executing job" not in result.stderr, result.stderr
    again = "run it again: rlplat-train algo=ppo env=cartpole trainer.total_frames=-5"
    [line] = [line for line in result.stderr.splitlines() if again in line]
    said = "rlplat-train: error: job 1 failed: trainer.total_frames=-5: must be an integer >= 1; "
    assert line.startswith(said), line
    assert re.search(r"│\s+1 │ trainer.total_frames=-5\s+│ FAILED\s+│\s+- │\s+0 │ -\s+│", result.stdout), result.stdout
    _, parent, children = sweep_runs(store)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep/jobs"] == 2 and parent.data.metrics["sweep/jobs_failed"] == 1
    assert parent.data.metrics["sweep/jobs_waited_for_server"] == 0
    assert [c.info.status for c in children] == ["FINISHED"]  # the bad job never started a run


OPTUNA_TINY = [
    "hydra/launcher=basic",
    "hydra.sweeper.n_trials=6",
    "hydra.sweeper.pruner.n_startup_trials=2",
    "hydra.sweeper.pruner.n_warmup_steps=0",
    "trainer.total_frames=4096",
    "trainer.eval_every_frames=1024",
    "trainer.eval_episodes=2",
    "collector.steps_per_env=256",
]


def test_optuna_sweep_prunes_trials_and_logs_the_best_params_on_the_parent(tmp_path, store):
    result = cli("rlplat-train", "-m", "+sweep=ppo_pendulum_hpo", f"tracking.uri={store}", *OPTUNA_TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, parent, children = sweep_runs(store)
    assert len(children) == 6 and parent.info.status == "FINISHED"

    [results_file] = (tmp_path / "outputs" / "multirun").rglob("optimization_results.yaml")
    results = yaml.safe_load(results_file.read_text())
    assert results["trials"]["PRUNED"] >= 1 and sum(results["trials"].values()) == 6

    pruned = [c for c in children if c.data.tags.get(PRUNED_TAG) == "true"]
    assert len(pruned) == results["trials"]["PRUNED"]
    assert {c.info.status for c in pruned} == {"KILLED"}
    for child in pruned:  # stopped early: fewer evaluations than the 4 of a full trial
        assert len(client.get_metric_history(child.info.run_id, "eval/return_mean")) < 4
    finished = [c for c in children if c.info.status == "FINISHED"]
    assert len(finished) == results["trials"]["COMPLETE"]
    assert {c.data.tags["optuna.trial"] for c in children} == {str(i) for i in range(6)}

    best = results["best_params"]
    assert set(best) == {"optim.lr", "loss.gamma", "loss.gae_lambda", "loss.clip_epsilon", "buffer.epochs"}
    for key, value in best.items():
        assert parent.data.params[f"best.{key}"] == str(value)
    assert parent.data.metrics["best/value"] == pytest.approx(results["best_value"])
    [best_run] = [c for c in children if c.data.tags["optuna.trial"] == str(results["best_trial"])]
    assert float(best_run.data.params["optim.lr"]) == pytest.approx(best["optim.lr"])
    assert f"best trial {results['best_trial']}" in result.stdout
    assert f"loss.gamma={best['loss.gamma']}" in result.stdout
    assert "PRUNED" in result.stdout

    # its directory is not resumed as a whole: the message says so and names the trials' directories
    sweep_dir = results_file.parent
    result = cli("rlplat-train", f"resume={sweep_dir}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2
    assert "is an Optuna sweep's directory, which is not resumed as a whole" in result.stderr, result.stderr
    assert f"resume=<trial's job directory> ({sweep_dir / '0'}" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["+sweep=ppo_pendulum_hpoo"], ["sweep='ppo_pendulum_hpoo'", "Did you mean 'ppo_pendulum_hpo'"]),
        (
            ["+sweep=ppo_pendulum_hpo", "hydra.sweeper.pruner.name=medain"],
            ["hydra.sweeper.pruner.name='medain'", "median, successive_halving, worse_than_best, none"],
        ),
        (
            ["+sweep=ppo_pendulum_hpo", "++hydra.sweeper.params={optim.lrr: 'interval(0.1, 0.2)'}"],
            ["hydra.sweeper.params.optim.lrr", "Did you mean 'optim.lr'"],
        ),
        (["hydra/launcher=slurm", "seed=0,1"], ["hydra/launcher=slurm: no Slurm cluster here (srun is not on"]),
        (  # a key swept on the command line is checked as those of params are
            ["+sweep=ppo_pendulum_hpo", "loss.ent_coef=choice(0.0,0.01)"],
            ["loss.ent_coef: the config has no key 'loss.ent_coef'", "Did you mean 'loss.entropy_coef'"],
        ),
        (
            ["algo=ppo", "env=pendulum", "hydra/sweeper=rlplat_optuna"],
            ["hydra.sweeper.params is empty and the command line sweeps no key"],
        ),
    ],
)
def test_bad_sweep_config_exits_2_with_one_message_and_leaves_no_run(args, needles, tmp_path, store):
    result = cli("rlplat-train", "-m", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("rlplat-train: error: ")
    for needle in needles:
        assert needle in line
    if Path(store.removeprefix("sqlite:///")).exists():
        client = MlflowClient(tracking_uri=store)
        experiment = client.get_experiment_by_name("rlplat")
        assert experiment is None or client.search_runs([experiment.experiment_id]) == []
    assert not list((tmp_path / "outputs").rglob("*.pt"))


def optuna_sweep(tmp_path, store, env: str, space: str, *args: str):
    """``rlplat-train -m`` of a small PPO Optuna sweep over ``space`` on ``env``, recorded in ``store``."""
    sweep = ["algo=ppo", f"env={env}", "hydra/sweeper=rlplat_optuna", space, *args]
    return cli("rlplat-train", "-m", *sweep, "trainer.eval_episodes=2", f"tracking.uri={store}", cwd=tmp_path)


def test_an_optuna_search_space_given_on_the_command_line_alone_is_searched(tmp_path, store):
    args = ["hydra.sweeper.n_trials=2", "trainer.total_frames=1024", "collector.steps_per_env=128"]
    result = optuna_sweep(tmp_path, store, "pendulum", "optim.lr=tag(log, interval(1e-4, 3e-3))", *args)
    assert result.returncode == 0, result.stderr
    _, parent, children = sweep_runs(store)
    assert len(children) == 2 and parent.info.status == "FINISHED"
    rates = {float(c.data.params["optim.lr"]) for c in children}
    assert len(rates) == 2 and all(1e-4 <= r <= 3e-3 for r in rates)


def test_an_optuna_sweep_that_minimizes_ranks_its_jobs_and_groups_lowest_first(tmp_path, store):
    args = ["hydra.sweeper.n_trials=3", "hydra.sweeper.direction=minimize", "hydra.sweeper.sampler.seed=0"]
    args += ["trainer.total_frames=1024", "collector.steps_per_env=128"]
    result = optuna_sweep(tmp_path, store, "pendulum", "optim.lr=tag(log, interval(1e-4, 3e-3))", *args)
    assert result.returncode == 0, result.stderr
    _, parent, children = sweep_runs(store)
    values = {c.info.run_id: c.data.metrics["eval/return_mean"] for c in children}
    shown = table_values(result.stdout)
    assert len(shown) == 3 and shown == sorted(shown) and shown[0] == pytest.approx(min(values.values()), abs=0.01)
    assert values[parent.data.tags["rlplat.best_run_id"]] == min(values.values())
    assert parent.data.metrics["best/eval/return_mean"] == min(values.values())
    assert parent.data.params["sweep.direction"] == "minimize"
    assert "lower is better" in result.stdout and "P(A < B)" in result.stdout


def test_parallel_launcher_records_every_job_in_one_sqlite_store(tmp_path, store):
    result = cli(
        "rlplat-train",
        "-m",
        "hydra/launcher=parallel",
        "algo=ppo",
        "env=cartpole",
        "seed=0,1,2,3",
        f"tracking.uri={store}",
        *TINY,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "locked" not in result.stderr and "Joblib" in result.stderr + result.stdout
    _, parent, children = sweep_runs(store)
    assert parent.data.tags["rlplat.launcher"] == "parallel"
    assert sorted(c.data.tags["seed"] for c in children) == ["0", "1", "2", "3"]
    assert {c.info.status for c in children} == {"FINISHED"} and parent.info.status == "FINISHED"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'rlplat[ray]')")
@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
    reason="hydra-ray-launcher is not installed (pip install 'rlplat[ray]')",
)
@pytest.mark.skipif(not _unshare_works(), reason="needs unshare (root) for a loopback-only network namespace")
@pytest.mark.slow  # a Ray head, its workers and an mlflow server: about 90 s of a 2-core machine
def test_ray_launcher_runs_a_sweep_on_a_local_ray_head_with_a_tracking_server(tmp_path):
    """A Ray head and an MLflow tracking server on 127.0.0.1, inside a network namespace that
    has only a loopback interface (so neither can reach or bind any other address); the sweep
    runs its two jobs as Ray tasks that log to the server."""
    db = tmp_path / "server.db"
    ray_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must stay < 108 bytes
    tiny = " ".join(TINY)
    script = textwrap.dedent(
        f"""\
        set -u
        ip link set lo up
        export RAY_USAGE_STATS_ENABLED=0
        {BIN}/ray start --head --node-ip-address=127.0.0.1 --port=6390 --num-cpus=2 \\
            --include-dashboard=false --disable-usage-stats --temp-dir={ray_dir} > ray.log 2>&1 || exit 90
        {BIN}/mlflow server --host 127.0.0.1 --port 5077 --backend-store-uri sqlite:///{db} \\
            --workers 1 > mlflow.log 2>&1 &
        for i in $(seq 120); do
            {sys.executable} -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5077/health')" \\
                2>/dev/null && break
            sleep 0.5
        done
        {BIN}/rlplat-train -m hydra/launcher=ray_cluster hydra.launcher.ray.init.address=127.0.0.1:6390 \\
            tracking.uri=http://127.0.0.1:5077 algo=ppo env=cartpole seed=0,1 {tiny}
        code=$?
        {BIN}/ray stop --force > /dev/null 2>&1
        exit $code
        """
    )
    (tmp_path / "ray_sweep.sh").write_text(script)
    try:
        result = subprocess.run(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "ray_sweep.sh"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-4000:] + (tmp_path / "ray.log").read_text()[-2000:]

    _, parent, children = sweep_runs(f"sqlite:///{db}")
    assert parent.data.tags["rlplat.launcher"] == "ray_cluster" and parent.info.status == "FINISHED"
    assert sorted(c.data.tags["seed"] for c in children) == ["0", "1"]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert "2 jobs, best eval/return_mean first" in result.stdout


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        ("interval(0.1, 0.3)", "FloatDistribution(high=0.3, log=False, low=0.1, step=None)"),
        ("tag(log, interval(1e-4, 1e-2))", "FloatDistribution(high=0.01, log=True, low=0.0001, step=None)"),
        ("int(interval(3, 15))", "IntDistribution(high=15, log=False, low=3, step=1)"),
        ("range(1, 10, step=3)", "IntDistribution(high=7, log=False, low=1, step=3)"),
        ("range(0.1, 0.4, step=0.1)", "FloatDistribution(high=0.3, log=False, low=0.1, step=0.1)"),
        ("choice(64, 128)", "CategoricalDistribution(choices=(64, 128))"),
        ("0.9,0.99", "CategoricalDistribution(choices=(0.9, 0.99))"),
    ],
)
def test_search_space_grammar_maps_to_optuna_distributions(space, expected):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlplat.sweep.optuna import distribution

    found = distribution("x", OverridesParser.create().parse_override(f"x={space}"))
    assert repr(found).replace("0.30000000000000004", "0.3") == expected


def test_a_single_value_is_not_a_search_space():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlplat.registry import ConfigError
    from rlplat.sweep.optuna import distribution

    with pytest.raises(ConfigError, match=r"hydra\.sweeper\.params\.x='0\.1' is a single value"):
        distribution("x", OverridesParser.create().parse_override("x=0.1"))


@pytest.mark.parametrize(
    ("launcher", "plugin", "needles"),
    [
        ("parallel", "hydra_plugins.hydra_joblib_launcher", ["JoblibLauncher", "n_jobs: 2"]),
        ("slurm", "hydra_plugins.hydra_submitit_launcher", ["SlurmLauncher", "timeout_min: 120", "cpus_per_task: 2"]),
        ("ray_cluster", "hydra_plugins.hydra_ray_launcher", ["RayLauncher", "address: auto", "num_cpus: 1"]),
    ],
)
def test_launcher_configs_compose_against_their_plugins_schemas(launcher, plugin, needles, tmp_path):
    """Each launcher config extends its plugin's structured config, so a misspelt key would
    fail here; the Slurm one cannot run without a cluster, the others run in the tests above."""
    if importlib.util.find_spec(plugin) is None:
        pytest.skip(f"{plugin} is not installed (pip install 'rlplat[slurm]' / 'rlplat[ray]')")
    result = cli(
        "rlplat-train", f"hydra/launcher={launcher}", "--cfg", "hydra", "--package", "hydra.launcher", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    for needle in needles:
        assert needle in result.stdout


def test_concurrent_jobs_create_a_new_sqlite_store_without_errors(tmp_path):
    """Four processes opening one new store at once: MLflow's table creation races without
    the file lock ("table ... already exists", alembic errors); with it every run lands."""
    code = textwrap.dedent(
        f"""\
        from rlplat.tracking.store import Tracker
        tracker = Tracker("sqlite:///{tmp_path}/new.db", "race", None)
        tracker.start("run", {{}}, {{}})
        tracker.end("FINISHED")
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0, 0], errors
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/new.db")
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"] * 4


def test_reporter_reports_to_the_sweepers_trial_and_raises_when_pruned(tmp_path, monkeypatch):
    """The job's side of pruning, without a sweep: a trial asked in one study object is
    reached by number through the storage, as a launched job does."""
    import optuna

    from rlplat.sweep.optuna import (
        ENV_STORAGE,
        ENV_STUDY,
        ENV_TRIAL_NUMBER,
        PRUNER_ATTR,
        open_storage,
    )
    from rlplat.sweep.reporter import TrialReporter

    spec = str(tmp_path / "optuna.journal")
    pruner = {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0, "interval_steps": 1}
    study = optuna.create_study(study_name="s", storage=open_storage(spec), direction="maximize")
    study.set_user_attr(PRUNER_ATTR, pruner)
    monkeypatch.setenv(ENV_STORAGE, spec)
    monkeypatch.setenv(ENV_STUDY, "s")

    first = study.ask()
    monkeypatch.setenv(ENV_TRIAL_NUMBER, str(first.number))
    reporter = TrialReporter.from_environment("eval/return_mean")
    reporter.on_evaluation({"eval/return_mean": 10.0}, 100)
    reporter.on_evaluation({"rollout/return_mean": 0.0}, 200)  # no objective: nothing reported
    study.tell(first, 10.0)
    assert study.trials[0].intermediate_values == {100: 10.0}

    second = study.ask()
    monkeypatch.setenv(ENV_TRIAL_NUMBER, str(second.number))
    reporter = TrialReporter.from_environment("eval/return_mean")
    assert reporter.number == 1
    with pytest.raises(optuna.TrialPruned, match="trial 1 pruned at 100 frames") as error:
        reporter.on_evaluation({"eval/return_mean": 1.0}, 100)  # below the median of trial 0
    assert reporter.pruned(error.value) and not reporter.pruned(RuntimeError("boom"))


def test_a_trial_on_several_seeds_is_pruned_on_the_mean_of_their_values(tmp_path):
    """Two jobs of one trial (seeds_per_trial=2): the mean is reported once both have a value
    at a step, and both jobs stop once the trial is pruned."""
    import optuna

    from rlplat.sweep.optuna import PRUNER_ATTR, open_storage
    from rlplat.sweep.reporter import TrialReporter

    spec = str(tmp_path / "optuna.journal")
    pruner = {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0, "interval_steps": 1}
    study = optuna.create_study(study_name="s", storage=open_storage(spec), direction="maximize")
    study.set_user_attr(PRUNER_ATTR, pruner)
    first = study.ask()
    first.report(10.0, step=100)
    study.tell(first, 10.0)

    second = study.ask()
    seeds = [TrialReporter("eval/return_mean", storage=spec, study_name="s", number=1, seed_index=i, seeds=2)
             for i in range(2)]  # fmt: skip
    seeds[0].on_evaluation({"eval/return_mean": 4.0}, 100)  # alone at step 100: nothing to judge yet
    assert study.trials[1].intermediate_values == {}
    with pytest.raises(optuna.TrialPruned, match="trial 1 pruned at 100 frames"):
        seeds[1].on_evaluation({"eval/return_mean": 8.0}, 100)  # mean 6 < median 10
    assert study.trials[1].intermediate_values == {100: 6.0}
    assert study.trials[1].user_attrs == {"seed0@100": 4.0, "seed1@100": 8.0}
    with pytest.raises(optuna.TrialPruned):  # the job ahead stops at its next evaluation
        seeds[0].on_evaluation({"eval/return_mean": 50.0}, 200)
    assert second.number == 1


def test_optuna_trials_on_several_seeds_record_a_child_run_per_seed_and_their_mean(tmp_path, store):
    import optuna

    from rlplat.sweep.optuna import open_storage

    result = cli(
        "rlplat-train", "-m", "+sweep=ppo_pendulum_hpo", "hydra/launcher=basic", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.seeds_per_trial=3", "hydra.sweeper.pruner.name=none", "seed=10", f"tracking.uri={store}",
        "trainer.total_frames=512", "trainer.eval_every_frames=256", "trainer.eval_episodes=2",
        "collector.steps_per_env=64", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client, parent, children = sweep_runs(store)
    assert len(children) == 6 and {c.info.status for c in children} == {"FINISHED"}
    by_trial: dict[str, list] = {}
    for child in children:
        by_trial.setdefault(child.data.tags["optuna.trial"], []).append(child)
    assert sorted(by_trial) == ["0", "1"]
    [journal] = (tmp_path / "outputs" / "multirun").rglob("optuna.journal")
    study = optuna.load_study(study_name=journal.parent.name, storage=open_storage(str(journal)))
    for number, runs in by_trial.items():
        assert sorted(r.data.tags["optuna.seed_index"] for r in runs) == ["0", "1", "2"]
        assert sorted(r.data.tags["seed"] for r in runs) == ["10", "11", "12"]
        assert len({r.data.params["optim.lr"] for r in runs}) == 1  # one trial, one set of params
        mean = sum(r.data.metrics["eval/return_mean"] for r in runs) / 3
        trial = study.trials[int(number)]
        assert trial.value == pytest.approx(mean, rel=1e-9)
        linked = {trial.user_attrs[f"seed{r.data.tags['optuna.seed_index']}.run_id"] for r in runs}
        assert linked == {r.info.run_id for r in runs}  # the trial names its runs
    results = yaml.safe_load(next(journal.parent.glob("optimization_results.yaml")).read_text())
    assert results["seeds_per_trial"] == 3 and results["seed_aggregate"] == "mean"
    assert "(mean of 3 seeds)" in result.stdout
    # the report on the parent groups each trial's seeds
    assert parent.data.tags["mlflow.note.content"].count(" | 3 | ") == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["hydra.sweeper.seeds_per_trial=0"], "hydra.sweeper.seeds_per_trial=0: must be >= 1"),
        (["hydra.sweeper.seed_aggregate=max"], "hydra.sweeper.seed_aggregate='max': valid: mean, median, iqm"),
        (["hydra.sweeper.seeds_per_trial=2", "seed=0,1"], "take seed out of the search space"),
    ],
)
def test_bad_seeds_per_trial_settings_exit_2_with_one_line(args, needle, tmp_path, store):
    result = cli("rlplat-train", "-m", "+sweep=ppo_pendulum_hpo", *args, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_no_reporter_outside_an_optuna_sweep(monkeypatch):
    from rlplat.sweep.optuna import ENV_TRIAL_NUMBER
    from rlplat.sweep.reporter import TrialReporter

    monkeypatch.delenv(ENV_TRIAL_NUMBER, raising=False)
    assert TrialReporter.from_environment("eval/return_mean") is None


def test_job_outcome_reads_a_failed_job_quietly(capsys):
    from hydra.core.utils import JobReturn, JobStatus

    from rlplat.sweep.optuna import job_outcome

    done, failed = JobReturn(), JobReturn()
    done.status, done.return_value = JobStatus.COMPLETED, 1.5
    failed.status, failed.return_value = JobStatus.FAILED, RuntimeError("boom")
    assert job_outcome(done) == (1.5, None)
    value, error = job_outcome(failed)
    assert value is None and str(error) == "boom"
    assert capsys.readouterr().err == ""


def test_importing_the_sweeper_plugin_registers_nothing_until_asked():
    code = textwrap.dedent(
        """\
        from hydra.core.config_store import ConfigStore
        from hydra.core.plugins import Plugins

        def stored():
            try:
                return "rlplat_optuna.yaml" in ConfigStore.instance().list("hydra/sweeper")
            except OSError:  # no sweeper stored at all
                return False

        import hydra_plugins.rlplat_optuna_sweeper
        assert not stored()
        from hydra_plugins.rlplat_optuna_sweeper import register_sweeper
        register_sweeper()
        register_sweeper()
        assert stored()
        names = Plugins.instance().class_name_to_class
        assert "hydra_plugins.rlplat_optuna_sweeper.RlplatOptunaSweeper" in names
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_sweep_on_a_relative_sqlite_store_nests_its_jobs(tmp_path):
    args = ["-m", "algo=ppo", "env=cartpole", "seed=0,1", "tracking.uri=sqlite:///rel/m.db", *TINY]
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "differs from the sweep's" not in result.stderr
    _, parent, children = sweep_runs(f"sqlite:///{tmp_path / 'rel' / 'm.db'}")
    assert len(children) == 2 and parent.data.metrics["sweep/jobs"] == 2


def test_an_optuna_sweep_whose_every_trial_fails_says_so_in_one_line(tmp_path, store):
    result = optuna_sweep(tmp_path, store, "cartpole", "loss.gamma=interval(1.1, 1.5)", "hydra.sweeper.n_trials=2")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "rlplat-train: error: Optuna study" in result.stderr and "no trial completed (2 fail)" in result.stderr
    _, parent, children = sweep_runs(store)
    assert parent.info.status == "FAILED" and children == []


def test_optuna_trials_refused_before_their_run_count_as_failed_jobs(tmp_path, store):
    args = ["hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=1", "trainer.total_frames=1024"]
    result = optuna_sweep(tmp_path, store, "cartpole", "loss.gamma=choice(0.9, 1.5)", *args)
    assert result.returncode == 0, result.stderr
    _, parent, children = sweep_runs(store)
    refused = int(parent.data.metrics["optuna/fail"])
    assert refused >= 1 and len(children) == 4 - refused  # the seed draws both choices
    assert parent.data.metrics["sweep/jobs"] == 4 and parent.data.metrics["sweep/jobs_failed"] == refused
    assert result.stderr.count("rlplat-train: error: job ") == 2 * refused  # when it failed, and at the end
    assert "Traceback" not in result.stderr
