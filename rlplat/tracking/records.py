"""What a run records, without MLflow: its params (the flattened config), its tags, and the
trainer callback that hands metrics and checkpoints to the tracker."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rlplat.tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME

MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param value, in characters


class RunTracker(Protocol):
    """What :class:`TrackerCallback` writes to: :class:`rlplat.tracking.store.Tracker`, or
    :class:`rlplat.tracking.process.TrackerProcess`, which runs one in a child process."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log scalar metrics at ``step`` (frames)."""
        ...

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file or a directory's contents under ``artifact_path``."""
        ...


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> ``{"dot.key": "value"}``; lists stay whole, as their str (cut to
    MLflow's limit on a param value)."""
    flat: dict[str, str] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, prefix=f"{name}."))
        else:
            flat[name] = str(value)[:MAX_PARAM_LENGTH]
    return flat


def git_commit(directory: Path) -> str | None:
    """The commit checked out in ``directory``, or None outside a git work tree."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def run_tags(algo: str, env: str, seed: int, version: str, command: str, cwd: Path) -> dict[str, str]:
    """The tags every rlplat run carries: algo, env, seed, version, command, git commit."""
    tags = {
        "algo": algo,
        "env": env,
        "seed": str(seed),
        "rlplat.version": version,
        "command": command,
        MLFLOW_SOURCE_NAME: command.split(" ", 1)[0],
    }
    commit = git_commit(cwd)
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
        tags["git.commit"] = commit
    return tags


class TrackerCallback:
    """Trainer callback that records into a started (or reopened) run: every log step's
    metrics (step = frames) and every checkpoint file (under ``checkpoints/``).

    Args:
        tracker: The tracker of the run.
        after_step: Log steps at or below this many frames are not logged: a resumed run
            passes the tracker's ``last_step`` so that each metric's steps keep increasing.
    """

    def __init__(self, tracker: RunTracker, after_step: int | None = None) -> None:
        self.tracker = tracker
        self.after_step = after_step

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Log the metrics at step ``frames``, unless ``frames <= after_step``."""
        if self.after_step is None or frames > self.after_step:
            self.tracker.log_metrics(metrics, step=frames)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: the evaluation's metrics came through :meth:`on_log`."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Upload the checkpoint file."""
        self.tracker.log_artifact(path, "checkpoints")
