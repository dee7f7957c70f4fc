"""What a run could not record while its tracking server was away, kept in its run directory.

A :class:`rlplat.tracking.store.Tracker` that still cannot reach its server when the run ends
writes :data:`PENDING_FILE` into the run directory: the run's creation (when the run began
while the server was away), the params, tags, metric values (each with its step and
timestamp) and artifacts not yet written, and the run's end (status and time). ``rlplat-sync``
and a sweep's end record it (:mod:`rlplat.tracking.sync`) once the server answers.

This module imports neither MLflow nor torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlplat.registry import ConfigError

PENDING_FILE = "mlflow-pending.json"
"""In a run directory: what the run kept for its tracking server (see :class:`KeptRun`)."""

FORMAT = 1  # the file's format version
SWEEP_JOB_END_FLUSH_S = 5.0
"""Seconds a sweep's job tries, at its end, to write what waits for the tracking server
before keeping it here (a single run tries for 30 s): the sweep's end records what is left."""


@dataclass
class PendingRun:
    """A run begun while its tracking server was away: what creating it takes.

    Attributes:
        name: The run's name.
        tags: Its tags at creation.
        start_time: When it started, in ms since the epoch.
    """

    name: str
    tags: dict[str, str]
    start_time: int


@dataclass
class KeptRun:
    """The contents of :data:`PENDING_FILE`.

    Attributes:
        uri: The tracking URI the run records to.
        experiment: The experiment's name (created when missing).
        artifact_location: Artifact directory of a newly created experiment, or None.
        run_id: The MLflow run, when it exists; None when ``create`` says how to create it.
        create: The run's creation, when it never happened.
        params: Params not yet logged.
        tags: Tags not yet set.
        metrics: Metric values not yet logged, oldest first: ``[key, value, timestamp (ms), step (frames)]``.
        artifacts: Files or directories not yet uploaded: ``[path, artifact path or None]``.
        status: The run's end status (FINISHED, FAILED, KILLED).
        end_time: When it ended, in ms since the epoch.
    """

    uri: str
    experiment: str
    artifact_location: str | None
    run_id: str | None
    create: PendingRun | None
    status: str
    end_time: int
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)})

    @classmethod
    def from_json(cls, text: str) -> KeptRun:
        """Raises ValueError, KeyError or TypeError for a file in no known format."""
        data: dict[str, Any] = json.loads(text)
        if data.pop("format", None) != FORMAT:
            raise ValueError(f"not format {FORMAT}")
        create = data.pop("create")
        return cls(
            **{k: v for k, v in data.items() if k not in ("metrics", "artifacts")},
            create=None if create is None else PendingRun(**create),
            metrics=[(str(k), float(v), int(t), int(s)) for k, v, t, s in data["metrics"]],
            artifacts=[(str(p), a) for p, a in data["artifacts"]],
        )


def save_pending(run_dir: Path, kept: KeptRun) -> Path:
    """Write ``kept`` as the run directory's :data:`PENDING_FILE` (atomically); returns its path.

    Raises:
        OSError: when it cannot be written.
    """
    path = Path(run_dir) / PENDING_FILE
    partial = path.with_name(f".{PENDING_FILE}.{os.getpid()}")
    partial.write_text(kept.to_json())
    os.replace(partial, path)
    return path


def load_pending(path: Path) -> KeptRun:
    """Read a :data:`PENDING_FILE`.

    Raises:
        ConfigError: when it cannot be read, or is no such file.
    """
    try:
        return KeptRun.from_json(Path(path).read_text())
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{str(path)!r} is no {PENDING_FILE} rlplat can read ({error})") from error


def pending_files(root: Path) -> list[Path]:
    """The :data:`PENDING_FILE` of ``root`` (a run directory) and of the directories under it
    (a sweep's jobs, a folder of runs), sorted."""
    return sorted(Path(root).rglob(PENDING_FILE))
