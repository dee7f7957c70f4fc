"""Runs that survive: SIGKILL then ``resume=``, SIGINT/SIGTERM, a corrupt newest checkpoint,
a non-finite env, and a sweep resumed job by job, all through the real CLI."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import BIN, TINY, TINY_OFF_POLICY, cli, only_run
from mlflow import MlflowClient
from waiting import loaded, needs_proc, wait_until

from rlplat.report.runs import read_curves
from rlplat.signals import STOPPED_IN_START_UP
from rlplat.tracking.store import store_lock

PPO = [
    "algo=ppo",
    "env=cartpole",
    "trainer.total_frames=12288",
    "collector.num_envs=4",
    "collector.steps_per_env=128",
    "buffer.epochs=2",
    "buffer.minibatch_size=128",
    "trainer.eval_every_frames=2048",
    "trainer.eval_episodes=3",
    "checkpoint.every_frames=1024",
    "trainer.log_every_frames=0",
]
SAC = [
    "algo=sac",
    "env=pendulum",
    "trainer.total_frames=2400",
    "buffer.learning_starts=200",
    "buffer.batch_size=64",
    "loss.warmup_frames=200",
    "trainer.eval_every_frames=600",
    "trainer.eval_episodes=2",
    "checkpoint.every_frames=200",
    "trainer.log_every_frames=100",
]


def start(args: list[str], cwd: Path, new_session: bool = False, **env: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full.update(env)
    return subprocess.Popen(
        [str(BIN / "rlplat-train"), *args],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
        # Ctrl-C as in a terminal: a test runner started in the background passes SIGINT on ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def orphan_ended_run(store: str, timeout: float = 120):
    """The run of a training process killed with SIGKILL, once its tracker's child process
    (which outlives it) has ended it FAILED.

    The child may still be creating a new store's tables when the parent dies: MLflow's
    client, opening the store at that moment, would run the same migrations beside it (rlplat
    opens a store under :func:`store_lock`, as this does)."""
    deadline = time.monotonic() + timeout
    while True:
        with store_lock(store):
            client = MlflowClient(tracking_uri=store)
        experiment = client.get_experiment_by_name("rlplat")
        runs = [] if experiment is None else client.search_runs([experiment.experiment_id])
        if len(runs) == 1 and runs[0].info.status != "RUNNING":
            assert runs[0].info.status == "FAILED", runs[0].info.status
            return runs[0]
        assert len(runs) <= 1, [r.info.run_id for r in runs]
        assert time.monotonic() < deadline, f"the killed run was not ended FAILED: {runs}"
        time.sleep(0.1)


def run_dir(cwd: Path) -> Path:
    [record] = list((cwd / "outputs").rglob("rlplat_run.json"))
    return record.parent


def wait_for_checkpoint(cwd: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not list((cwd / "outputs").rglob("step_*.pt")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.05)


def check_finished(store: str, budget: int) -> None:
    client, run = only_run(store)
    assert run.info.status == "FINISHED", run.info.status
    for key in ("time/fps", "eval/return_mean", "loss/critic" if "loss/critic" in run.data.metrics else "time/fps"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert steps == sorted(set(steps)), (key, steps)  # strictly increasing
        assert steps[-1] == budget


def kill_and_resume(args: list[str], budget: int, tmp_path: Path, store: str, seed: int) -> None:
    process = start([*args, f"tracking.uri={store}"], tmp_path)
    wait_for_checkpoint(tmp_path, process)
    time.sleep(random.Random(seed).uniform(0.0, 2.0))
    process.send_signal(signal.SIGKILL)
    process.wait()
    run = orphan_ended_run(store)
    result = cli("rlplat-train", f"resume={run.info.run_id}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stderr
    check_finished(store, budget)


def test_sigkill_then_resume_finishes_the_same_run(tmp_path, store):
    kill_and_resume(PPO, 12288, tmp_path, store, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "sac"])
@pytest.mark.parametrize("moment", range(5))
def test_sigkill_at_random_moments_then_resume(algo, moment, tmp_path, store):
    args, budget = (PPO, 12288) if algo == "ppo" else (SAC, 2400)
    kill_and_resume(args, budget, tmp_path, store, seed=moment + (100 if algo == "sac" else 0))


SHORT = [arg for arg in PPO if not arg.startswith("trainer.total_frames")] + ["trainer.total_frames=4096"]


def kill_before_the_run_is_recorded(tmp_path: Path, store: str, whole_group: bool) -> Path:
    """Start a run on a new store whose creation is held up (its lock is held here), kill it
    (and, ``whole_group``, its tracker's process) with SIGKILL once it wrote a checkpoint,
    then let the store be created. Returns the run directory, which has no run record."""
    with store_lock(store):  # the tracker's child waits for it to create the store
        process = start([*SHORT, f"tracking.uri={store}"], tmp_path, new_session=True)
        wait_for_checkpoint(tmp_path, process)
        time.sleep(0.5)  # past the next log step, where training waits for its MLflow run
        if whole_group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.send_signal(signal.SIGKILL)
        process.wait()
    directory = next((tmp_path / "outputs").rglob("step_*.pt")).parent.parent
    assert not (directory / "rlplat_run.json").exists()
    return directory


@pytest.mark.parametrize("target", ["run id", "run dir"])
def test_killed_while_the_store_is_created_the_run_ends_failed_and_resumes(target, tmp_path, store):
    directory = kill_before_the_run_is_recorded(tmp_path, store, whole_group=False)
    run = orphan_ended_run(store)  # created by the tracker's process after the training's death
    assert run.data.tags["rlplat.run_dir"] == str(directory)
    resume = run.info.run_id if target == "run id" else str(directory)
    result = cli("rlplat-train", f"resume={resume}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_finished(store, 4096)  # the same run, FINISHED
    assert json.loads((directory / "rlplat_run.json").read_text())["run_id"] == run.info.run_id


def test_killed_with_its_tracker_before_the_run_exists_resumes_as_a_new_run(tmp_path, store):
    directory = kill_before_the_run_is_recorded(tmp_path, store, whole_group=True)
    result = cli("rlplat-train", f"resume={directory}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the resumed run is recorded as a new run" in result.stderr
    client, run = only_run(store)
    check_finished(store, 4096)
    tags = run.data.tags
    assert (tags["algo"], tags["env"], tags["seed"], tags["rlplat.run_dir"]) == ("ppo", "cartpole", "0", str(directory))
    assert json.loads((directory / "rlplat_run.json").read_text())["run_id"] == run.info.run_id


def printed_resume(stderr: str) -> list[str]:
    """The command a stopped run printed to resume it, split as a shell splits it."""
    [command] = [line.removeprefix("Resume with: ") for line in stderr.splitlines() if line.startswith("Resume with: ")]
    return shlex.split(command)


def wait_for(path: Path, pattern: str, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not list(path.rglob(pattern)):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_ends_the_run_killed_with_a_checkpoint_and_resume_continues(sig, code, tmp_path, store):
    process = start([*PPO, f"tracking.uri={store}"], tmp_path)
    wait_for_checkpoint(tmp_path, process)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    client, run = only_run(store)
    assert run.info.status == "KILLED" and run.data.tags["rlplat.signal"] == signal.Signals(sig).name
    # the command as printed, run as printed: the run id, and this store (not the default one)
    command = printed_resume(stderr)
    assert command == ["rlplat-train", f"resume={run.info.run_id}", f"tracking.uri={store}"]
    stopped_at = run.info.end_time / 1000
    time.sleep(3)  # down for 3 s at least: left out of its wall time
    result = cli(*command, cwd=tmp_path)
    resumed_by = time.time()  # the resuming process started before this
    assert result.returncode == 0, result.stderr
    check_finished(store, 12288)
    _, run = only_run(store)
    [down] = client.get_metric_history(run.info.run_id, "time/downtime_s")
    assert 3 <= down.value <= resumed_by - stopped_at and down.timestamp > run.info.start_time
    [curve] = read_curves(client, [(run, "ppo", "")], "eval/return_mean")
    assert curve.wall_seconds == pytest.approx((run.info.end_time - run.info.start_time) / 1000 - down.value)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "time/startup_s")] == [0]  # not again


@needs_proc
def test_ctrl_c_during_start_up_stops_with_one_line_and_leaves_things_as_they_were(tmp_path, store):
    """Ctrl-C before training: a new run records nothing and leaves no run directory behind;
    a resume leaves its run KILLED and its checkpoints as they were."""
    process = start([*PPO, f"tracking.uri={store}"], tmp_path)
    wait_for(tmp_path / "outputs", "train.log", process)  # Hydra made the run directory
    # torch loads in the build, the job's start-up (its imports and the build take seconds)
    wait_until(lambda: loaded(process.pid, "libtorch"), process, "torch loaded")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr.strip()) == (130, STOPPED_IN_START_UP)
    assert not (tmp_path / "outputs").exists()
    client = MlflowClient(tracking_uri=store)
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])

    process = start([*PPO, f"tracking.uri={store}"], tmp_path)
    wait_for_checkpoint(tmp_path, process)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    _, run = only_run(store)
    checkpoints = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "outputs").rglob("*.pt"))
    resume = start([f"resume={run.info.run_id}", f"tracking.uri={store}"], tmp_path)
    assert resume.stderr is not None
    lines = [resume.stderr.readline()]
    while not lines[-1].startswith("rlplat-train: resuming"):  # its checkpoint loaded; its run not yet reopened
        assert lines[-1], lines
        lines.append(resume.stderr.readline())
    resume.send_signal(signal.SIGINT)
    _, stderr = resume.communicate(timeout=60)
    assert (resume.returncode, stderr.strip()) == (130, STOPPED_IN_START_UP)
    assert only_run(store)[1].info.status == "KILLED"
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "outputs").rglob("*.pt")) == checkpoints

    # a run directory goes on in the store it was recorded in: another tracking.uri is refused, not ignored
    [run_dir] = {p.parent.parent for p in (tmp_path / "outputs").rglob("step_*.pt")}
    result = cli("rlplat-train", f"resume={run_dir}", "tracking.uri=sqlite:///other.db", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"rlplat-train: error: tracking.uri='sqlite:///other.db': resume={str(run_dir)!r} goes on in the store it "
        f"was recorded in ({store}); tracking.uri= only says where to find a run id: leave it out"
    )
    assert not (tmp_path / "other.db").exists() and only_run(store)[1].info.status == "KILLED"


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, store):
    process = start([*PPO, f"tracking.uri={store}"], tmp_path)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "outputs").rglob("step_*.pt"))) < 2:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    newest = sorted((run_dir(tmp_path) / "checkpoints").glob("step_*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:1000])
    result = cli("rlplat-train", f"resume={run_dir(tmp_path)}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"checkpoint '{newest}' cannot be read" in result.stderr and "falling back" in result.stderr
    check_finished(store, 12288)


def test_resume_of_an_unknown_run_or_a_corrupt_checkpoint_is_one_line(tmp_path, store):
    result = cli("rlplat-train", "resume=0123456789abcdef", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "resume='0123456789abcdef': no run with this id" in result.stderr
    assert not (tmp_path / "mlflow.db").exists()  # looking a run up creates no store
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage")
    result = cli("rlplat-train", f"resume={bad}", cwd=tmp_path)
    assert result.returncode == 2 and f"checkpoint '{bad}' cannot be read" in result.stderr


NAN_ENV = textwrap.dedent("""
    import gymnasium
    import numpy as np

    class NanReward(gymnasium.Wrapper):
        # rewards turn NaN after 700 steps of this env (the 6th rollout of 128 steps per env)
        def __init__(self, env):
            super().__init__(env)
            self.steps = 0
        def step(self, action):
            observation, reward, terminated, truncated, info = self.env.step(action)
            self.steps += 1
            return observation, (np.nan if self.steps > 700 else reward), terminated, truncated, info

    def make():
        return NanReward(gymnasium.make("CartPole-v1"))
""")


def test_nan_reward_ends_the_run_failed_and_keeps_the_last_good_checkpoint(tmp_path, store):
    site = tmp_path / "site"
    (site / "nan_env-0.1.dist-info").mkdir(parents=True)
    (site / "nan_env-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: nan-env\nVersion: 0.1\n")
    (site / "nan_env-0.1.dist-info" / "entry_points.txt").write_text("[rlplat.envs]\nnan_env = nan_env:make\n")
    (site / "nan_env.py").write_text(NAN_ENV)
    args = [a for a in PPO if not a.startswith("env=")]
    result = cli(
        "rlplat-train",
        "env=nan_env",
        *args,
        f"tracking.uri={store}",
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("rlplat-train: error:")]
    assert "non-finite reward" in line and "at 3,072 frames" in line
    _, run = only_run(store)
    assert run.info.status == "FAILED"
    checkpoints = sorted((run_dir(tmp_path) / "checkpoints").glob("step_*.pt"))
    assert checkpoints and checkpoints[-1].name == "step_000000002048.pt"  # nothing written after the NaN
    probe = f"from rlplat.checkpoint import load_checkpoint; print(load_checkpoint({str(checkpoints[-1])!r})['frames'])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2048"


@pytest.mark.parametrize("record", ["kept", "lost"])
def test_sweep_resume_skips_finished_jobs_and_resumes_the_rest(record, tmp_path, store):
    """``lost``: job 1 as if killed before it wrote its run record (``rlplat_run.json``): the
    resume finds its run by the run directory's tag."""
    args = ["-m", *PPO, "seed=0,1", f"tracking.uri={store}", "hydra.sweep.dir=sweep"]
    process = start(args, tmp_path)
    deadline = time.monotonic() + 240
    while not list((tmp_path / "sweep" / "1").rglob("step_*.pt")):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if record == "lost":
        (tmp_path / "sweep" / "1" / "rlplat_run.json").unlink(missing_ok=True)
    result = cli("rlplat-train", f"resume={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "job 0 finished already" in result.stderr
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert [r.info.status for r in parent] == ["FINISHED"] and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in children)
    assert json.loads((tmp_path / "sweep" / "1" / "rlplat_run.json").read_text())["run_id"] in {
        r.info.run_id for r in children
    }


def test_a_sweep_stopped_by_sigint_resumes_as_printed_and_starts_the_jobs_it_never_started(tmp_path, store):
    """A grid sweep stopped in job 0 (job 1 never started), in a directory whose name Hydra
    must quote; job 0's checkpoints then lost (its run is started again); the resume stopped
    in job 1 by SIGINT, and resumed again, each time by the command printed."""
    sweep = tmp_path / "sweep (1,2)"
    args = ["-m", *PPO, "seed=0,1", f"tracking.uri={store}", "hydra.sweep.dir='sweep (1,2)'"]
    process = start([*args, "+hydra.job.env_set.OMP_NUM_THREADS=1"], tmp_path)
    wait_for(sweep / "0", "step_*.pt", process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert not (sweep / "1").exists()  # the sweep stopped before its second job
    client = MlflowClient(tracking_uri=store)
    [parent] = [r for r in client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
                if "mlflow.parentRunId" not in r.data.tags]  # fmt: skip
    assert parent.info.status == "KILLED" and parent.data.tags["rlplat.signal"] == "SIGINT"  # stopped, no error
    command = printed_resume(stderr)
    assert command == ["rlplat-train", f"resume={sweep}"]
    shutil.rmtree(sweep / "0" / "checkpoints")  # job 0 as if stopped before its first checkpoint

    process = start(command[1:], tmp_path)
    wait_for(sweep / "1", "step_*.pt", process)
    process.send_signal(signal.SIGINT)  # passed on to the job it started
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "job 0 never started; starting it: rlplat-train" in stderr
    assert printed_resume(stderr) == command
    assert "+hydra.job.env_set.OMP_NUM_THREADS=1" in (sweep / "1" / ".hydra" / "hydra.yaml").read_text()

    result = cli(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "job 0 finished already" in result.stderr and "resuming" in result.stderr
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    [restarted] = [r for r in children if r.data.tags.get("rlplat.restarted") == "true"]
    jobs = sorted((r for r in children if r is not restarted), key=lambda r: r.data.tags["rlplat.job"])
    assert restarted.data.tags["rlplat.job"] == "0" and restarted.info.status == "KILLED"
    assert parent.info.status == "FINISHED" and parent.data.metrics["sweep/jobs"] == 2  # one row per job
    assert "jobs.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert [r.info.status for r in jobs] == ["FINISHED", "FINISHED"]
    assert [r.data.tags["rlplat.job"] for r in jobs] == ["0", "1"]
    assert {r.data.tags["rlplat.sweep"] for r in jobs} == {parent.data.tags["rlplat.sweep"]}
    assert "seed=1" in jobs[1].data.tags["rlplat.overrides"].split()
    assert jobs[1].data.params["seed"] == "1"
    for number, run in enumerate(jobs):
        assert json.loads((sweep / str(number) / "rlplat_run.json").read_text())["run_id"] == run.info.run_id


@needs_proc
def test_ctrl_c_in_a_sweeps_start_up_stops_it_with_one_line_or_its_first_job_at_once(tmp_path, store):
    """Ctrl-C before a sweep records anything: one line, exit 130, no run, no sweep directory.
    Ctrl-C during the start-up of its first job (run in the sweep's own process by the basic
    launcher, composing its config): the job stops at once with a checkpoint, its run and the
    parent run end KILLED, the second job never starts, and nothing prints a traceback. Ctrl-C
    as the sweep's resume loads that job's checkpoint: the job is as it was, and the command
    to resume is printed again."""
    sweep = tmp_path / "sweep"
    args = ["-m", *PPO, "seed=0,1", f"tracking.uri={store}", f"hydra.sweep.dir={sweep}"]
    process = start(args, tmp_path)
    # importing Hydra and rlplat's command (numpy): the parent run begins seconds later, after MLflow's import
    wait_until(lambda: loaded(process.pid, "_multiarray_umath"), process, "numpy loaded")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr.strip()) == (130, STOPPED_IN_START_UP)
    assert not sweep.exists()
    client = MlflowClient(tracking_uri=store)
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])

    process = start(args, tmp_path)
    wait_for(sweep / "0", "train.log", process)  # Hydra made job 0's directory
    wait_until(lambda: loaded(process.pid, "libtorch"), process, "torch loaded")  # the job's build: its start-up
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error executing job" not in stderr, stderr
    assert printed_resume(stderr) == ["rlplat-train", f"resume={sweep}"]
    assert not (sweep / "1").exists()
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    [job] = [r for r in runs if r is not parent]
    for run in (parent, job):
        assert (run.info.status, run.data.tags.get("rlplat.signal")) == ("KILLED", "SIGINT")
    checkpoints = sorted((p.name, p.stat().st_mtime_ns) for p in (sweep / "0").rglob("step_*.pt"))
    assert checkpoints

    resume = start([f"resume={sweep}"], tmp_path)
    assert resume.stderr is not None
    lines = [resume.stderr.readline()]
    while not lines[-1].startswith("rlplat-train: resuming"):  # job 0's checkpoint loaded, its run not reopened
        assert lines[-1], lines
        lines.append(resume.stderr.readline())
    resume.send_signal(signal.SIGINT)
    _, stderr = resume.communicate(timeout=60)
    assert resume.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines() == [
        "rlplat-train: stopped by SIGINT outside a job's training",
        f"Resume with: rlplat-train resume={sweep}",
    ]
    assert client.get_run(job.info.run_id).info.status == "KILLED"
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (sweep / "0").rglob("step_*.pt")) == checkpoints


def test_ctrl_c_on_a_parallel_sweep_stops_every_running_job_with_a_checkpoint_and_starts_no_more(tmp_path, store):
    """hydra/launcher=parallel, 2 workers, 4 jobs: Ctrl-C (SIGINT to the process group, as a
    terminal sends it) while jobs 0 and 1 train. Both end KILLED after a checkpoint (joblib
    must not kill a worker whose job is still stopping), jobs 2 and 3 do not start; the
    sweep's resume finishes all four."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=parallel", *PPO, "trainer.total_frames=40960", "seed=0,1,2,3"]
    process = start([*args, f"tracking.uri={store}", f"hydra.sweep.dir={sweep}"], tmp_path, new_session=True)
    for job in ("0", "1"):
        wait_for(sweep / job, "step_*.pt", process)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    jobs = sorted((r for r in runs if r is not parent), key=lambda r: r.data.tags["rlplat.job"])
    assert parent.info.status == "KILLED" and parent.data.tags["rlplat.signal"] == "SIGINT"
    assert [(r.data.tags["rlplat.job"], r.info.status, r.data.tags.get("rlplat.signal")) for r in jobs] == [
        ("0", "KILLED", "SIGINT"),
        ("1", "KILLED", "SIGINT"),
    ]
    for job in ("2", "3"):
        assert f"job {job} not started: SIGINT stopped the sweep" in stderr
        assert not list((sweep / job).rglob("*.pt"))
    printed = {line for line in stderr.splitlines() if line.startswith("Resume with: ")}  # a line per stopped job
    assert printed == {f"Resume with: rlplat-train resume={sweep}"}
    result = cli("rlplat-train", f"resume={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    jobs = [r for r in runs if r.info.run_id != parent.info.run_id]
    assert sorted((r.data.tags.get("rlplat.job"), r.info.status) for r in jobs) == [(job, "FINISHED") for job in "0123"]


def test_a_job_killed_before_it_recorded_its_run_is_started_again_and_shows_once_in_the_job_table(tmp_path, store):
    """Job 1's run exists in the store but neither its record (``rlplat_run.json``) nor a
    checkpoint does, as when its process was killed right after its run was created: the
    resume starts the job again, and the job table has one row per job, the old run tagged
    ``rlplat.restarted``."""
    args = ["-m", *TINY, "algo=ppo", "env=cartpole", "seed=0,1", f"tracking.uri={store}", "hydra.sweep.dir=sweep"]
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sweep, client = tmp_path / "sweep", MlflowClient(tracking_uri=store)
    orphan = json.loads((sweep / "1" / "rlplat_run.json").read_text())["run_id"]
    (sweep / "1" / "rlplat_run.json").unlink()
    shutil.rmtree(sweep / "1" / "checkpoints")
    client.set_terminated(orphan, "FAILED")

    result = cli("rlplat-train", f"resume={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "job 0 finished already" in result.stderr and "job 1 never started; starting it" in result.stderr
    new = json.loads((sweep / "1" / "rlplat_run.json").read_text())["run_id"]
    assert new != orphan and client.get_run(new).info.status == "FINISHED"
    assert client.get_run(orphan).data.tags.get("rlplat.restarted") == "true"
    parent = client.get_run(client.get_run(new).data.tags["mlflow.parentRunId"])
    assert parent.data.metrics["sweep/jobs"] == 2  # one row per job
    table = client.download_artifacts(parent.info.run_id, "jobs.csv", str(tmp_path))
    assert orphan not in Path(table).read_text() and new in Path(table).read_text()


@pytest.mark.parametrize(
    "algo,transforms",
    [
        ("ppo", []),
        ("ppo", ["transforms.reward_scale={}"]),
        ("ppo_kl", []),
        ("ppo_lstm", ["env=cartpole_masked", "buffer.burn_in=4"]),
        ("ppo_kl", ["env=cartpole_masked", "network.core=gru", "buffer.sequence_length=8"]),
    ],
    ids=["preset", "reward_scale", "ppo_kl", "ppo_lstm", "ppo_kl_gru"],
)
def test_a_run_stopped_and_resumed_logs_the_evaluations_of_one_that_never_stopped(tmp_path, algo, transforms):
    """PPO's preset decays its learning rate (trainer.lr_schedule=linear): the resumed run
    must go on with the decayed rates the schedule sets, not the checkpoint's last ones;
    reward scaling's per-env discounted returns go on as they were; PPO-KL adapts its
    penalty from the rollout of the update before the stop; a recurrent policy's state per
    env goes on from where it was (and PPO-KL's KL runs over the kept rollout's episodes)."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "split").mkdir()
    whole, split = (f"sqlite:///{tmp_path / name / 'mlflow.db'}" for name in ("whole", "split"))
    base = [arg for arg in PPO[1:] if not (arg.startswith("env=") and any(t.startswith("env=") for t in transforms))]
    args = [f"algo={algo}", *base, "seed=5", *transforms]
    assert "trainer.lr_schedule=constant" not in args
    result = cli("rlplat-train", *args, f"tracking.uri={whole}", cwd=tmp_path / "whole")
    assert result.returncode == 0, result.stderr

    process = start([*args, f"tracking.uri={split}"], tmp_path / "split")
    wait_for_checkpoint(tmp_path / "split", process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    result = cli(*printed_resume(stderr), cwd=tmp_path / "split")
    assert result.returncode == 0, result.stderr

    histories = []
    for store in (whole, split):
        client, run = only_run(store)
        histories.append([(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/return_mean")])
    assert histories[0] == histories[1] and histories[0][-1][0] == 12288

    # each periodic checkpoint holds the next one due after it: a run resumed from one does
    # not write another at its first rollout
    from rlplat.checkpoint import load_checkpoint

    checkpoints = sorted((tmp_path / "split" / "outputs").rglob("step_*.pt"))
    assert checkpoints
    for path in checkpoints:
        state = load_checkpoint(path)
        assert state["trainer"]["next_checkpoint"] > state["frames"], path.name
    # best.pt too, and the next evaluation: a run resumed from it keeps the schedule
    [best] = (tmp_path / "split" / "outputs" / "runs").rglob("best.pt")
    state = load_checkpoint(best)
    assert state["trainer"]["next_checkpoint"] > state["frames"] and state["trainer"]["next_eval"] > state["frames"]
    assert state["trainer"]["last"]["eval/return_mean"] == state["trainer"]["best_eval"]


def test_resuming_a_run_that_reached_its_target_return_trains_no_further(tmp_path, store):
    args = [*PPO, "trainer.target_return=0", f"tracking.uri={store}"]  # the first evaluation reaches it
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, run = only_run(store)
    evaluations = client.get_metric_history(run.info.run_id, "eval/return_mean")
    assert [m.step for m in evaluations] == [2048]
    checkpoints = sorted(p.name for p in run_dir(tmp_path).joinpath("checkpoints").glob("*.pt"))

    result = cli("rlplat-train", f"resume={run.info.run_id}", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, run = only_run(store)
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/return_mean")] == [2048]
    assert sorted(p.name for p in run_dir(tmp_path).joinpath("checkpoints").glob("*.pt")) == checkpoints
    assert "time/fps" not in result.stdout  # no frames trained: no rate (it printed 0.00)


def test_an_n_step_dqn_run_without_its_saved_buffer_resumes_and_refills_it(tmp_path, store):
    """The DQN CartPole preset samples 3-step windows; checkpoint.save_buffer=false leaves the
    transitions out, so the resumed run refills its buffer before it updates again."""
    args = [
        "algo=dqn",
        "env=cartpole",
        "collector.steps_per_env=1",  # the first rollout after the resume: one step of each env
        "trainer.total_frames=3072",
        "trainer.eval_every_frames=1000",
        "trainer.eval_episodes=2",
        "trainer.target_return=null",
        "checkpoint.every_frames=1200",  # after learning_starts (1,000 frames): updates under way
        "checkpoint.save_buffer=false",
        f"tracking.uri={store}",
    ]
    process = start(args, tmp_path)
    wait_for_checkpoint(tmp_path, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    result = cli(*printed_resume(stderr), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_finished(store, 3072)


def test_ctrl_c_on_the_process_group_of_a_run_with_async_envs_stops_it_as_a_sync_one(tmp_path, store):
    """A terminal's Ctrl-C reaches the env workers too: they ignore it, and the run stops them
    (they died, and closing them failed with BrokenPipeError, exit status 1)."""
    args = [*PPO, "collector.vectorization=async", "collector.num_envs=2", f"tracking.uri={store}"]
    process = start(args, tmp_path, new_session=True)
    wait_for_checkpoint(tmp_path, process)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    client, run = only_run(store)
    assert run.info.status == "KILLED"
    result = cli(*printed_resume(stderr), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_finished(store, 12288)


def test_a_checkpoint_whose_optimizers_do_not_fit_is_refused_before_its_run_is_touched(tmp_path, store):
    # as written by an rlplat whose TD3 stepped actor and critic with one Adam
    result = cli("rlplat-train", "algo=td3", "env=pendulum", *TINY_OFF_POLICY, f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for checkpoint in (run_dir(tmp_path) / "checkpoints").glob("*.pt"):
        state = torch.load(checkpoint, weights_only=False)
        actor, critic = state["optimizers"]["optimizers"]
        offset = sum(len(group["params"]) for group in actor["param_groups"])
        critic_groups = [{**group, "params": [i + offset for i in group["params"]]} for group in critic["param_groups"]]
        state["optimizers"]["optimizers"] = [
            {
                "state": {**actor["state"], **{i + offset: value for i, value in critic["state"].items()}},
                "param_groups": [*actor["param_groups"], *critic_groups],
            }
        ]
        torch.save(state, checkpoint)
    result = cli("rlplat-train", f"resume={run_dir(tmp_path)}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "the state of its optimizers does not fit the optimizers built from its config" in result.stderr
    _, run = only_run(store)
    assert run.info.status == "FINISHED"  # as it was: nothing recorded
