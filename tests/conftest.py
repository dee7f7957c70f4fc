"""Shared fixtures: a real MLflow sqlite store in a temp dir, and the real CLI as a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BIN = Path(sys.executable).parent


def cli(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300):
    """Run a console script of this environment as a user would; returns CompletedProcess."""
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update(env or {})
    return subprocess.run(
        [str(BIN / script), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def only_run(store: str):
    """``(client, run)``: an MLflow client of ``store`` and the one run of its ``rlplat``
    experiment (asserting there is exactly one)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("rlplat").experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0]


def imported_modules(stderr: str) -> set[str]:
    """The modules named by Python's import profile (a command run with PYTHONPROFILEIMPORTTIME=1)."""
    return {m.group(1) for m in re.finditer(r"^import time:.*\|\s+([\w.]+)$", stderr, re.MULTILINE)}


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Tracking URI of a fresh sqlite MLflow store in a temp dir."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


TINY = [
    "trainer.total_frames=256",
    "trainer.eval_every_frames=128",
    "trainer.eval_episodes=2",
    "collector.num_envs=2",
    "collector.steps_per_env=64",
    "buffer.epochs=1",
    "buffer.minibatch_size=64",
]
"""Overrides that shrink any on-policy run to a couple of seconds."""

TINY_OFF_POLICY = [
    "trainer.total_frames=256",
    "trainer.eval_every_frames=128",
    "trainer.eval_episodes=2",
    "collector.num_envs=2",
    "collector.steps_per_env=8",
    "buffer.learning_starts=64",
    "buffer.batch_size=32",
    "buffer.capacity=4096",
]
"""Overrides that shrink any off-policy run to a couple of seconds (and its replay's memory)."""

OFF_POLICY = ("dqn", "ddpg", "td3", "sac")

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
]
"""``trainer.device`` values to parametrize a test over: ``cuda`` runs where torch sees a GPU."""

FRAME_ENVS = ("pong",)
"""Env presets of image frames, whose games last thousands of steps: CLI tests cut them short."""

EXTRA_ENVS = (
    "minigrid_doorkey",
    "minigrid_doorkey_8x8",
    "minigrid_empty",
    "hopper",
    "halfcheetah",
    "walker2d",
    "inverted_pendulum",
)
"""Env presets of the minigrid and mujoco extras: every algo on them runs in the slow suite
(tests/integration/test_mujoco.py, test_minigrid_cli.py); the default suite builds them."""

BENCHMARK_ENVS = ("costly_cartpole",)
"""Env presets that differ from another only in what a step costs (CartPole with 1 ms of CPU
per step, for the collector benchmarks): the default suite builds every algo on them and runs
the collectors guide's commands on them, not every algo end to end."""


def tiny(algo: str) -> list[str]:
    """The tiny-budget overrides for ``algo``."""
    return TINY_OFF_POLICY if algo in OFF_POLICY else TINY


def make_trainer(overrides: list[str], output_dir: Path):
    """A :class:`rlplat.trainer.Trainer` built from ``overrides`` (composed as ``rlplat-train``
    composes them), writing under ``output_dir``."""
    from rlplat.build import build
    from rlplat.hydra_ext import compose_config
    from rlplat.trainer import Trainer

    built = build(compose_config(overrides))
    return Trainer(built.parts, built.trainer, output_dir)


def install_distribution(site: Path, name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str]):
    """Write a real installed distribution (dist-info + modules) into ``site``."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for filename, source in modules.items():
        (site / filename).write_text(source)


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray instance for the tests of collector=ray (skipped without Ray): started once,
    so that each collector joins it instead of starting and stopping its own."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
