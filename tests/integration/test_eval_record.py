"""rlplat-eval and rlplat-record on a real run: a tiny PPO Pendulum run trained once through
rlplat-train, then evaluated and recorded by run id, run directory and checkpoint file; and
the video pieces (GIF fallback, the periodic-video callback) in process."""

from __future__ import annotations

import random
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
import torch
from conftest import BIN, TINY, cli, install_distribution
from mlflow import MlflowClient
from waiting import has_open, needs_proc, wait_until

from rlplat import video
from rlplat.registry import ConfigError

PENDULUM = {"name": "gym", "id": "Pendulum-v1", "max_episode_steps": 5, "kwargs": {}}
"""The env node of a 5-step Pendulum, for fast in-process videos."""


@dataclass(frozen=True)
class Trained:
    cwd: Path
    store: str
    run_id: str
    run_dir: Path

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.store)

    def runs(self) -> list:
        experiments = [e.experiment_id for e in self.client.search_experiments()]
        return self.client.search_runs(experiments)

    def evaluations(self) -> list:
        return [r for r in self.runs() if r.data.tags.get("rlplat.source_run") == self.run_id]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    """One finished run with observation normalisation (its statistics are in the checkpoint)."""
    cwd = tmp_path_factory.mktemp("trained")
    store = f"sqlite:///{cwd / 'mlflow.db'}"
    overrides = ["algo=ppo", "env=pendulum", "seed=3", "+transforms.obs_norm={}", *TINY, f"tracking.uri={store}"]
    result = cli("rlplat-train", *overrides, cwd=cwd)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    run_dir = Path(run.data.tags["rlplat.run_dir"])
    assert (run_dir / "checkpoints" / "final.pt").is_file()
    return Trained(cwd, store, run.info.run_id, run_dir)


def printed(value: float) -> str:
    return f"{value:.2f}"


def test_eval_of_a_run_id_reproduces_the_runs_final_evaluation(trained, tmp_path):
    before = {r.info.run_id for r in trained.evaluations()}
    result = cli("rlplat-eval", trained.run_id, "episodes=2", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    [evaluation] = [r for r in trained.evaluations() if r.info.run_id not in before]
    metrics, params, tags = evaluation.data.metrics, evaluation.data.params, evaluation.data.tags
    final = trained.client.get_metric_history(trained.run_id, "eval/return_mean")[-1]
    assert metrics["eval/return_mean"] == final.value  # same weights, statistics, seeds and batch: exact
    assert metrics["eval/episodes"] == 2
    assert "mlflow.parentRunId" not in tags and evaluation.info.status == "FINISHED"
    assert evaluation.info.experiment_id == trained.client.get_run(trained.run_id).info.experiment_id
    assert params["episodes"] == "2" and params["deterministic"] == "true" and params["env.id"] == "Pendulum-v1"
    assert params["checkpoint"] == str(trained.run_dir / "checkpoints" / "final.pt")
    assert [m.step for m in trained.client.get_metric_history(evaluation.info.run_id, "eval/return_mean")] == [256]

    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("return"))
    assert printed(metrics["eval/return_mean"]) in row and printed(metrics["eval/return_max"]) in row
    assert evaluation.info.run_id in result.stdout

    # the evaluation's own run id names no checkpoint: the message says whose run to give
    again = cli("rlplat-eval", evaluation.info.run_id, f"tracking.uri={trained.store}", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"is an evaluation of run {trained.run_id}, which has no checkpoint: give {trained.run_id}" in again.stderr


@pytest.mark.parametrize("given", ["run_dir", "checkpoint"])
def test_eval_of_a_run_directory_or_checkpoint_records_in_the_source_runs_store(given, trained, tmp_path):
    target = trained.run_dir if given == "run_dir" else trained.run_dir / "checkpoints" / "best.pt"
    before = {r.info.run_id for r in trained.evaluations()}
    result = cli("rlplat-eval", str(target), "episodes=40", "deterministic=false", "seed=5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr

    [evaluation] = [r for r in trained.evaluations() if r.info.run_id not in before]
    metrics = evaluation.data.metrics
    assert metrics["eval/episodes"] == 40  # two batches: 32 + 8 envs
    assert metrics["eval/return_min"] <= metrics["eval/return_mean"] <= metrics["eval/return_max"]
    assert metrics["eval/length_mean"] == metrics["eval/length_min"] == 200 and metrics["eval/length_std"] == 0
    assert evaluation.data.params["checkpoint"].endswith("final.pt" if given == "run_dir" else "best.pt")
    assert evaluation.data.params["deterministic"] == "false" and evaluation.data.params["seed"] == "5"
    assert printed(metrics["eval/return_mean"]) in result.stdout
    assert not (tmp_path / "outputs").exists(), "the source run's store is used, not the default one"


def test_record_writes_a_video_and_logs_it_on_the_source_run(trained, tmp_path):
    result = cli("rlplat-record", trained.run_id, "episodes=1", "fps=20", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path = trained.run_dir / "videos" / "final.mp4"
    assert str(path) in result.stdout
    first = iio.imread(path, index=0)
    assert first.ndim == 3 and first.shape[2] == 3 and first.shape[0] >= 100 and first.shape[1] >= 100
    artifacts = {a.path for a in trained.client.list_artifacts(trained.run_id, "videos")}
    assert "videos/final.mp4" in artifacts


def test_record_to_a_chosen_gif(trained, tmp_path):
    out = tmp_path / "clip.gif"
    args = (str(trained.run_dir), "episodes=1", f"out={out}", "env.max_episode_steps=10")
    result = cli("rlplat-record", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert iio.imread(out, index=0).shape[2] in (3, 4)
    assert "no ffmpeg" not in result.stderr


def test_record_without_an_ffmpeg_encoder_writes_a_gif_and_says_so(trained, tmp_path):
    args = (str(trained.run_dir / "checkpoints" / "final.pt"), "episodes=2", "out=clip.mp4", "env.max_episode_steps=10")
    result = cli("rlplat-record", *args, cwd=tmp_path, env={"IMAGEIO_FFMPEG_EXE": str(tmp_path / "no-ffmpeg")})
    assert result.returncode == 0, result.stderr
    assert "no ffmpeg encoder available" in result.stderr and "wrote a GIF instead" in result.stderr
    assert not (tmp_path / "clip.mp4").exists()
    assert len(iio.imread(tmp_path / "clip.gif", index=None)) == 20  # 2 episodes of 10 steps


EVAL_BAD = [
    (["env.id=CartPole-v1"], ["env.id='CartPole-v1'", "trained on observations Box", "Discrete(2)"]),
    (["episode=3"], ["unknown key 'episode'", "Valid keys: episodes, deterministic", "Did you mean 'episodes'"]),
    (["episodes=0"], ["episodes=0", "integer >= 1"]),
    (["episodes=abc"], ["episodes='abc'", "integer >= 1"]),
    (["deterministic=maybe"], ["deterministic='maybe'", "true or false"]),
    (["env.idd=CartPole-v1"], ["env.idd='CartPole-v1'", "Valid keys", "Did you mean 'id'"]),
    (["seed"], ["'seed': expected key=value"]),
]


@pytest.mark.parametrize("args,needles", EVAL_BAD, ids=[a[0] for a, _ in EVAL_BAD])
def test_eval_bad_input_is_one_line_exit_2_and_records_nothing(args, needles, trained, tmp_path):
    before = len(trained.runs())
    result = cli("rlplat-eval", str(trained.run_dir), *args, cwd=tmp_path)
    assert_one_line_error("rlplat-eval", result, needles)
    assert len(trained.runs()) == before


def assert_one_line_error(prog, result, needles):
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert message.startswith(f"{prog}: error:") and len(message.splitlines()) == 1, message
    assert "Traceback" not in result.stdout + result.stderr
    for needle in needles:
        assert needle in message, message


def test_unknown_run_ids_and_corrupt_checkpoints_are_one_line_errors(trained, tmp_path):
    before = len(trained.runs())
    result = cli("rlplat-eval", "0123456789abcdef", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert_one_line_error("rlplat-eval", result, ["'0123456789abcdef'", "no run with this id"])

    result = cli("rlplat-eval", "0123456789abcdef", cwd=tmp_path)  # the default store does not exist here
    assert_one_line_error("rlplat-eval", result, ["'0123456789abcdef'", "outputs/mlflow.db"])
    assert not (tmp_path / "outputs").exists(), "looking a run id up creates no store"

    assert_one_line_error("rlplat-eval", cli("rlplat-eval", cwd=tmp_path), ["give the run"])

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    for prog in ("rlplat-eval", "rlplat-record"):
        assert_one_line_error(prog, cli(prog, str(corrupt), cwd=tmp_path), [str(corrupt), "cannot be read"])
    assert len(trained.runs()) == before


def test_record_of_an_env_that_cannot_render_names_the_env_and_the_key(trained, tmp_path):
    site = tmp_path / "site"
    install_distribution(
        site,
        "norender-env",
        {"rlplat.envs": {"norender": "norender_env:make"}},
        {"norender_env.py": "import gymnasium\n\ndef make(id, max_episode_steps=None, kwargs=None):\n"
         "    return gymnasium.make(id)\n"},
    )  # fmt: skip
    result = cli("rlplat-record", str(trained.run_dir), "env.name=norender", "fps=0", cwd=tmp_path,
                 env={"PYTHONPATH": str(site)})  # fmt: skip
    assert_one_line_error("rlplat-record", result, ["fps=0"])  # values first
    result = cli(
        "rlplat-record", str(trained.run_dir), "env.name=norender", cwd=tmp_path, env={"PYTHONPATH": str(site)}
    )
    assert_one_line_error("rlplat-record", result, ["env 'norender'", "'render_mode'"])
    assert not (trained.run_dir / "videos" / "final.gif").exists()


def test_help_lists_the_keys(tmp_path):
    for prog, keys in (("rlplat-eval", ("episodes=100", "deterministic=true", "env.<key>")),
                       ("rlplat-record", ("episodes=3", "fps=30", "out="))):  # fmt: skip
        result = cli(prog, "--help", cwd=tmp_path)
        assert result.returncode == 0 and all(key in result.stdout for key in keys), result.stdout
        env_line = next(line for line in result.stdout.splitlines() if "env.<key>=VALUE" in line)
        assert env_line.index("override") == 26, env_line  # in the column of the other keys' help


class ZeroPolicy:
    """Acts 0 (mid-range torque) on every observation."""

    def act(self, observation: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(len(observation), 1), torch.zeros(len(observation))


def test_record_episodes_falls_back_to_a_gif_without_ffmpeg(tmp_path, monkeypatch):
    monkeypatch.setattr(video, "ffmpeg_available", lambda: False)
    path = video.record_episodes(ZeroPolicy(), video.render_env_maker(PENDULUM), (), 2, 0, tmp_path / "a.mp4", 10)
    assert path == tmp_path / "a.gif" and not (tmp_path / "a.mp4").exists()
    frames = iio.imread(path)
    assert len(frames) == 10  # 2 episodes x 5 steps: the reset frame and one after each step but the last
    assert max(frames.shape[1:3]) <= video.GIF_MAX_SIDE


def test_video_recorder_records_on_its_schedule_without_touching_global_randomness(tmp_path):
    logged: list[Path] = []
    recorder = video.VideoRecorder(
        ZeroPolicy(), PENDULUM, (), every_frames=100, run_dir=tmp_path, seed=0, device=torch.device("cpu"),
        log=logged.append,
    )  # fmt: skip
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    for frames in (50, 120, 150, 199, 330, 400):
        recorder.on_log({}, frames)
    names = [p.name for p in logged]
    assert names == ["frames_000000000120.mp4", "frames_000000000330.mp4", "frames_000000000400.mp4"]
    assert all(p.parent == tmp_path / "videos" and p.stat().st_size > 0 for p in logged)
    assert iio.imread(logged[0], index=0).shape[2] == 3
    assert torch.equal(torch.get_rng_state(), states[0]) and (np.random.get_state()[1] == states[1]).all()
    assert random.getstate() == states[2]

    resumed = video.VideoRecorder(
        ZeroPolicy(), PENDULUM, (), every_frames=100, run_dir=tmp_path, seed=0, device=torch.device("cpu"),
        start_frames=250,
    )  # fmt: skip
    assert resumed.next_frames == 300


def test_envs_that_cannot_render_fail_before_recording(tmp_path):
    with pytest.raises(ConfigError, match="env.name"):
        video.VideoRecorder(ZeroPolicy(), {"name": "nope"}, (), every_frames=10, run_dir=tmp_path, seed=0,
                            device=torch.device("cpu"))  # fmt: skip
    with pytest.raises(ConfigError, match="trainer.record_every_frames=0"):
        video.VideoRecorder(ZeroPolicy(), PENDULUM, (), every_frames=0, run_dir=tmp_path, seed=0,
                            device=torch.device("cpu"))  # fmt: skip


def test_periodic_videos_during_training_change_nothing(trained, tmp_path):
    """What ``trainer.record_every_frames`` adds to a run (``video_callbacks``): the same
    training twice from the run's final checkpoint, without and with videos."""
    from dataclasses import replace

    from rlplat.agent import restore
    from rlplat.tracking.locate import locate_run
    from rlplat.trainer import Trainer
    from rlplat.video import video_callbacks

    located = locate_run(str(trained.run_dir), trained.store)
    summaries, runs = [], [tmp_path / "without", tmp_path / "with"]
    for run_dir, every in zip(runs, (0, 128)):
        run_dir.mkdir()
        built = restore(located, {}, None, "cpu")
        built = replace(built, trainer=replace(built.trainer, record_every_frames=every))
        try:
            summaries.append(Trainer(built.parts, built.trainer, run_dir, video_callbacks(built, run_dir)).fit())
        finally:
            built.parts.close()
    assert summaries[0]["eval/return_mean"] == summaries[1]["eval/return_mean"]
    assert not (runs[0] / "videos").exists()
    names = sorted(p.name for p in (runs[1] / "videos").iterdir())
    assert names == ["frames_000000000128.mp4", "frames_000000000256.mp4"]


def test_periodic_videos_are_logged_on_the_run_from_the_first(tmp_path, store):
    """Every video is uploaded, the first ones too: those written before the run directory
    recorded its MLflow run (a new store is still being created while training starts)."""
    args = ["algo=ppo", "env=cartpole", *TINY, "trainer.record_every_frames=128", f"tracking.uri={store}"]
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    [run_dir] = (tmp_path / "outputs" / "runs").glob("*/*")
    names = sorted(p.name for p in (run_dir / "videos").iterdir())
    assert names == ["frames_000000000128.mp4", "frames_000000000256.mp4"]
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "videos")) == [f"videos/{n}" for n in names]


def test_compare_of_an_experiment_leaves_out_the_runs_of_rlplat_eval(trained, tmp_path):
    """An evaluation run re-scores a training run's checkpoint: compared as a run of its own it
    would count as another seed (here, a group ``episodes=2``)."""
    result = cli("rlplat-eval", trained.run_id, "episodes=2", f"tracking.uri={trained.store}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert trained.evaluations()
    out = tmp_path / "report"
    result = cli("rlplat-compare", "rlplat", f"tracking.uri={trained.store}", f"out={out}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 runs in 1 group;" in " ".join(result.stdout.split()), result.stdout  # not 2 runs in 2 groups


@pytest.mark.parametrize(
    "out,needles",
    [
        ("notes.txt/clip.mp4", ["out='notes.txt/clip.mp4'", "is a file, not a folder"]),
        ("folder", ["out='folder'", "must end in .mp4 or .gif"]),
        ("folder.mp4", ["out='folder.mp4'", "a folder exists there"]),
        ("clip.txt", ["out='clip.txt'", "must end in .mp4 or .gif"]),
    ],
)
def test_record_to_an_out_it_cannot_write_is_one_line_and_writes_nothing(out, needles, trained, tmp_path):
    (tmp_path / "notes.txt").write_text("a file\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder.mp4").mkdir()
    before = {p.name for p in tmp_path.iterdir()}
    result = cli("rlplat-record", str(trained.run_dir), f"out={out}", cwd=tmp_path)
    assert_one_line_error("rlplat-record", result, needles)
    assert {p.name for p in tmp_path.iterdir()} == before and not any((tmp_path / "folder.mp4").iterdir())


def test_a_run_directory_whose_store_is_gone_is_evaluated_and_recorded_on_its_own(trained, tmp_path):
    """A run directory copied elsewhere, its recorded store missing: eval records a run of its
    own in the store it is given (saying why), record writes the video without logging it,
    and neither creates the missing store."""
    import json
    import shutil

    copy = tmp_path / "copied"
    shutil.copytree(trained.run_dir, copy)
    record = json.loads((copy / "rlplat_run.json").read_text())
    gone = tmp_path / "gone" / "mlflow.db"
    (copy / "rlplat_run.json").write_text(json.dumps({**record, "tracking_uri": f"sqlite:///{gone}"}))
    store = f"sqlite:///{tmp_path / 'here.db'}"

    result = cli("rlplat-eval", str(copy), "episodes=2", f"tracking.uri={store}", cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert f"is not in sqlite:///{gone}" in result.stderr
    assert f"recorded as a run of its own in {store}" in result.stderr
    client = MlflowClient(tracking_uri=store)
    [evaluation] = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert "rlplat.source_run" not in evaluation.data.tags and evaluation.data.metrics["eval/episodes"] == 2

    result = cli("rlplat-record", str(copy), "episodes=1", cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "the video is not logged to MLflow" in result.stderr
    assert (copy / "videos" / "final.mp4").stat().st_size > 0 or (copy / "videos" / "final.gif").is_file()
    assert not gone.parent.exists()


def stopped_by_ctrl_c(prog: str, args: list[str], cwd: Path, ready) -> subprocess.CompletedProcess:
    """Run ``prog`` and send it SIGINT, as Ctrl-C in a terminal does, once ``ready(process)``."""
    process = subprocess.Popen(
        [str(BIN / prog), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a runner in the background ignores it
    )  # fmt: skip
    wait_until(lambda: ready(process), process, f"{prog} was ready to stop")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@needs_proc
def test_ctrl_c_stops_eval_and_record_with_one_line_and_leaves_nothing_half_done(trained, tmp_path):
    before = len(trained.runs())
    store = Path(trained.store.removeprefix("sqlite:///"))
    result = stopped_by_ctrl_c(
        "rlplat-eval", [str(trained.run_dir), "episodes=100000"], tmp_path, lambda process: has_open(process.pid, store)
    )  # once it opened the run's store, past its imports: minutes of episodes, stopped in them (or in the build)
    assert (result.returncode, result.stderr.strip()) == (130, "rlplat-eval: stopped by SIGINT: nothing recorded")
    assert len(trained.runs()) == before

    out = tmp_path / "clip.mp4"
    args = [str(trained.run_dir), "episodes=1000", f"out={out}"]
    result = stopped_by_ctrl_c("rlplat-record", args, tmp_path, lambda _: out.exists())  # once the video is begun
    assert (result.returncode, result.stderr.strip()) == (130, "rlplat-record: stopped by SIGINT: no video written")
    assert not out.exists() and not list(tmp_path.glob("clip.*"))
