"""The MLflow adapter: one run per training job, through ``mlflow.MlflowClient``."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from filelock import FileLock
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME
from omegaconf import OmegaConf

from rlplat.registry import ConfigError, check_kwargs

MAX_PARAMS_PER_BATCH = 100  # MLflow's limit per log_batch call
MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param value, in characters


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping -> ``{"dot.key": "value"}``; lists stay whole, as their str."""
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


def store_lock(uri: str) -> contextlib.AbstractContextManager[Any]:
    """A file lock beside an sqlite store, held while a job opens (and maybe creates) it.

    MLflow creates an sqlite store's tables and runs its migrations when a client first
    opens it; jobs of a parallel sweep doing that at once fail on "table already exists".
    Other stores (tracking servers) need no lock.
    """
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{path}.lock", timeout=300)


class Tracker:
    """Records one run in MLflow: params, metrics (step = frames), artifacts, tags, status.

    Args:
        uri: Tracking URI, e.g. ``sqlite:////abs/outputs/mlflow.db`` or ``http://host:5000``.
        experiment: Experiment name, created when missing.
        artifact_location: Directory for a newly created experiment's artifacts.
    """

    def __init__(self, uri: str, experiment: str, artifact_location: str | None) -> None:
        with store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id = self._experiment(experiment, artifact_location)
        self.run_id: str | None = None

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = Path(artifact_location).resolve().as_uri() if artifact_location else None
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except MlflowException:  # created meanwhile by a concurrent job of the same sweep
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def start(self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str]) -> str:
        """Create the run with ``tags`` and log ``params``; returns the run id."""
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=dict(tags))
        self.run_id = run.info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])
        return self.run_id

    @property
    def _started_run_id(self) -> str:
        """The id of the run :meth:`start` created; every method but ``start`` records into it."""
        assert self.run_id is not None, "Tracker.start() must be called before anything is recorded"
        return self.run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log scalar ``metrics`` at ``step`` (frames) in one batch."""
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, int(step)) for k, v in metrics.items()]
        self.client.log_batch(self._started_run_id, metrics=batch)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file, or a directory's contents, under ``artifact_path``."""
        if Path(path).is_dir():
            self.client.log_artifacts(self._started_run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(self._started_run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set (or overwrite) tags on the run."""
        for key, value in tags.items():
            self.client.set_tag(self._started_run_id, key, value)

    def end(self, status: str) -> None:
        """End the run with ``status``: FINISHED, FAILED, or KILLED (stopped early, e.g. pruned)."""
        self.client.set_terminated(self._started_run_id, status=RunStatus.to_string(RunStatus.from_string(status)))


class TrackerCallback:
    """Trainer callback that records into a started :class:`Tracker` run: every log step's
    metrics (step = frames) and every checkpoint file (under ``checkpoints/``)."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Log the metrics at step ``frames``."""
        self.tracker.log_metrics(metrics, step=frames)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: the evaluation's metrics came through :meth:`on_log`."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Upload the checkpoint file."""
        self.tracker.log_artifact(path, "checkpoints")


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


@dataclass(frozen=True)
class TrackingConfig:
    """The ``tracking`` node; see conf/config.yaml for each key."""

    enabled: bool = True
    uri: str = ""
    artifact_location: str | None = None
    experiment: str = "rlplat"
    run_name: str | None = None

    def __post_init__(self) -> None:
        if self.enabled and not self.uri:
            raise ConfigError("tracking.uri is empty: give an MLflow tracking URI, or tracking.enabled=false")
        if self.enabled and not self.experiment:
            raise ConfigError("tracking.experiment is empty: give an experiment name")

    @classmethod
    def from_node(cls, node: Any) -> TrackingConfig:
        """Check keys against the fields (naming valid ones), then values."""
        if OmegaConf.is_config(node):  # the tracking node: a dict with str keys
            values = cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))
        else:
            values = dict(node)
        check_kwargs("tracking", cls, values)
        return cls(**values)
