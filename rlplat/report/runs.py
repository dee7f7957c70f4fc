"""Runs read back from an MLflow store, for comparison: which runs, how they group, their curves.

A run is compared by its overrides as typed (tag ``rlplat.overrides``), with its algorithm
and env (tags ``algo`` and ``env``) always among them. Overrides that do not change what is
learned (``seed``, ``tracking.*``, ``checkpoint.*``, ``hydra.*``) are left out, so the runs
of one configuration over several seeds form one group. ``group_by`` names the keys that
make a group instead; the rest, but the seed, then split a group into tasks (strata of the
stratified bootstrap), e.g. ``group_by=algo`` over runs on two envs.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlplat.metrics import DOWNTIME_SECONDS
from rlplat.registry import ConfigError, closest
from rlplat.report.curves import RunCurve
from rlplat.tags import OVERRIDES_TAG, PARENT_TAG, PRUNED_TAG, SOURCE_RUN_TAG, SWEEP_TAG
from rlplat.tracking.settings import check_tracking_uri

IGNORED_PREFIXES = ("seed", "tracking.", "checkpoint.", "hydra.", "resume")
"""Override keys that do not change what a run learns: they never separate groups."""

RUN_ID = re.compile(r"[0-9a-f]{32}")
FILTER_SIGNS = ("=", "<", ">", " like ", " LIKE ", " ilike ", " ILIKE ", " IN ", " in ")


@dataclass(frozen=True)
class Selection:
    """The runs a comparison reads.

    Attributes:
        runs: The FINISHED runs (``mlflow.entities.Run``), in the order found.
        left_out: Runs found but not FINISHED (failed, killed, pruned, running): their count
            by status.
        parent_run_id: The sweep's parent run, when the target was one; None otherwise.
    """

    runs: list[Any]
    left_out: dict[str, int]
    parent_run_id: str | None


def client_for(uri: str) -> Any:
    """An ``MlflowClient`` on ``uri`` that never creates a store.

    Raises:
        ConfigError: for an sqlite store whose file does not exist, is empty or is no
            database, or a URI no store answers to.
    """
    from pathlib import Path

    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    check_tracking_uri(uri)
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
        if not database.is_file() or database.stat().st_size == 0:  # MLflow would make an empty file a store
            raise ConfigError(f"tracking.uri={uri!r}: no MLflow store there (give the store the runs were recorded in)")
    return MlflowClient(tracking_uri=uri)


def _all_experiment_ids(client: Any) -> list[str]:
    return [e.experiment_id for e in client.search_experiments(max_results=10000)]


def _children(client: Any, run: Any) -> list[Any]:
    query = f"tags.`{PARENT_TAG}` = '{run.info.run_id}'"
    return list(client.search_runs([run.info.experiment_id], filter_string=query, max_results=50000))


def _is_parent(run: Any) -> bool:
    """A sweep's parent run: tagged with its sweep, not nested under another run."""
    tags = run.data.tags
    return SWEEP_TAG in tags and PARENT_TAG not in tags


def _is_training_run(run: Any) -> bool:
    """A run that trained: neither a sweep's parent run nor an ``rlplat-eval`` run (tagged
    with the run whose checkpoint it evaluated)."""
    return not _is_parent(run) and SOURCE_RUN_TAG not in run.data.tags


def select_runs(client: Any, targets: Sequence[str]) -> Selection:
    """The runs named by ``targets``, each one of:

    * a run id: a sweep's parent run gives its child runs, any other run itself;
    * an experiment name (or id): its training runs (not sweeps' parent runs, nor the runs of
      ``rlplat-eval``, which re-evaluate a training run's checkpoint);
    * a search filter in MLflow's syntax, e.g. ``"tags.algo = 'ppo'"``: the matching training
      runs of every experiment.

    Args:
        client: An ``mlflow.MlflowClient`` on the store.
        targets: What the user typed, one or more.

    Returns:
        The FINISHED runs, each once, and the count of the others by status.

    Raises:
        ConfigError: for a target that names nothing in the store, a bad filter, or no
            FINISHED run at all.
    """
    found: dict[str, Any] = {}
    parent_ids = []
    for target in targets:
        runs, is_parent = _target_runs(client, target)
        if is_parent:
            parent_ids.append(target)
        if not runs:
            raise ConfigError(f"{target!r}: no runs")
        for run in runs:
            found.setdefault(run.info.run_id, run)
    finished = [r for r in found.values() if r.info.status == "FINISHED"]
    left_out: dict[str, int] = {}
    for run in found.values():
        if run.info.status != "FINISHED":
            status = "PRUNED" if run.data.tags.get(PRUNED_TAG) == "true" else run.info.status
            left_out[status] = left_out.get(status, 0) + 1
    if not finished:
        counts = ", ".join(f"{n} {s}" for s, n in left_out.items())
        raise ConfigError(f"{' '.join(targets)}: no FINISHED run to compare ({counts})")
    return Selection(finished, left_out, parent_ids[0] if len(parent_ids) == 1 and len(targets) == 1 else None)


def _target_runs(client: Any, target: str) -> tuple[list[Any], bool]:
    """The runs one target of :func:`select_runs` names, and whether it is a sweep's parent run."""
    from mlflow.exceptions import MlflowException

    if RUN_ID.fullmatch(target):
        try:
            run = client.get_run(target)
        except MlflowException:
            raise ConfigError(f"run {target!r}: no such run in {client.tracking_uri}") from None
        children = _children(client, run) if _is_parent(run) else []
        return children or [run], bool(children)
    if (experiment := _experiment(client, target)) is not None:
        runs = client.search_runs([experiment.experiment_id], max_results=50000)
        return [r for r in runs if _is_training_run(r)], False
    if any(sign in target for sign in FILTER_SIGNS):
        try:
            runs = client.search_runs(_all_experiment_ids(client), filter_string=target, max_results=50000)
        except MlflowException as error:
            message = " ".join(str(error.message).split())
            raise ConfigError(f"filter {target!r}: {message}") from None
        return [r for r in runs if _is_training_run(r)], False
    names = [e.name for e in client.search_experiments(max_results=10000)]
    suggestion = closest(target, names)
    hint = f" Did you mean {suggestion!r}?" if suggestion else ""
    raise ConfigError(
        f"{target!r} is no run id, experiment or search filter in {client.tracking_uri} "
        f"(experiments: {', '.join(names) or 'none'}).{hint}"
    )


def _experiment(client: Any, target: str) -> Any:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(target)
    if experiment is None and target.isdigit():
        try:
            experiment = client.get_experiment(target)
        except MlflowException:
            return None
    return experiment


def run_overrides(run: Any) -> dict[str, str]:
    """A run's overrides that can change what it learns, key -> value, with its algo and env.

    Read from the ``rlplat.overrides`` tag, or for older runs from the ``command`` tag; keys
    of :data:`IGNORED_PREFIXES` are dropped; ``algo`` and ``env`` come first, from the run's
    tags when not overridden.
    """
    tags = run.data.tags
    if OVERRIDES_TAG in tags:
        words = tags[OVERRIDES_TAG].split()
    else:
        words = shlex.split(tags.get("command", ""))[1:]
    pairs: dict[str, str] = {}
    for key in ("algo", "env"):
        if key in tags:
            pairs[key] = tags[key]
    for word in words:
        key, sep, value = word.lstrip("+~").partition("=")
        if sep and not key.startswith(IGNORED_PREFIXES):
            pairs[key] = value
    return pairs


def _value(run: Any, key: str, overrides: Mapping[str, str]) -> str | None:
    """``key`` of a run: its tag, else its param (the flattened config), else its override."""
    for source in (run.data.tags, run.data.params, overrides):
        if key in source:
            return str(source[key])
    return None


def group_runs(runs: Sequence[Any], group_by: Sequence[str] | None) -> list[tuple[Any, str, str]]:
    """Each run with its group's label and its task's label.

    Args:
        runs: The runs (``mlflow.entities.Run``).
        group_by: Keys that make a group (tags, params or overrides, e.g. ``algo``,
            ``optim.lr``); None groups by every override but the seed, with one task.

    Returns:
        ``(run, group, task)`` per run; labels read ``key=value key=value``. A task label is
        the run's other overrides when ``group_by`` is given ("" when they are all alike).

    Raises:
        ConfigError: for a ``group_by`` key that no run has.
    """
    labelled = []
    for run in runs:
        overrides = run_overrides(run)
        if group_by is None:
            labelled.append((run, " ".join(f"{k}={v}" for k, v in overrides.items()), ""))
            continue
        parts = []
        for key in group_by:
            value = _value(run, key, overrides)  # a param's list reads "[0.9, 0.999]": one word, as typed
            parts.append(f"{key}={''.join(str(value).split()) if value is not None else '-'}")
        rest = " ".join(f"{k}={v}" for k, v in overrides.items() if k not in group_by)
        labelled.append((run, " ".join(parts), rest))
    if group_by is not None:
        for index, key in enumerate(group_by):
            if all(label.split(" ")[index].endswith("=-") for _, label, _ in labelled):
                known = sorted({k for run in runs for k in (*run.data.tags, *run_overrides(run))})
                known = [k for k in known if not k.startswith(("mlflow.", "rlplat.", "git."))]
                suggestion = closest(key, known + sorted(runs[0].data.params))
                hint = f" Did you mean {suggestion!r}?" if suggestion else ""
                raise ConfigError(
                    f"group_by={','.join(group_by)}: no run has {key!r} as a tag, param or override "
                    f"(e.g. {', '.join(known[:8])}).{hint}"
                )
        tasks = {task for _, _, task in labelled}
        if len(tasks) == 1:
            labelled = [(run, group, "") for run, group, _ in labelled]
    return labelled


def metric_value(stored: float) -> float:
    """A metric's value as logged: MLflow's sqlite store keeps +-inf as the largest float (e.g.
    ``time/to_target_s`` of a run that never reached its target), made infinite again."""
    return math.copysign(math.inf, stored) if abs(stored) >= sys.float_info.max else stored


def downtime(client: Any, run: Any) -> Callable[[int], float]:
    """The seconds ``run`` was down (stopped, then resumed: :data:`rlplat.metrics.DOWNTIME_SECONDS`)
    before a time, given in ms since the epoch; 0 for a run never resumed."""
    if DOWNTIME_SECONDS not in run.data.metrics:
        return lambda timestamp_ms: 0.0
    resumes = sorted((m.timestamp, m.value) for m in client.get_metric_history(run.info.run_id, DOWNTIME_SECONDS))
    times = [timestamp for timestamp, _ in resumes]
    return lambda timestamp_ms: resumes[i - 1][1] if (i := bisect.bisect_right(times, timestamp_ms)) else 0.0


def read_curves(client: Any, labelled: Iterable[tuple[Any, str, str]], metric: str) -> list[RunCurve]:
    """Each run's history of ``metric``: frames, wall seconds since the run started, values.
    A resumed run's seconds leave out the time it was down (:func:`downtime`).

    Raises:
        ConfigError: when no run logged ``metric`` (naming the metrics they did log).
    """
    curves = []
    for run, group, task in labelled:
        history = sorted(client.get_metric_history(run.info.run_id, metric), key=lambda m: (m.step, m.timestamp))
        start = run.info.start_time
        end = run.info.end_time or start
        down = downtime(client, run)
        seed = run.data.tags.get("seed", run.data.params.get("seed", "-1"))
        curves.append(
            RunCurve(
                run_id=run.info.run_id,
                group=group,
                task=task,
                seed=int(seed) if seed.lstrip("-").isdigit() else -1,
                frames=np.array([m.step for m in history], dtype=np.int64),
                seconds=np.array([(m.timestamp - start) / 1000 - down(m.timestamp) for m in history], dtype=np.float64),
                values=np.array([metric_value(m.value) for m in history], dtype=np.float64),
                wall_seconds=(end - start) / 1000 - down(end),
            )
        )
    if all(len(c.values) == 0 for c in curves):
        logged = sorted({k for run, _, _ in labelled for k in run.data.metrics})
        suggestion = closest(metric, logged)
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        raise ConfigError(f"metric={metric!r}: no run logged it (logged: {', '.join(logged)}).{hint}")
    return [c for c in curves if len(c.values) and not math.isnan(c.final)]
