"""What a run records, without MLflow: its params (the flattened config), its tags, and the
trainer callback that hands metrics and checkpoints to the tracker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rlplat.registry import ConfigError
from rlplat.tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME

MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param value, in characters

RUN_FILE = "rlplat_run.json"
"""Written into each run directory once its MLflow run exists: run id, tracking URI, experiment id."""


def read_run_file(run_dir: Path) -> dict[str, str]:
    """The run directory's :data:`RUN_FILE` (empty when the run was not recorded).

    Raises:
        ConfigError: when the file exists and cannot be read as JSON.
    """
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{str(path)!r} cannot be read ({error})") from error


def write_run_file(run_dir: Path, run_id: str, tracking_uri: str, experiment_id: str) -> None:
    """Write the run directory's :data:`RUN_FILE` for the MLflow run ``run_id`` (atomically:
    a reader sees the old file or the new one)."""
    record = {"run_id": run_id, "tracking_uri": tracking_uri, "experiment_id": experiment_id}
    path = Path(run_dir) / RUN_FILE
    partial = path.with_name(f".{RUN_FILE}.{os.getpid()}")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, path)


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


class RunRecord:
    """Trainer callback that writes the run directory's :data:`RUN_FILE` (the MLflow run's
    id, store and experiment: what ``resume=<run dir>`` reads) and tells a sweep's reporter
    the run's id, once the run exists.

    The tracker creates the run while training starts (:meth:`TrackerProcess.begin`); the
    record is written at the first log step, evaluation (``best.pt``) or ``final.pt`` after
    the tracker has answered, without waiting for it; it waits only once the run can be
    resumed, at the first of these hooks after a periodic checkpoint (what a resume reads)
    was written, and at the run's end. A run that is not yet resumable never waits for its
    MLflow run. An error of the creation (a tracking server that does not answer:
    ``ConfigError``) is raised there.

    Args:
        tracker: The run's tracker, its run begun (or reopened).
        output_dir: The run directory.
        uri: The tracking URI, as recorded.
        reporter: A sweep's trial reporter (told the run's id: ``link_run``), or None.
        written: The record exists already (a resumed run).
    """

    def __init__(self, tracker: Any, output_dir: Path, uri: str, reporter: Any = None, written: bool = False) -> None:
        self.tracker, self.output_dir, self.uri, self.reporter = tracker, output_dir, uri, reporter
        self.written = written
        self._raised: BaseException | None = None  # the creation's error, once raised from a hook

    def write(self) -> None:
        """Write the record (once); waits for the run's creation and raises its error. A run
        whose creation waits for the tracking server (a sweep's job) is left to its tracker,
        which writes the record when it creates the run."""
        if self.written:
            return
        run_id = self.tracker.started()
        if run_id is None:
            self.written = True
            return
        if self.reporter is not None:
            self.reporter.link_run(run_id)
        write_run_file(self.output_dir, run_id, self.uri, self.tracker.experiment_id)
        self.written = True

    def run_exists(self, finished: bool) -> bool:
        """Whether the run was created (waits for its creation). A creation that failed is
        raised when training finished; when training stopped for another reason (being
        raised), it is reported on stderr, unless it is that reason."""
        try:
            self.tracker.started()
        except Exception as error:
            if finished:
                raise
            if error is not self._raised:
                print(f"rlplat-train: warning: the run was not recorded in MLflow ({error})", file=sys.stderr)
            return False
        return True

    def _write_from_hook(self) -> None:
        try:
            self.write()
        except Exception as error:
            self._raised = error
            raise

    def _write_when_due(self) -> None:
        """Write the record once the tracker has answered, or, waiting for it, once the run
        has a periodic checkpoint (it can be resumed from then on)."""
        if self.written:
            return
        from rlplat.checkpoint import periodic_checkpoints  # torch: only once training runs

        if self.tracker.start_answered() or periodic_checkpoints(self.output_dir):
            self._write_from_hook()

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """A log step: write the record when due."""
        self._write_when_due()

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: an evaluation was logged first."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """``best.pt``: as a log step. ``final.pt``: write the record, waiting for the run."""
        if best:
            self._write_when_due()
        else:
            self._write_from_hook()
