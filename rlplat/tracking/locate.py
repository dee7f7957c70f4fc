"""Find a run's checkpoint from what a user types: a run id, a run directory or a checkpoint
file (``rlplat-eval``, ``rlplat-record``, ``rlplat-train resume=``, and a loss add-on's
reference run, ``loss.addons.<name>.source``, which :mod:`rlplat.build` loads: so it lives
below the build, not in the command-line layer)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlplat.checkpoint import CHECKPOINT_DIR, FINAL, CheckpointError, load_checkpoint, load_newest
from rlplat.registry import ConfigError
from rlplat.tracking.records import read_run_file, run_tags, write_run_file

SWEEP_FILE = "multirun.yaml"
"""Hydra's basic sweeper writes it at the top of its sweep directory, before the first job starts."""


@dataclass(frozen=True)
class Located:
    """A run's checkpoint and where the run is recorded.

    Attributes:
        checkpoint: The checkpoint file that was read.
        state: Its contents (see :mod:`rlplat.checkpoint`).
        run_dir: The run directory, when known.
        run_id: The MLflow run, when the run was recorded.
        tracking_uri: The store holding that run.
    """

    checkpoint: Path
    state: dict[str, Any]
    run_dir: Path | None
    run_id: str | None
    tracking_uri: str | None


def _no_sqlite_store(tracking_uri: str) -> bool:
    """Whether ``tracking_uri`` names an sqlite store whose file does not exist (opening it
    would create it)."""
    if not tracking_uri.startswith("sqlite:///"):
        return False
    return not Path(tracking_uri.removeprefix("sqlite:///").split("?", 1)[0]).is_file()


def with_source_run(located: Located) -> tuple[Located, str | None]:
    """``located``, without its run when that run's store no longer holds it (an sqlite file
    deleted or moved, or a run directory copied from another machine), and why, to say; else
    ``located`` as it is and None. Opening a missing sqlite file would create an empty store."""
    import dataclasses

    if located.run_id is None or located.tracking_uri is None:
        return located, None
    if not _no_sqlite_store(located.tracking_uri) and _holds_run(located.tracking_uri, located.run_id):
        return located, None
    why = f"its run {located.run_id} is not in {located.tracking_uri} (the store its run directory recorded)"
    return dataclasses.replace(located, run_id=None, tracking_uri=None), why


def _holds_run(tracking_uri: str, run_id: str) -> bool:
    """Whether the store holds the run (its other errors, such as a server that does not
    answer, are raised)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        MlflowClient(tracking_uri=tracking_uri).get_run(run_id)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        return False
    return True


def run_dir_of(key: str, run_id: str, tracking_uri: str) -> Path:
    """The run directory of an MLflow run, from its ``RUN_DIR_TAG`` tag.

    Raises:
        ConfigError: when the store has no such run, or the run has no run directory here.
    """
    import logging

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # no store-creation chatter on the console
    if _no_sqlite_store(tracking_uri):
        raise ConfigError(f"{key}={run_id!r}: no run with this id: there is no store at {tracking_uri}")
    try:
        run = MlflowClient(tracking_uri=tracking_uri).get_run(run_id)
    except MlflowException as error:
        raise ConfigError(
            f"{key}={run_id!r}: no run with this id in {tracking_uri} (give a run id, a run directory or a "
            "checkpoint file; tracking.uri=... names another store)"
        ) from error
    from rlplat.tags import PARENT_TAG, RUN_DIR_TAG, SOURCE_RUN_TAG, SWEEP_TAG

    run_dir = run.data.tags.get(RUN_DIR_TAG)
    if not run_dir and SWEEP_TAG in run.data.tags and PARENT_TAG not in run.data.tags:
        sweep = run.data.tags[SWEEP_TAG]
        raise ConfigError(
            f"{key}={run_id!r} is a sweep's parent run, which has no checkpoint: give one of its jobs' runs, "
            f"or resume the sweep with resume={sweep}"
        )
    if not run_dir and SOURCE_RUN_TAG in run.data.tags:
        source = run.data.tags[SOURCE_RUN_TAG]
        raise ConfigError(f"{key}={run_id!r} is an evaluation of run {source}, which has no checkpoint: give {source}")
    if not run_dir or not Path(run_dir).is_dir():
        raise ConfigError(f"{key}={run_id!r}: the run's directory {run_dir!r} is not on this machine")
    return Path(run_dir)


def run_of_dir(run_dir: Path, tracking_uri: str, experiment: str) -> tuple[str, str] | None:
    """``(run id, experiment id)`` of the MLflow run whose ``RUN_DIR_TAG`` is ``run_dir``,
    for a run directory without a :data:`RUN_FILE`: its process was killed after its first
    checkpoint and before the record was written (the run itself is created beside the
    training, by the tracker's process, which outlives it). None when the store, the
    experiment or such a run does not exist (the newest when there are several).
    """
    import logging

    from mlflow import MlflowClient

    from rlplat.tags import RUN_DIR_TAG
    from rlplat.tracking.store import store_lock

    if _no_sqlite_store(tracking_uri):
        return None
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    with store_lock(tracking_uri):  # a killed run's tracker may still be creating the store
        client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    wanted = str(Path(run_dir).resolve())
    quote = "'" if "'" not in wanted else '"'
    runs = client.search_runs(
        [found.experiment_id],
        filter_string=f"tags.`{RUN_DIR_TAG}` = {quote}{wanted}{quote}",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return (runs[0].info.run_id, found.experiment_id) if runs else None


def locate(
    key: str, target: str, tracking_uri: str, which: Literal["final", "newest"] = "final", warn: Any = None
) -> Located:
    """Resolve ``target`` (a checkpoint file, a run directory or a run id) to a checkpoint.

    Args:
        key: How the user gave it, for messages (``resume``, ``run``).
        target: What the user typed.
        tracking_uri: Store to look a run id up in.
        which: ``final``: a run directory's ``final.pt`` when it has one, else its newest
            periodic checkpoint (evaluation); ``newest``: the newest readable periodic
            checkpoint (resume).
        warn: Called with a message when an unreadable checkpoint is skipped.

    Raises:
        ConfigError: for a target that is none of these, or a run without a readable
            checkpoint (:class:`~rlplat.checkpoint.CheckpointError`).
    """
    path = Path(target).expanduser()
    if path.is_file():
        state = load_checkpoint(path)
        run_dir = path.parent.parent if path.parent.name == CHECKPOINT_DIR else None
        return _located(path, state, run_dir)
    if not path.is_dir():
        if "/" in target or target.endswith(".pt"):
            raise ConfigError(f"{key}={target!r}: no such file or directory")
        path = run_dir_of(key, target, tracking_uri)
        run = (target, tracking_uri)  # the run found, whether or not its directory recorded it
    else:
        run = None
    final = path / CHECKPOINT_DIR / FINAL
    if which == "final" and final.is_file():
        return _located(final, load_checkpoint(final), path, run)
    try:
        checkpoint, state = load_newest(path, warn)
    except CheckpointError as error:
        raise CheckpointError(f"{key}={target!r}: {error}") from error
    return _located(checkpoint, state, path, run)


def locate_run(target: str, tracking_uri: str) -> Located:
    """:func:`locate` for evaluation (``final.pt`` first; ``rlplat-eval``, ``rlplat-record``),
    which never creates a store: a run id given for an sqlite store that does not exist is an
    error. A checkpoint skipped as unreadable is a ``warning:`` line on stderr.

    Raises:
        ConfigError: for a target that is no checkpoint, run directory or known run id, or a
            checkpoint that cannot be read.
    """
    if not target:
        raise ConfigError("run='': give a run id, a run directory or a checkpoint file")
    looks_like_id = not Path(target).expanduser().exists() and "/" not in target and not target.endswith(".pt")
    if looks_like_id and _no_sqlite_store(tracking_uri):
        raise ConfigError(
            f"run={target!r}: no such file or directory, and no MLflow store at {tracking_uri} to look a run "
            "id up in (give a run id, a run directory or a checkpoint file; tracking.uri=... names a store)"
        )
    return locate("run", target, tracking_uri, which="final", warn=lambda m: print(f"warning: {m}", file=sys.stderr))


def _located(
    checkpoint: Path, state: dict[str, Any], run_dir: Path | None, run: tuple[str, str] | None = None
) -> Located:
    """``run`` (id, store) when the run was looked up by id; else the run directory's record."""
    record = read_run_file(run_dir) if run_dir is not None else {}
    run_id, uri = run or (record.get("run_id"), record.get("tracking_uri"))
    return Located(checkpoint, state, run_dir, run_id, uri)


def run_to_continue(
    located: Located, tracking: Any, target: str, warn: Callable[[str], None]
) -> tuple[str | None, dict[str, str]]:
    """The MLflow run a resume continues, and the tags of a new one when there is none: a run
    directory killed before it recorded its run (``rlplat_run.json``) continues the run that
    carries its directory in its tags, else a new run (with a warning)."""
    assert located.run_dir is not None
    if read_run_file(located.run_dir):
        return located.run_id, {}
    found = run_of_dir(located.run_dir, tracking.uri, tracking.experiment)
    if found is not None:
        write_run_file(located.run_dir, found[0], tracking.uri, found[1])
        return found[0], {}
    warn(
        f"{located.run_dir} has no MLflow run in {tracking.uri} (stopped before one was created): "
        "the resumed run is recorded as a new run"
    )
    return located.run_id, new_run_tags(located.state["config"], located.run_dir, target)


def new_run_tags(config: Any, run_dir: Path, target: str) -> dict[str, str]:
    """The tags of a new MLflow run for a resumed run directory that has none: algo and env
    as Hydra chose them (its ``.hydra/hydra.yaml``), else the loss's name and the env's id."""
    from omegaconf import OmegaConf

    from rlplat import __version__
    from rlplat.envs.probe import EnvSpec

    choices: dict[str, Any] = {}
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        choices = dict(OmegaConf.load(hydra_file).hydra.runtime.choices)
    algo = str(choices.get("algo") or config["loss"]["name"])
    env = str(choices.get("env") or EnvSpec.from_node(config["env"]).title)
    return run_tags(algo, env, int(config["seed"]), __version__, f"rlplat-train resume={target}", Path.cwd())
