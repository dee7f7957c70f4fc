"""Hydra's task for ``rlplat-train``: one job, in the command's process or a launcher's worker.

:func:`train` checks the composed config before torch is imported
(:func:`rlplat.hydra_ext.validate.check_config`), builds the parts (:func:`rlplat.build.build`)
and hands them to :func:`rlplat.cli.run.run_training`. Bad input is reported here, in one
place, with nothing left half-written.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rlplat.cli.args import fail
from rlplat.hydra_ext import unroute
from rlplat.hydra_ext.validate import check_config
from rlplat.registry import ConfigError, PluginError
from rlplat.signals import LIFE, Phase, exit_status
from rlplat.sweep.runs import job_failed, job_tags, runs_in_local_workers, runs_in_this_process, sweep_directory


@dataclass(frozen=True)
class Job:
    """Hydra's task function: calls :func:`train` with ``tracker``, the unopened
    :meth:`rlplat.tracking.process.TrackerProcess.spare` of a single run, after putting the
    user's ``HYDRA_FULL_ERROR`` back when ``restore`` (``rlplat-train`` set it to compose)."""

    tracker: Any = None
    full_error: str | None = None
    restore: bool = False

    def __call__(self, cfg: DictConfig) -> float:
        """Run the job; returns its objective (NaN for a sweep's job that failed or was stopped)."""
        if self.restore:
            set_full_error(self.full_error)
        return train(cfg, self.tracker)


def set_full_error(value: str | None) -> None:
    """Set ``HYDRA_FULL_ERROR`` to ``value`` (None: unset)."""
    if value is None:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    else:
        os.environ["HYDRA_FULL_ERROR"] = value


def train(cfg: DictConfig, tracker: Any = None) -> float:
    """Check, build, fit and record one job (``tracker``: see :class:`Job`); returns
    ``trainer.objective``.

    A config error, found before an MLflow run exists, removes what the job wrote
    (:func:`remove_run_dir`), as Ctrl-C before a single run's training does; it is one line and
    exit status 2, or in a sweep, as any error of a job, a record for the sweep's end
    (:func:`job_failed`) and NaN. A job of the parallel launcher's worker that a signal stopped
    returns NaN too (joblib would kill the other workers before they checkpoint).
    """
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    local_worker = multirun and runs_in_local_workers(hydra_cfg)
    command = shlex.join(["rlplat-train", *map(unroute, hydra_cfg.overrides.task if multirun else sys.argv[1:])])
    hydra_files = (".hydra", f"{hydra_cfg.job.name}.log")  # what Hydra wrote for the job
    before = {e.name for e in output_dir.iterdir()} - set(hydra_files) if output_dir.is_dir() else set()
    job_start = LIFE.job_start()
    if local_worker:
        LIFE.sweep_waits()  # a signal between this worker's jobs: it starts no more
    if (local_worker or (multirun and runs_in_this_process(hydra_cfg))) and LIFE.stopped_by is not None:
        resume = f"rlplat-train resume={shlex.quote(sweep_directory(hydra_cfg))}"
        print(f"rlplat-train: job {hydra_cfg.job.num} not started: {LIFE.stopped_by} stopped the sweep "
              f"({resume} starts it)", file=sys.stderr)  # fmt: skip
        if not local_worker:  # the basic launcher's sweep ends now, launching no further job
            raise SystemExit(exit_status(LIFE.stopped_by))
        return math.nan
    try:
        probe = [check_config(cfg, list(hydra_cfg.overrides.task))]  # handed over: the build frees it
        return _build_and_run(cfg, probe, output_dir, command, job_start, time.time() if multirun else None, tracker)
    except (ConfigError, PluginError) as error:
        remove_run_dir(output_dir, multirun, before, hydra_files)  # nothing half-written
        if multirun:
            return job_failed(error, hydra_cfg, command, output_dir)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        fail("rlplat-train", error)
    except (SystemExit, KeyboardInterrupt) as error:
        if isinstance(error, KeyboardInterrupt) and not multirun and LIFE.phase is Phase.START_UP:
            remove_run_dir(output_dir, multirun, before, hydra_files)  # no MLflow run exists yet
        if local_worker and LIFE.stopped_by is not None:
            return math.nan  # the main process exits once every worker has returned
        raise
    except Exception as error:  # a sweep's job that failed in training (a single run's error stays Hydra's)
        if not multirun:
            raise
        return job_failed(error, hydra_cfg, command, output_dir)


def _build_and_run(
    cfg: DictConfig, probe: list[Any], output_dir: Path, command: str, job_start: float, run_start: float | None,
    spare: Any,
) -> float:  # fmt: skip
    """Build the parts (from ``probe``, the checks' env) and run them while MLflow loads in a
    child process. ``run_start``: a sweep's job starts its MLflow run at its own start, so that
    the first job's wall time does not count the sweep's start-up."""
    import hydra

    from rlplat import __version__
    from rlplat.build import build
    from rlplat.cli.run import RunSpec, run_training
    from rlplat.sweep.reporter import TrialReporter
    from rlplat.tracking.records import run_tags
    from rlplat.video import video_callbacks

    try:
        tracker, options = start_tracker(cfg, spare)
    except BaseException:
        probe.pop().close()
        raise
    try:
        built = build(cfg, probe=probe.pop())
        try:
            hydra_cfg = HydraConfig.get()
            algo, env = str(hydra_cfg.runtime.choices.get("algo")), str(hydra_cfg.runtime.choices.get("env"))
            reporter = TrialReporter.from_environment(built.trainer.objective)
            tags = {}
            if built.tracking.enabled:
                tags = run_tags(algo, env, built.seed, __version__, command, Path(hydra.utils.get_original_cwd()))
                tags.update(job_tags(hydra_cfg, built.tracking.uri, reporter))
            spec = RunSpec(
                output_dir,
                f"{algo} / {built.env.label(env)} / seed {built.seed}",
                tags=tags,
                reporter=reporter,
                sweep_job=hydra_cfg.mode == RunMode.MULTIRUN,
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


def start_tracker(cfg: DictConfig, spare: Any = None) -> tuple[Any, dict[str, Any]]:
    """The job's :class:`rlplat.tracking.process.TrackerProcess`, ``spare`` or new (None when
    tracking is off or MLflow is loaded here: a sweep's later jobs record in-process), and its
    keywords: a sweep's job on its parent's store waits for a server that does not answer, and
    its end waits at most 5 s (the sweep's end records what is left)."""
    from rlplat.sweep.runs import active_parent
    from rlplat.tracking.pending import SWEEP_JOB_END_FLUSH_S
    from rlplat.tracking.process import TrackerProcess
    from rlplat.tracking.settings import TrackingConfig

    parent, tracking = active_parent(), TrackingConfig.from_node(cfg.tracking)
    options: dict[str, Any] = {"end_flush_s": float(tracking.end_wait_s)}
    if parent is not None and HydraConfig.get().mode == RunMode.MULTIRUN and parent.uri == tracking.uri:
        options = {"wait_for_server": True, "end_flush_s": min(options["end_flush_s"], SWEEP_JOB_END_FLUSH_S)}
    if not tracking.enabled or "mlflow" in sys.modules:
        if spare is not None:
            spare.discard()
        return None, options
    if spare is None:
        return TrackerProcess(tracking.uri, tracking.experiment, tracking.artifact_location, **options), options
    spare.open(tracking.uri, tracking.experiment, tracking.artifact_location, **options)
    return spare, options


def remove_run_dir(output_dir: Path, multirun: bool, before: set[str], hydra_files: tuple[str, ...]) -> None:
    """Remove what a job wrote in its run directory: the entries beside ``before`` (there as it
    started) and ``hydra_files``; when ``before`` is empty, the directory and, in a single run,
    the parents left empty (``outputs/runs/<date>``), never the current directory or above."""
    run_dir, cwd = output_dir.resolve(), Path.cwd().resolve()
    if not run_dir.is_dir():
        return
    if before or run_dir == cwd or run_dir in cwd.parents:
        for entry in run_dir.iterdir():
            if entry.name not in before and entry.name not in hydra_files:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in () if multirun else run_dir.parents:  # a sweep's directory holds the other jobs
        if parent == cwd or cwd not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
