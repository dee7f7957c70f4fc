"""The ``tracking`` node's settings: where a run is recorded, checked before anything is
trained (no MLflow imported), and the loggers beside MLflow."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from rlplat.registry import ConfigError
from rlplat.settings import SettingsNode

LOGGERS = ("csv", "tensorboard")
"""Loggers beside MLflow (``tracking.also``): files under the run directory (:mod:`rlplat.loggers`)."""


@dataclass(frozen=True)
class TrackingConfig(SettingsNode):
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
        super().__post_init__()
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
