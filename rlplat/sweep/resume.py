"""``rlplat-train resume=<sweep dir>``: a sweep's unfinished jobs resumed, its never-started
jobs started, and its end recorded as a sweep's end is.

Jobs whose run FINISHED are skipped, the others resume one after another (each as
``resume=<job dir>``, with the resume the command line gives: :func:`resume_sweep`), and under
Hydra's basic sweeper the jobs that never reached a checkpoint are started as single runs,
each its sweep's child; then the job table, the report, and the parent ends FINISHED.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rlplat.checkpoint import CHECKPOINT_DIR
from rlplat.registry import ConfigError, PluginError
from rlplat.signals import wait_forwarding_signals
from rlplat.sweep.runs import ENV_SWEEP_JOB, SWEEP_TAG, ParentRun
from rlplat.tags import JOB_TAG, PARENT_TAG, RESTARTED_TAG
from rlplat.tracking.locate import SWEEP_FILE
from rlplat.tracking.records import read_run_file


def _warn(message: str) -> None:
    print(f"rlplat-train: warning: {message}", file=sys.stderr)


def resume_sweep(sweep_dir: Path, resume_job: Callable[[str, str], None]) -> int:
    """Resume a sweep: what its jobs kept while the tracking server was away is recorded;
    each job with a checkpoint and an unfinished run resumes (one whose run FINISHED is
    skipped); under Hydra's basic sweeper, the jobs that never reached a checkpoint (or never
    started) are started, each as its sweep's child run; then, as at a sweep's end, the job
    table, ``jobs.csv``, the report, and the parent ends FINISHED. Returns 0, or 1 when a job
    failed again. ``resume_job(job directory, store of its record)`` resumes one job
    (:func:`rlplat.cli.resume.resume_run`).

    Raises:
        SystemExit: 130 or 143 when a signal stops a job (its run ends KILLED, the command to
            resume the sweep is printed); the jobs after it wait for that command.
    """
    from omegaconf import OmegaConf

    config = OmegaConf.load((sweep_dir := _record_kept_runs(sweep_dir.resolve())) / SWEEP_FILE)
    planned, unplanned = basic_sweep_jobs(config)  # None, and why: the jobs cannot be listed ahead
    existing = sorted(int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    numbers = sorted({*existing, *range(len(planned))}) if planned is not None else existing
    parents: dict[str, tuple[str, Any]] = {}  # parent run id -> (store, run)
    failed, to_start, unfinished = 0, [], 0
    for number in numbers:
        job = sweep_dir / str(number)
        record = read_run_file(job)
        run = recorded_run(record, parents) if record else None
        if run is not None and run.info.status == "FINISHED":
            print(f"rlplat-train: job {number} finished already ({record['run_id']})", file=sys.stderr)
            continue
        unfinished += 1
        if not any((job / CHECKPOINT_DIR).glob("step_*.pt")):
            to_start.append((number, record))
            continue
        # a job without a record but with a checkpoint was killed before it recorded its run:
        # resume_run finds the run by its directory (the URI is only for run ids)
        try:
            resume_job(str(job), record.get("tracking_uri", ""))
        except (ConfigError, PluginError) as error:
            _warn(f"job {number} not resumed: {error}")
            failed += 1
        except SystemExit as error:  # the job failed after its one line (a NaN: run.py); a signal stops all
            if error.code in (130, 143):
                raise
            _warn(f"job {number} failed again (exit status {error.code})")
            failed += 1
        if not record and (written := read_run_file(job)):  # the record the resume wrote
            recorded_run(written, parents)
    if planned is None and (unfinished or not existing):
        _warn(f"{unplanned}: the jobs that never started are not started")
    if to_start and planned is None:
        _warn(f"jobs {', '.join(str(n) for n, _ in to_start)} never reached a checkpoint: not resumed")
        failed += 1
    elif planned is not None and to_start:
        if not parents and config.tracking.get("enabled", True):
            _warn("no job recorded the sweep's parent run: the jobs started now are not nested under it")
        parent = next(iter(parents.items()), None)
        for number, first in to_start:
            failed += start_job(config, sweep_dir, number, planned[number], parent, first)
    for parent_id, (uri, parent_run) in parents.items():
        end_sweep(config, sweep_dir, ParentRun(uri, parent_run.info.experiment_id, parent_id))
    return 1 if failed else 0


def _record_kept_runs(sweep_dir: Path) -> Path:
    """Record what the sweep's jobs kept while the tracking server was away; a warning for
    each one left (:func:`rlplat.tracking.sync.record_kept_runs`). Returns ``sweep_dir``."""
    from rlplat.tracking.sync import record_kept_runs

    kept = record_kept_runs(sweep_dir)
    for path, why in kept.failed:
        _warn(f"{path} was not recorded ({why})")
    return sweep_dir


def recorded_run(record: dict[str, str], parents: dict[str, tuple[str, Any]]) -> Any:
    """The MLflow run of a job's ``record``; its sweep's parent run is added to ``parents``
    (parent run id -> (store, run)), the sweeps to end."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=record["tracking_uri"])
    run = client.get_run(record["run_id"])
    parent = run.data.tags.get(PARENT_TAG)
    if parent and parent not in parents:
        parents[parent] = (record["tracking_uri"], client.get_run(parent))
    return run


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
JOB_SUBDIR = "${hydra.job.num}"  # Hydra's default hydra.sweep.subdir: job directories named by number
LEFT_TO_THE_RUN = ("hydra.mode", "hydra.sweep", "hydra.sweeper", "hydra/sweeper", "hydra.launcher", "hydra/launcher")
"""The sweep's own ``hydra`` overrides, which a job started as a single run does without."""


def basic_sweep_jobs(config: Any) -> tuple[list[list[str]] | None, str]:
    """Each job's overrides, in the order Hydra's basic sweeper numbers its jobs (every
    combination of ``hydra.sweeper.params`` and the command line's overrides, as it splits
    them), with the sweep's ``hydra`` overrides a single run takes (``hydra.job.env_set``,
    logging, ...); None and why where the jobs cannot be listed ahead: another sweeper's,
    job directories not named by number (``hydra.sweep.subdir``), or sweeps whose values
    need Hydra's config loader (``glob()``).

    Args:
        config: The sweep's config (its ``multirun.yaml``).
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    hydra = config.hydra
    if hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None, f"sweeper {hydra.sweeper.get('_target_')!r}"
    sweep_node = cast(dict[str, Any], OmegaConf.to_container(hydra.sweep))  # unresolved, as the sweep set it
    if sweep_node["subdir"] != JOB_SUBDIR:
        return None, f"hydra.sweep.subdir is not {JOB_SUBDIR}"
    params = [f"{key}={value}" for key, value in (hydra.sweeper.get("params") or {}).items()]
    try:
        overrides = OverridesParser.create().parse_overrides([*params, *hydra.overrides.task])
        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except HydraException as error:
        return None, f"the sweep's overrides cannot be split here ({error})"
    own = [o for o in hydra.overrides.hydra if not o.lstrip("+~").startswith(LEFT_TO_THE_RUN)]
    return [[*own, *job] for job in jobs], ""


def hydra_quoted(value: str) -> str:
    """``value`` as one quoted value of a Hydra override (any character, ``'`` and ``\\`` escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def start_job(
    config: Any, sweep_dir: Path, number: int, overrides: list[str], parent: Any, first: dict[str, str]
) -> int:
    """Run job ``number`` of the sweep, which never started (or stopped before its first
    checkpoint), as ``rlplat-train <its overrides>`` into its job directory, from the sweep's
    working directory; with ``parent`` (id, (store, run)), its run is that parent's child
    (:data:`rlplat.sweep.runs.ENV_SWEEP_JOB`). ``first``: the record of its first start's
    run, if it had one (else empty); its earlier runs are tagged ``rlplat.restarted``
    (:func:`tag_earlier_runs`: the job table shows the new run instead).
    Signals (Ctrl-C) are passed on to the job, which stops as a run does, and this
    process exits with the job's status after it.

    Returns:
        1 when the job failed, else 0.

    Raises:
        ConfigError: when the sweep's working directory is gone.
        SystemExit: 130 or 143, when a signal stopped the job.
    """
    from rlplat.hydra_ext.overrides import unroute

    cwd = Path(str(config.hydra.runtime.cwd))
    if not cwd.is_dir():
        raise ConfigError(f"job {number}: the sweep's working directory {str(cwd)!r} is gone; the job needs it")
    tag_earlier_runs(number, parent, first)
    args = [*map(unroute, overrides), f"hydra.run.dir={hydra_quoted(str(sweep_dir / str(number)))}"]
    print(f"rlplat-train: job {number} never started; starting it: rlplat-train {shlex.join(args)}", file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if k != ENV_SWEEP_JOB}
    if parent is not None:
        parent_id, (_, parent_run) = parent
        sweep_tag = parent_run.data.tags.get(SWEEP_TAG, str(sweep_dir))  # as the sweep's own jobs are tagged
        env[ENV_SWEEP_JOB] = json.dumps({"parent": parent_id, "sweep_dir": sweep_tag, "job": number})
    # in a session of its own, so that a Ctrl-C reaches it once, forwarded from here: it stops as
    # a run does (a checkpoint, the command to resume)
    process = subprocess.Popen(
        [sys.executable, "-m", "rlplat.cli.launch", *args], cwd=cwd, env=env, start_new_session=True
    )
    code = wait_forwarding_signals(process)
    if code in (130, 143):
        raise SystemExit(code)
    if code != 0:
        _warn(f"job {number} failed (exit status {code})")
    return int(code != 0)


def tag_earlier_runs(number: int, parent: Any, first: dict[str, str]) -> None:
    """Tag ``rlplat.tags.RESTARTED_TAG`` on the earlier runs of job ``number``, which is
    started again, so that the job table shows the new run alone: the run of its record
    ``first`` (if any), and every child run of ``parent`` (id, (store, run)) tagged with the
    job's number, such as the run of a job killed after its run was created but before it
    recorded it in ``rlplat_run.json``."""
    from mlflow import MlflowClient

    if first:
        MlflowClient(tracking_uri=first["tracking_uri"]).set_tag(first["run_id"], RESTARTED_TAG, "true")
    if parent is None:
        return
    parent_id, (uri, parent_run) = parent
    client = MlflowClient(tracking_uri=uri)
    earlier = client.search_runs(
        [parent_run.info.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}' and tags.`{JOB_TAG}` = '{number}'",
        max_results=1000,
    )
    for run in earlier:
        client.set_tag(run.info.run_id, RESTARTED_TAG, "true")


def end_sweep(config: Any, sweep_dir: Path, parent: Any) -> None:
    """What a sweep's end does (:meth:`rlplat.sweep.parent.MlflowSweep.on_multirun_end`): the
    job table, ``jobs.csv``, the report and the best job on the parent run, which ends FINISHED."""
    from rlplat.sweep.parent import MlflowSweep, set_active_parent

    sweep = MlflowSweep()
    sweep.parent, sweep.objective = parent, str(config.trainer.objective)
    config.hydra.sweep.dir = str(sweep_dir)
    set_active_parent(parent)
    sweep.on_multirun_end(config)
