"""Prioritized replay and memory-mapped replay storage through the real rlplat-train."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import BIN, TINY_OFF_POLICY, cli, install_distribution, only_run


@pytest.mark.parametrize(
    "algo,env", [("dqn", "cartpole"), ("sac", "pendulum"), ("td3", "pendulum"), ("ddpg", "pendulum")]
)
def test_prioritized_replay_trains_value_based_algorithms_and_logs_the_td_error(algo, env, tmp_path, store):
    args = [f"algo={algo}", f"env={env}", "buffer=prioritized", *TINY_OFF_POLICY, f"tracking.uri={store}"]
    if algo == "dqn":  # its preset's 3-step windows, and updates once its learning_starts are collected
        args += ["buffer.learning_starts=64", "collector.steps_per_env=64"]
    result = cli("rlplat-train", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client, run = only_run(store)
    params, metrics = run.data.params, run.data.metrics
    assert params["buffer.name"] == "prioritized" and params["buffer.beta_frames"] == "256"  # trainer.total_frames
    assert metrics["train/td_error"] > 0 and metrics["loss/qvalue"] > 0
    assert metrics["train/updates"] > 0


PLUGIN = """
from rlplat.losses.dqn import DQNLoss
from rlplat.losses.sac import SACLoss


class PlainDQN(DQNLoss):
    \"\"\"DQN whose output leaves out the per-sample TD errors.\"\"\"

    def forward(self, batch):
        return super().forward(batch).exclude("td_error")


class CountingSAC(SACLoss):
    \"\"\"SAC that counts its forward calls in its output.\"\"\"

    calls = 0

    def forward(self, batch):
        CountingSAC.calls += 1
        out = super().forward(batch)
        out["calls"] = out["alpha"] * 0 + CountingSAC.calls
        return out
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> dict[str, str]:
    """The environment of a subprocess that sees a plugin distribution of two losses as installed."""
    site = tmp_path_factory.mktemp("site")
    entry_points = {"rlplat.losses": {"plain_dqn": "replay_probe:PlainDQN", "counting_sac": "replay_probe:CountingSAC"}}
    install_distribution(site, "replay-probe", entry_points, {"replay_probe.py": PLUGIN})
    return {"PYTHONPATH": str(site)}


def test_a_loss_subclass_trains_by_its_own_forward_and_one_without_td_errors_is_refused(tmp_path, store, plugin):
    sac = ["algo=sac", "env=pendulum", "buffer=prioritized", *TINY_OFF_POLICY, "loss.name=counting_sac"]
    result = cli("rlplat-train", *sac, f"tracking.uri={store}", cwd=tmp_path, env=plugin)
    assert result.returncode == 0, result.stderr
    assert "update by autograd (the loss is replay_probe.CountingSAC, a subclass of SACLoss)" in result.stdout
    _, run = only_run(store)
    assert run.data.metrics["train/calls"] > 1 and run.data.metrics["train/td_error"] > 0

    dqn = ["algo=dqn", "env=cartpole", "buffer=prioritized", *TINY_OFF_POLICY, "loss.name=plain_dqn"]
    result = cli("rlplat-train", *dqn, "buffer.learning_starts=64", "tracking.enabled=false", cwd=tmp_path, env=plugin)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "loss 'plain_dqn' returns no 'td_error'" in line and "use buffer=replay" in line


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [str(BIN / "rlplat-train"), *args],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_a_prioritized_memmap_run_stopped_and_resumed_logs_the_evaluations_of_one_that_never_stopped(tmp_path):
    """The buffer's files stay on disk; the checkpoint names their directory (no transition
    copied into it), and the priorities, their generator and beta go on as they were."""
    args = [
        "algo=dqn",
        "env=cartpole",
        "buffer=prioritized",
        "buffer.storage=memmap",
        "seed=3",
        "trainer.total_frames=3072",
        "trainer.eval_every_frames=1024",
        "trainer.eval_episodes=2",
        "trainer.target_return=null",
        "checkpoint.every_frames=1280",  # after learning_starts (1,000 frames): updates under way
    ]
    histories = []
    for name in ("whole", "split"):
        (tmp_path / name).mkdir()
        store = f"sqlite:///{tmp_path / name / 'mlflow.db'}"
        if name == "whole":
            result = cli("rlplat-train", *args, f"tracking.uri={store}", cwd=tmp_path / name)
        else:
            process = start([*args, f"tracking.uri={store}"], tmp_path / name)
            deadline = time.monotonic() + 240
            while not list((tmp_path / name / "outputs").rglob("step_*.pt")):
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 130, stderr
            [command] = [
                line.removeprefix("Resume with: ") for line in stderr.splitlines() if line.startswith("Resume with: ")
            ]
            result = cli(*shlex.split(command), cwd=tmp_path / name)
        assert result.returncode == 0, result.stderr
        client, run = only_run(store)
        histories.append([(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/return_mean")])
    assert histories[0] == histories[1] and histories[0][-1][0] == 3072

    [final] = (tmp_path / "split" / "outputs" / "runs").rglob("final.pt")
    buffer = torch.load(final, weights_only=True)["buffer"]
    run_dir = final.parent.parent
    assert "storage" not in buffer and buffer["memmap"] == str((run_dir / "replay").resolve())
    files = list((run_dir / "replay" / "storage").rglob("*.memmap"))
    assert files and os.path.getsize(final) < 2 * buffer["priorities"].numel() * 8  # priorities, not transitions
