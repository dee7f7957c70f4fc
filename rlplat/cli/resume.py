"""``rlplat-train resume=<run id | run dir | sweep dir>``: continue a run, or a sweep's
unfinished jobs, from the newest readable checkpoint.

The run goes on in the same MLflow run (same id; status back to RUNNING, then FINISHED),
with the config stored in the checkpoint; metrics continue after the last step already
logged, params are not logged again. A corrupt newest checkpoint is skipped with a warning
for the previous one. For a sweep directory, jobs whose run FINISHED are skipped, the
others resume one after another, and the jobs that never started are started (Hydra's basic
sweeper); the sweep then ends as a sweep does (job table, report), its parent run FINISHED.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from rlplat.checkpoint import CHECKPOINT_DIR, CheckpointError
from rlplat.cli.args import default_tracking_uri
from rlplat.cli.clock import job_start
from rlplat.cli.locate import SWEEP_FILE, locate, run_of_dir
from rlplat.registry import ConfigError, PluginError
from rlplat.settings import absolute_sqlite_uri
from rlplat.sweep.runs import OPTUNA_JOURNAL, OPTUNA_RESULTS, ParentRun
from rlplat.tags import JOB_TAG, PARENT_TAG, RESTARTED_TAG
from rlplat.tracking.records import read_run_file, write_run_file

ALLOWED = ("resume", "tracking.uri")


def main(args: list[str]) -> int:
    """Resume what ``resume=`` names; returns the exit status (2 for bad input)."""
    try:
        options = _parse(args)
        target = options["resume"]
        given = options.get("tracking.uri")
        if (Path(target) / SWEEP_FILE).is_file():
            jobs = [job for job in Path(target).iterdir() if job.is_dir()]
            _refuse_other_store(given, target, {r["tracking_uri"] for job in jobs if (r := read_run_file(job))})
            try:
                return resume_sweep(Path(target))
            except KeyboardInterrupt:  # outside a job's training, which stops on its own (rlplat.cli.run)
                print("rlplat-train: stopped by SIGINT outside a job's training", file=sys.stderr)
                print(f"Resume with: rlplat-train resume={shlex.quote(str(Path(target).resolve()))}", file=sys.stderr)
                return 130
        _refuse_optuna_sweep(Path(target))
        # Ctrl-C before its training leaves the run as it was: rlplat.cli.launch.main says so
        resume_run(target, given or default_tracking_uri(), given_uri=given)
        return 0
    except (ConfigError, PluginError) as error:
        print(f"rlplat-train: error: {error}", file=sys.stderr)
        return 2


def _parse(args: list[str]) -> dict[str, str]:
    options = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in ALLOWED:
            raise ConfigError(
                f"{arg!r}: with resume= only {', '.join(k + '=' for k in ALLOWED)} may be given; "
                "the run goes on with the config in its checkpoint"
            )
        options[key] = value
    if not options.get("resume"):
        raise ConfigError("resume='': give a run id, a run directory or a sweep directory")
    return options


def _refuse_optuna_sweep(directory: Path) -> None:
    """Raise ConfigError for the directory of an Optuna sweep: its trials are resumed one by
    one (a study cannot rerun a trial), naming the trials' job directories."""
    if not any((directory / name).is_file() for name in (OPTUNA_JOURNAL, OPTUNA_RESULTS)):
        return
    jobs = sorted((p for p in directory.iterdir() if (p / "checkpoints").is_dir()), key=lambda p: p.name)
    listed = ", ".join(str(p) for p in jobs[:3]) + (", ..." if len(jobs) > 3 else "")
    raise ConfigError(
        f"resume={str(directory)!r} is an Optuna sweep's directory, which is not resumed as a whole: resume its "
        f"trials one by one, resume=<trial's job directory> ({listed or 'none has a checkpoint'})"
    )


def _warn(message: str) -> None:
    print(f"rlplat-train: warning: {message}", file=sys.stderr)


def _refuse_other_store(given: str | None, target: str, stores: set[str]) -> None:
    """Raise ConfigError when ``tracking.uri`` was given with a directory whose runs are
    recorded in ``stores`` and it names none of them: a run directory's run (a sweep's jobs)
    goes on in the store it was recorded in; ``tracking.uri=`` says where to find a run id."""
    if given is None or not stores or absolute_sqlite_uri(given) in stores:
        return
    raise ConfigError(
        f"tracking.uri={given!r}: resume={target!r} goes on in the store it was recorded in "
        f"({', '.join(sorted(stores))}); tracking.uri= only says where to find a run id: leave it out"
    )


def resume_run(target: str, tracking_uri: str, given_uri: str | None = None) -> None:
    """Continue one run from its newest readable checkpoint.

    Args:
        target: A run id (looked up in ``tracking_uri``), a run directory or a checkpoint.
        tracking_uri: The store of a run id.
        given_uri: ``tracking.uri`` as given on the command line (None: not given); for a
            directory it must name the store the run was recorded in.

    Raises:
        ConfigError: for an unknown run, a directory without checkpoints or a checkpoint
            that cannot be read; for a ``given_uri`` that is not the run directory's store.
        SystemExit: 130 or 143 when a signal stops it again (see :mod:`rlplat.cli.run`).
    """
    from omegaconf import OmegaConf

    from rlplat.build import build
    from rlplat.cli.record import video_callbacks
    from rlplat.cli.run import RunSpec, run_training
    from rlplat.trainer import load_parts_state

    started = job_start()
    located = locate("resume", target, tracking_uri, which="newest", warn=_warn)
    if located.run_dir is None:
        raise ConfigError(f"resume={target!r}: a checkpoint outside a run directory cannot be resumed")
    config = located.state["config"]
    built = build(OmegaConf.create(dict(config)))
    try:
        if Path(target).exists() and built.tracking.enabled:  # not a run id: the store is the record's, or the config's
            stores = {read_run_file(located.run_dir).get("tracking_uri") or built.tracking.uri}
            _refuse_other_store(given_uri, target, stores)
        try:  # before anything is recorded: a checkpoint that does not fit leaves its run as it was
            load_parts_state(built.parts, located.state)
        except CheckpointError as error:
            raise CheckpointError(f"resume={target!r}: checkpoint {str(located.checkpoint)!r}: {error}") from error
        frames = int(located.state["frames"])
        print(
            f"rlplat-train: resuming {located.run_id or located.run_dir} from {located.checkpoint} "
            f"({frames:,} of {built.trainer.total_frames:,} frames)",
            file=sys.stderr,
        )
        title = f"{config['loss']['name']} / resumed / seed {config['seed']}"
        tracking = built.tracking
        run, tags = _recorded_run(located, tracking, target) if tracking.enabled else (located.run_id, {})
        callbacks = video_callbacks(built, located.run_dir, start_frames=frames)
        spec = RunSpec(
            located.run_dir,
            title,
            tags=tags,
            resume_run=run if tracking.enabled else None,
            state=located.state,
            job_start=started,
            callbacks=callbacks,
        )
        run_training(built, spec)
    finally:
        built.parts.close()


def _recorded_run(located: Any, tracking: Any, target: str) -> tuple[str | None, dict[str, str]]:
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
    _warn(
        f"{located.run_dir} has no MLflow run in {tracking.uri} (stopped before one was created): "
        "the resumed run is recorded as a new run"
    )
    return located.run_id, _new_run_tags(located.state["config"], located.run_dir, target)


def _new_run_tags(config: Any, run_dir: Path, target: str) -> dict[str, str]:
    """The tags of a new MLflow run for a resumed run directory that has none: algo and env
    as Hydra chose them (its ``.hydra/hydra.yaml``), else the loss's name and the env's id."""
    from omegaconf import OmegaConf

    from rlplat import __version__
    from rlplat.tracking.records import run_tags

    choices: dict[str, Any] = {}
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        choices = dict(OmegaConf.load(hydra_file).hydra.runtime.choices)
    algo = str(choices.get("algo") or config["loss"]["name"])
    env = str(choices.get("env") or config["env"].get("id", config["env"]["name"]))
    return run_tags(algo, env, int(config["seed"]), __version__, f"rlplat-train resume={target}", Path.cwd())


def resume_sweep(sweep_dir: Path) -> int:
    """Resume a sweep: what its jobs kept while the tracking server was away is recorded;
    each job with a checkpoint and an unfinished run resumes (one whose run FINISHED is
    skipped); under Hydra's basic sweeper, the jobs that never reached a checkpoint (or never
    started) are started, each as its sweep's child run; then, as at a sweep's end, the job
    table, ``jobs.csv``, the report, and the parent ends FINISHED. Returns 0, or 1 when a job
    failed again.

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
            resume_run(str(job), record.get("tracking_uri", ""))
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
    SIGINT (Ctrl-C) and SIGTERM are passed on to the job, which stops as a run does, and this
    process exits with the job's status after it.

    Returns:
        1 when the job failed, else 0.

    Raises:
        ConfigError: when the sweep's working directory is gone.
        SystemExit: 130 or 143, when a signal stopped the job.
    """
    from rlplat.hydra_ext.overrides import unroute
    from rlplat.sweep.runs import ENV_SWEEP_JOB, SWEEP_TAG

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
    forward = lambda sig, _frame: process.send_signal(sig)  # noqa: E731
    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
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
