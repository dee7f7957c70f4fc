"""The run's own settings: the ``trainer``, ``checkpoint`` and ``tracking`` nodes.

Light on purpose (no torch, no MLflow): ``rlplat-train`` checks these nodes right after
composing the config, before any heavy import, so that a wrong type or an out-of-range
value is reported within a second. Each dataclass's defaults live in conf/config.yaml
only, with each key's meaning and unit; frames are env steps summed over all envs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, cast

from omegaconf import OmegaConf

from rlplat.registry import ConfigError, check_kwargs, preset_node

DEVICES = ("cpu", "cuda", "auto")
LR_SCHEDULES = ("constant", "linear")
TO_TARGET = "time/to_target_s"  # training seconds until an evaluation reached trainer.target_return
TRAIN_SECONDS = "time/train_s"  # training seconds so far (not the loop's callbacks'), logged at every log step
DOWNTIME_SECONDS = "time/downtime_s"
"""Seconds a resumed run was down, summed over its resumes: from the end of the process that
stopped (the run's end time, else its last logged metric) to the start of the one that resumed
it; logged at each resume, timestamped at that start. Wall times subtract it."""
LOWER_IS_BETTER = frozenset({TO_TARGET})
"""Metrics that are better lower: reports rank them lowest first."""
FINAL_METRICS = (
    "eval/return_mean",
    "eval/return_std",
    "eval/return_min",
    "eval/return_max",
    "eval/episode_length",
    "rollout/return_mean",
    "rollout/return_std",
    "rollout/return_min",
    "rollout/return_max",
    "rollout/episode_length",
    "time/fps",
    TO_TARGET,
)
"""The metrics a run ends with (their last values): the end-of-run table, and what
``trainer.objective`` may name."""
NONFINITE = ("raise", "skip_update")

Settings = TypeVar("Settings", bound="_Node")


def check_int(key: str, value: Any, minimum: int) -> None:
    """Raise ConfigError unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")


def check_choice(key: str, value: Any, valid: tuple[str, ...]) -> None:
    """Raise ConfigError unless ``value`` is one of ``valid``."""
    if value not in valid:
        raise ConfigError(f"{key}={value!r}: valid: {', '.join(valid)}")


class _Node:
    """A config node checked against its dataclass: keys (naming the valid ones), then values."""

    NODE = ""

    @classmethod
    def from_node(cls: type[Settings], node: Any) -> Settings:
        """Build from the node (a DictConfig or a mapping).

        Raises:
            ConfigError: for an unknown or missing key, or a bad value.
        """
        values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        if not isinstance(values, Mapping):
            names = ", ".join(f.name for f in fields(cast(Any, cls)))
            raise ConfigError(f"{cls.NODE}={values!r}: must be a mapping of {names}")
        kwargs = {str(k): v for k, v in values.items()}
        check_kwargs(cls.NODE, cls, kwargs)
        return cls(**kwargs)


@dataclass(frozen=True)
class TrainerConfig(_Node):
    """The ``trainer`` node: budget, device, schedules of evaluation, logging and videos."""

    NODE = "trainer"
    total_frames: int
    device: str
    num_threads: int
    lr_schedule: str
    eval_every_frames: int
    eval_episodes: int
    log_every_frames: int
    objective: str
    nonfinite: str
    record_every_frames: int
    compile: bool = False
    target_return: float | None = None
    accel: bool = True

    def __post_init__(self) -> None:
        for key in ("compile", "accel"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"trainer.{key}={getattr(self, key)!r}: must be true or false")
        target = self.target_return
        if target is not None and (isinstance(target, bool) or not isinstance(target, int | float) or target != target):
            raise ConfigError(f"trainer.target_return={target!r}: must be a number, or null to train for total_frames")
        for key, minimum in (
            ("total_frames", 1),
            ("num_threads", 1),
            ("eval_every_frames", 0),
            ("eval_episodes", 1),
            ("log_every_frames", 0),
            ("record_every_frames", 0),
        ):
            check_int(f"trainer.{key}", getattr(self, key), minimum)
        # videos are recorded at log steps: every log_every_frames, and at each evaluation
        cadence = min(self.log_every_frames, self.eval_every_frames or self.log_every_frames)
        if 0 < self.record_every_frames < cadence:
            raise ConfigError(
                f"trainer.record_every_frames={self.record_every_frames}: videos are recorded at log steps, which "
                f"come every {cadence} frames (trainer.log_every_frames={self.log_every_frames}, and at "
                f"evaluations: trainer.eval_every_frames={self.eval_every_frames}); give at least {cadence}, or "
                "lower trainer.log_every_frames"
            )
        for key, valid in (
            ("device", DEVICES),
            ("lr_schedule", LR_SCHEDULES),
            ("objective", FINAL_METRICS),
            ("nonfinite", NONFINITE),
        ):
            check_choice(f"trainer.{key}", getattr(self, key), valid)


@dataclass(frozen=True)
class CheckpointConfig(_Node):
    """The ``checkpoint`` node: when checkpoints are written and how many are kept."""

    NODE = "checkpoint"
    every_frames: int
    keep: int
    save_buffer: bool

    def __post_init__(self) -> None:
        check_int("checkpoint.every_frames", self.every_frames, 0)
        check_int("checkpoint.keep", self.keep, 1)
        if not isinstance(self.save_buffer, bool):
            raise ConfigError(f"checkpoint.save_buffer={self.save_buffer!r}: must be true or false")


LOGGERS = ("csv", "tensorboard")
"""Loggers beside MLflow (``tracking.also``): files under the run directory (:mod:`rlplat.loggers`)."""


@dataclass(frozen=True)
class TrackingConfig(_Node):
    """The ``tracking`` node: where the run is recorded, and the loggers beside MLflow."""

    NODE = "tracking"
    enabled: bool
    uri: str
    artifact_location: str | None
    experiment: str
    run_name: str | None
    also: tuple[str, ...] = ()
    end_wait_s: float = 30.0

    def __post_init__(self) -> None:
        wait = self.end_wait_s
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < float("inf"):
            raise ConfigError(f"tracking.end_wait_s={wait!r}: must be 0 or more seconds, e.g. 30")
        also = self.also
        if isinstance(also, str) or not isinstance(also, list | tuple):
            raise ConfigError(f"tracking.also={also!r}: must be a list of {', '.join(LOGGERS)}, e.g. [csv]")
        for name in also:
            if name not in LOGGERS:
                raise ConfigError(f"tracking.also={list(also)!r}: {name!r} is no logger; valid: {', '.join(LOGGERS)}")
        object.__setattr__(self, "also", tuple(dict.fromkeys(also)))
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"tracking.enabled={self.enabled!r}: must be true or false")
        if self.enabled and not (isinstance(self.uri, str) and self.uri):
            raise ConfigError("tracking.uri is empty: give an MLflow tracking URI, or tracking.enabled=false")
        if self.enabled and not (isinstance(self.experiment, str) and self.experiment):
            raise ConfigError("tracking.experiment is empty: give an experiment name")
        if self.enabled:
            check_tracking_uri(self.uri)
            object.__setattr__(self, "uri", absolute_sqlite_uri(self.uri))


TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")
"""URI schemes of MLflow's own tracking stores (a database scheme may name its driver:
``postgresql+psycopg2://``); plugins add theirs (entry-point group ``mlflow.tracking_store``).
MLflow 3 refuses ``file:`` stores (and plain paths) unless ``MLFLOW_ALLOW_FILE_STORE=true``."""


def _scheme(uri: str) -> str:
    """``uri``'s scheme, lower case and without a driver (``postgresql+psycopg2`` ->
    ``postgresql``); a bare name such as ``databricks`` is its own scheme; "" for a path."""
    if "://" in uri:
        return uri.split("://", 1)[0].split("+", 1)[0].lower()
    return uri.lower() if uri.lower() in TRACKING_SCHEMES else ""


def check_tracking_uri(uri: str) -> None:
    """Raise ConfigError for a ``tracking.uri`` no MLflow store answers to, before anything
    is trained (MLflow itself would refuse it only when the run is created)."""
    scheme = _scheme(uri)
    if scheme == "sqlite" and uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
        with contextlib.suppress(OSError):  # a path that cannot be opened is reported where it is written
            if database.is_file() and database.stat().st_size and not _is_sqlite(database):
                raise ConfigError(
                    f"tracking.uri={uri!r}: {str(database)!r} is a file but not an SQLite database; "
                    "give an MLflow store's database or a new file"
                )
    if scheme in TRACKING_SCHEMES:
        return
    if scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("true", "1"):
            return
        raise ConfigError(
            f"tracking.uri={uri!r}: MLflow 3 refuses file stores (maintenance mode; MLFLOW_ALLOW_FILE_STORE=true "
            "opts out); give a database store, e.g. tracking.uri=sqlite:///outputs/mlflow.db"
        )
    from importlib.metadata import entry_points

    if scheme in {entry.name for entry in entry_points(group="mlflow.tracking_store")}:
        return  # a plugin's store
    raise ConfigError(
        f"tracking.uri={uri!r}: no MLflow store has the scheme {scheme!r}; valid: "
        f"{', '.join(s + '://' for s in TRACKING_SCHEMES[:6])}, databricks, or a plugin's"
    )


def _is_sqlite(path: Path) -> bool:
    """Whether the file at ``path`` starts with SQLite's header."""
    with path.open("rb") as file:
        return file.read(16) == b"SQLite format 3\x00"


def absolute_sqlite_uri(uri: str) -> str:
    """``uri`` with a relative sqlite path made absolute from the working directory, so that
    the run's record (``rlplat_run.json``) and the printed resume command find the same store
    from any directory; any other URI as it is."""
    if "://" not in uri or _scheme(uri) != "sqlite":
        return uri
    prefix, rest = uri.split("://", 1)
    path = rest.removeprefix("/")  # sqlite:///<path>: relative; sqlite:////<path>: absolute
    if not rest.startswith("/") or path.startswith("/") or path.split("?", 1)[0] in ("", ":memory:"):
        return uri
    return f"{prefix}:///{Path.cwd() / path}"


MAX_SEED = 2**32 - 1
"""The largest seed numpy's generators take."""


def check_seed(seed: Any) -> int:
    """The run's seed; raises ConfigError unless it is an integer in [0, 2^32 - 1]."""
    check_int("seed", seed, 0)
    if seed > MAX_SEED:
        raise ConfigError(f"seed={seed}: must be at most 2^32 - 1 = {MAX_SEED}")
    return int(seed)


def group_optimizer_settings(shared: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer settings of a parameter group with a sub-node ``optim.<group>``.

    The sub-node's keys over the shared settings (``optim``'s other keys); but a sub-node
    that names another optimizer (``optim.critic.name=rmsprop`` under Adam) starts from that
    optimizer's own defaults (``conf/optim/<name>.yaml``) instead: the shared keys belong to
    the shared optimizer (Adam's betas mean nothing to RMSprop).

    Args:
        shared: ``optim``'s keys that are not sub-nodes.
        own: The group's sub-node.

    Returns:
        The settings of the group's optimizer, ``name`` included.
    """
    name = own.get("name", shared.get("name"))
    if name == shared.get("name"):
        return {**shared, **own}
    return {**(preset_node("optim", str(name)) or {}), **own}
