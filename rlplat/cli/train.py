"""rlplat-train: compose the config with Hydra, build the parts, fit, record in MLflow.

    rlplat-train algo=ppo env=pendulum
    rlplat-train -m algo=ppo env=cartpole seed=0,1,2

compose (Hydra, :mod:`rlplat.hydra_ext`) -> build (:func:`rlplat.build.build`, every check)
-> fit (:class:`rlplat.trainer.Trainer`); bad input is reported here, in one place.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from hydra_plugins.rlplat_optuna_sweeper import register_sweeper
from rlplat import __version__
from rlplat.cli.clock import job_start
from rlplat.command_line import in_start_up, is_multirun, is_resume, prints_only
from rlplat.hydra_ext import register_group_options, register_hydra_plugins, route, unroute
from rlplat.hydra_ext.validate import check_command_line, check_config
from rlplat.registry import ConfigError, PluginError
from rlplat.sweep.runs import (
    exit_status,
    runs_in_local_workers,
    runs_in_this_process,
    stop_sweep,
    sweep_directory,
    sweep_stopped_by,
    sweeper_reports_failures,
    typed_overrides,
    wait_for_the_jobs_on_signals,
)
from rlplat.tags import OVERRIDES_TAG, SEED_INDEX_TAG, TRIAL_TAG


def train(cfg: DictConfig, output_dir: Path, command: str, job_start: float, run_start: float | None = None) -> float:
    """Build the parts, record the run in MLflow, fit; returns ``trainer.objective``.

    Every config error is raised by the build, before an MLflow run exists. Once it exists,
    the run ends FINISHED, KILLED (a signal, tag ``rlplat.signal``; a sweeper's pruner, tag
    ``rlplat.pruned``) or FAILED on any other exception (re-raised), never RUNNING (see
    :mod:`rlplat.cli.run`). In a multirun the run is the child of the sweep's parent run.

    Args:
        cfg: The composed config.
        output_dir: The run directory (Hydra's).
        command: The ``rlplat-train`` command that reruns this job alone.
        job_start: ``time.time()`` when the job started (its process's start for the first
            job of a process): ``time/startup_s`` is measured from it to the first env step.
        run_start: ``time.time()`` at which the MLflow run starts, when not ``job_start``: in a
            sweep, the job's own start, so that the first job's wall time does not count the
            sweep's start-up and compares with the others'.

    Raises:
        ConfigError, PluginError: for invalid config or a broken plugin.
    """
    options = tracker_options(cfg)
    tracker = start_tracker(cfg, options)  # MLflow loads in a child process while this one builds the parts
    try:
        from rlplat.build import build
        from rlplat.cli.record import video_callbacks
        from rlplat.cli.run import RunSpec, env_label, run_training
        from rlplat.sweep.reporter import TrialReporter

        built = build(cfg)
        try:
            choices = HydraConfig.get().runtime.choices
            algo, env, seed = str(choices.get("algo")), str(choices.get("env")), built.config["seed"]
            reporter = TrialReporter.from_environment(built.trainer.objective)
            tags = _tags(cfg, built.tracking.uri, algo, env, command, reporter) if built.tracking.enabled else {}
            spec = RunSpec(
                output_dir,
                f"{algo} / {env_label(env, built.config['env'])} / seed {seed}",
                tags=tags,
                reporter=reporter,
                job_start=job_start,
                run_start=run_start,
                callbacks=video_callbacks(built, output_dir),
                tracker=tracker,
                tracker_options=options,
            )
            return run_training(built, spec)
        finally:
            built.parts.close()
    finally:
        if tracker is not None:
            tracker.close()  # nothing more once the run ended; a run never started leaves nothing


_spare: list[Any] = []
"""The :class:`rlplat.tracking.process.TrackerProcess` that :func:`main` started before Hydra
composed the config, until :func:`start_tracker` takes it or :func:`main` discards it."""


def tracker_options(cfg: DictConfig) -> dict[str, Any]:
    """Keywords of the job's tracker (:class:`rlplat.tracking.store.Tracker`): how long its end
    waits for an unreachable server (``tracking.end_wait_s``); a job of a recorded sweep, on
    the store of its sweep's parent run (which the server answered when the sweep began),
    also waits for a tracking server that does not answer at its start rather than fail, and
    its end waits at most 5 s (the sweep's end records what is left); any other run refuses
    an unreachable server at start."""
    from rlplat.settings import TrackingConfig
    from rlplat.sweep.runs import active_parent
    from rlplat.tracking.pending import SWEEP_JOB_END_FLUSH_S

    parent = active_parent()
    tracking = TrackingConfig.from_node(cfg.tracking)
    if parent is None or HydraConfig.get().mode != RunMode.MULTIRUN or parent.uri != tracking.uri:
        return {"end_flush_s": float(tracking.end_wait_s)}
    return {"wait_for_server": True, "end_flush_s": min(float(tracking.end_wait_s), SWEEP_JOB_END_FLUSH_S)}


def start_tracker(cfg: DictConfig, options: dict[str, Any] | None = None) -> Any:
    """A :class:`rlplat.tracking.process.TrackerProcess` for the ``tracking`` node (the one
    :func:`main` started early, when there is one); None when tracking is off, or when this
    process has MLflow loaded already (a sweep's launcher process, after its first job): the
    run then opens an in-process tracker at no cost."""
    from rlplat.settings import TrackingConfig
    from rlplat.tracking.process import TrackerProcess

    tracking = TrackingConfig.from_node(cfg.tracking)
    spare = _spare.pop() if _spare else None
    if not tracking.enabled or "mlflow" in sys.modules:
        if spare is not None:
            spare.discard()
        return None
    if spare is None:
        return TrackerProcess(tracking.uri, tracking.experiment, tracking.artifact_location, **(options or {}))
    spare.open(tracking.uri, tracking.experiment, tracking.artifact_location, **(options or {}))
    return spare


def _tags(cfg: DictConfig, uri: str, algo: str, env: str, command: str, reporter: Any) -> dict[str, str]:
    """The run's tags: rlplat's own, plus the sweep's when this job is a sweep's child (its
    store ``uri``, as built, is the sweep's parent run's)."""
    from rlplat.sweep.parent import active_parent, child_tags, started_job_tags
    from rlplat.tracking.records import run_tags

    tags = run_tags(algo, env, int(cfg.seed), __version__, command, Path(hydra.utils.get_original_cwd()))
    tags[OVERRIDES_TAG] = typed_overrides(HydraConfig.get())  # what rlplat-compare groups runs by
    parent = active_parent()
    if parent is not None and HydraConfig.get().mode == RunMode.MULTIRUN:
        if parent.uri != uri:
            print(
                f"rlplat-train: warning: tracking.uri={uri!r} differs from the sweep's ({parent.uri!r}): "
                "this run is not nested under the sweep's parent run",
                file=sys.stderr,
            )
        else:
            tags.update(child_tags(parent, HydraConfig.get()))
    elif (started := started_job_tags()) is not None:
        tags.update(started)  # a job that resume=<sweep dir> started
    if reporter is not None:
        tags[TRIAL_TAG] = str(reporter.number)
        if reporter.seeds > 1:
            tags[SEED_INDEX_TAG] = str(reporter.seed_index)
    return tags


def task(cfg: DictConfig) -> float:
    """Hydra's task function: one job, in this process or in a launcher's worker.

    The composed config is checked first, before torch is imported
    (:func:`rlplat.hydra_ext.validate.check_config`). Bad input removes the run directory
    Hydra made (:func:`remove_run_dir`); in a single run it is reported as one line with exit
    status 2; in a sweep, as any other error of a job, it is one line and a record for the
    sweep's end (:func:`job_failed`), and the sweep goes on. Ctrl-C before
    a single run's training removes it too (:func:`rlplat.cli.launch.main` reports it).
    """
    restore_full_error()
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    args = hydra_cfg.overrides.task if multirun else sys.argv[1:]  # multirun: the job's own command
    command = shlex.join(["rlplat-train", *map(unroute, args)])
    hydra_files = (".hydra", f"{hydra_cfg.job.name}.log")  # what Hydra wrote for the job
    before = entries_before(output_dir, hydra_files)  # kept by remove_run_dir
    started = job_start()
    local_worker = multirun and runs_in_local_workers(hydra_cfg)
    serial = multirun and runs_in_this_process(hydra_cfg)  # the basic launcher's job, in the sweep's process
    if local_worker:
        wait_for_the_jobs_on_signals()  # a signal between this worker's jobs: it starts no more
    if (local_worker or serial) and (stopped := sweep_stopped_by()) is not None:
        sweep_dir = sweep_directory(hydra_cfg)
        print(f"rlplat-train: job {hydra_cfg.job.num} not started: {stopped} stopped the sweep "
              f"(rlplat-train resume={shlex.quote(sweep_dir)} starts it)", file=sys.stderr)  # fmt: skip
        if serial:  # the sweep ends now, launching no further job
            raise SystemExit(exit_status(stopped))
        return math.nan
    try:
        check_config(cfg, list(hydra_cfg.overrides.task))
        return train(cfg, output_dir, command, started, run_start=time.time() if multirun else None)
    except (ConfigError, PluginError) as error:
        remove_run_dir(output_dir, multirun, before, hydra_files)  # nothing half-written
        if multirun:
            return job_failed(error, hydra_cfg, command, output_dir)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        fail(error)
    except (SystemExit, KeyboardInterrupt) as error:
        # a signal stopped the job (its run ended KILLED), or came before its run began: in a
        # parallel worker the job returns, since joblib would kill the other workers on an
        # exception before their jobs have checkpointed; the main process exits once all returned
        code = error.code if isinstance(error, SystemExit) else 130
        if isinstance(error, KeyboardInterrupt) and not multirun and in_start_up():
            remove_run_dir(output_dir, multirun, before, hydra_files)  # before training: no MLflow run exists yet
        if not local_worker or code not in (130, 143):
            raise
        stop_sweep(signal.Signals(code - 128).name)  # the signal whose exit status it is
        return math.nan
    except Exception as error:  # a sweep's job that failed in training (a single run's error stays Hydra's)
        if not multirun:
            raise
        return job_failed(error, hydra_cfg, command, output_dir)


ERROR_FILE = "error.txt"
"""Written into a failed sweep job's run directory: the traceback of what stopped it."""


def job_failed(error: Exception, hydra_cfg: Any, command: str, output_dir: Path) -> float:
    """A sweep's job failed with ``error``: one line now, a record for the sweep's end
    (:func:`rlplat.sweep.runs.record_job_failure`: the job table and one line per failed job,
    exit status 1), and a NaN objective, so that no launcher or sweeper prints a traceback.
    An error other than bad input leaves its traceback in the run directory's
    :data:`ERROR_FILE`.

    Raised again instead: with ``HYDRA_FULL_ERROR=1`` (the traceback is wanted); for a sweeper
    that takes failed jobs itself (:func:`rlplat.sweep.runs.sweeper_reports_failures`), after
    the record; and a pruner's ``TrialPruned``, which is no failure.
    """
    optuna = sys.modules.get("optuna")
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or (optuna is not None and isinstance(error, optuna.TrialPruned)):
        raise error
    from rlplat.sweep.runs import JobFailure, record_job_failure
    from rlplat.tracking.records import read_run_file

    text = one_line(error)
    reason = text if isinstance(error, (ConfigError, PluginError)) else f"{type(error).__name__}: {text}"
    details = None
    if not isinstance(error, (ConfigError, PluginError)) and output_dir.is_dir():
        details = output_dir / ERROR_FILE
        details.write_text("".join(traceback.format_exception(error)))
    run_id = read_run_file(output_dir).get("run_id") if output_dir.is_dir() else None
    details_path = str(details) if details else None
    failure = JobFailure(int(hydra_cfg.job.num), typed_overrides(hydra_cfg), reason, command, run_id, details_path)
    record_job_failure(Path(sweep_directory(hydra_cfg)), failure)
    print(f"rlplat-train: error: job {failure.job} failed: {reason}", file=sys.stderr)
    if sweeper_reports_failures(hydra_cfg):
        raise error
    return math.nan


def entries_before(output_dir: Path, hydra_files: tuple[str, ...]) -> set[str]:
    """The names in a job's run directory as the job starts, other than ``hydra_files`` (what
    Hydra wrote for it: ``.hydra/``, the job's log): a directory of the user's, or an earlier
    run's, that ``hydra.run.dir`` named (:func:`remove_run_dir` keeps them)."""
    return {entry.name for entry in output_dir.iterdir()} - set(hydra_files) if output_dir.is_dir() else set()


def remove_run_dir(output_dir: Path, multirun: bool, before: set[str], hydra_files: tuple[str, ...]) -> None:
    """Remove what a job wrote in its run directory: the whole directory when it held nothing
    else as the job started (``before`` empty, see :func:`entries_before`) and, in a single
    run, the parents Hydra made for it that are left empty (``outputs/runs/<date>``), up to the
    current directory; else only the entries the job added, keeping ``before`` and
    ``hydra_files``. The current directory and those above it are never removed."""
    run_dir = output_dir.resolve()
    if not run_dir.is_dir():
        return
    cwd = Path.cwd().resolve()
    if before or run_dir == cwd or run_dir in cwd.parents:
        for entry in run_dir.iterdir():
            if entry.name in before or entry.name in hydra_files:
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    if multirun:
        return  # the sweep's directory holds the other jobs
    for parent in run_dir.parents:
        if parent == cwd or cwd not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


def one_line(error: Exception) -> str:
    """``error``'s message as one line: its lines stripped and joined by spaces."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def fail(error: Exception) -> NoReturn:
    """Report bad input as one line on stderr and exit with status 2."""
    print(f"rlplat-train: error: {one_line(error)}", file=sys.stderr)
    sys.exit(2)


def main(tracker: Any = None) -> None:
    """``rlplat-train``'s command, after :func:`rlplat.cli.launch.main` (the console script).

    Args:
        tracker: An unopened :meth:`rlplat.tracking.process.TrackerProcess.spare`, started by
            the launcher for a single run, for the run to take; None: the run starts its
            tracker process when it needs one.
    """
    if is_resume(sys.argv[1:]):  # continues a run from its checkpoint: its config is in there, no composition
        from rlplat.cli.resume import main as resume_main

        sys.exit(resume_main(sys.argv[1:]))
    if tracker is not None:
        _spare.append(tracker)
    try:
        try:
            register_hydra_plugins()
            register_sweeper()
            register_group_options()
            sys.argv[1:] = route(sys.argv[1:])
            check_command_line(sys.argv[1:])  # every override parses; the output directories are writable
        except (ConfigError, PluginError) as error:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            fail(error)
        run_hydra(raise_errors=not is_multirun(sys.argv[1:]) and not prints_only(sys.argv[1:]))
    finally:
        while _spare:  # not taken: tracking off, or the config was rejected before the run
            _spare.pop().discard()


_saved_full_error: list[str | None] = []
"""The user's HYDRA_FULL_ERROR (None: not set) while :func:`run_hydra` has set it to 1."""


def run_hydra(raise_errors: bool) -> None:
    """Hand over to Hydra; with ``raise_errors``, its own errors (an override it rejects, a
    key the config lacks, a config group option it cannot find) become one line and exit
    status 2.

    Hydra reports its errors by printing them and exiting 1, unless HYDRA_FULL_ERROR=1 (a
    documented setting), where it raises them. That setting is made here for Hydra's
    composition only: :func:`task` puts the user's value back as soon as the job starts, so
    that an error during training is reported as Hydra always does. A multirun, whose jobs
    may run in other processes, and a command that only prints are left to Hydra as they are.

    Args:
        raise_errors: Whether to have Hydra raise its errors (a single run).
    """
    if raise_errors:
        _saved_full_error.append(os.environ.get("HYDRA_FULL_ERROR"))
        os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        # Decorated here rather than at definition, so that launchers pickle `task` by reference.
        hydra.main(config_path="pkg://rlplat.conf", config_name="config", version_base="1.3")(task)()
    except (HydraException, OmegaConfBaseException, ConfigError, PluginError) as error:
        user_value = _saved_full_error[0] if _saved_full_error else os.environ.get("HYDRA_FULL_ERROR")
        if not raise_errors or user_value == "1":
            raise  # Hydra raised on its own (HYDRA_FULL_ERROR=1, a debugger): the traceback is wanted
        fail(error)
    finally:
        restore_full_error()


def restore_full_error() -> None:
    """Put back the user's HYDRA_FULL_ERROR where :func:`run_hydra` set it; else nothing."""
    if not _saved_full_error:
        return
    user_value = _saved_full_error.pop()
    if user_value is None:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    else:
        os.environ["HYDRA_FULL_ERROR"] = user_value


if __name__ == "__main__":  # python -m rlplat.cli.train (the console script is rlplat.cli.launch)
    main()
