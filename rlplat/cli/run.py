"""A training run's life, shared by ``rlplat-train`` and ``rlplat-train resume=``: the
MLflow run around the fit, signals (:meth:`rlplat.signals.Life.training`), and how it ends.

A run ends FINISHED; KILLED when a signal stopped it (tag ``rlplat.signal``, a checkpoint
written first) or a sweeper's pruner did (tag ``rlplat.pruned``); FAILED on any other
exception. After a signal the process exits 130 or 143, printing how to resume.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rlplat.checkpoint import periodic_checkpoints
from rlplat.cli.args import default_tracking_uri
from rlplat.metrics import TRAIN_SECONDS
from rlplat.signals import LIFE, exit_status, interrupted_by
from rlplat.tags import DESCRIPTION_TAG, PRUNED_TAG, RUN_DIR_TAG, SIGNAL_TAG
from rlplat.tracking.locate import SWEEP_FILE
from rlplat.tracking.records import RunRecord, TrackerCallback, read_run_file

if TYPE_CHECKING:
    from rlplat.build import Build


@dataclass
class RunSpec:
    """What a run needs beyond its built parts: its directory, console title, a new MLflow run's
    tags, or the run and checkpoint state to continue (a resume); a sweep's trial reporter; the
    ``time.time()`` its job started (for ``time/startup_s``, or a resume's ``time/downtime_s``)
    and its MLflow run starts, when not then; more trainer callbacks (periodic videos); the
    tracker started before the build (:class:`rlplat.tracking.process.TrackerProcess`), or None
    for an in-process one with ``tracker_options`` (MLflow loaded already: ``resume=``, a
    sweep's later jobs); whether it is a sweep's job."""

    output_dir: Path
    title: str
    tags: dict[str, str] = field(default_factory=dict)
    resume_run: str | None = None
    state: dict[str, Any] | None = None
    reporter: Any = None
    job_start: float | None = None
    run_start: float | None = None
    callbacks: list[Any] = field(default_factory=list)
    tracker: Any = None
    tracker_options: dict[str, Any] = field(default_factory=dict)
    sweep_job: bool = False


def run_training(built: Build, spec: RunSpec) -> float:
    """Fit the built parts, recorded in MLflow when tracking is on; returns the objective.

    Raises:
        SystemExit: 130 or 143 when a signal stopped the run (it ended KILLED); 1 after one line
            for a :class:`rlplat.trainer.TrainingError` in a single run (in a sweep it is raised).
    """
    from rlplat.console import TrainingDisplay
    from rlplat.trainer import Interrupted, StopRequest, Trainer, TrainingError

    stop = StopRequest()
    try:
        with LIFE.training(stop), TrainingDisplay(spec.title, built.trainer.total_frames) as display:
            display.say(built.acceleration)
            with _recorded(built, spec, stop) as sinks:
                callbacks = [*sinks, display, *spec.callbacks, *([spec.reporter] if spec.reporter else [])]
                trainer = Trainer(built.parts, built.trainer, spec.output_dir, callbacks, built.checkpoint, stop)
                if spec.state is not None:
                    trainer.load_state_dict(spec.state)
                summary = trainer.fit()
    except (Interrupted, KeyboardInterrupt) as error:
        _exit_interrupted(error, spec)
    except TrainingError as error:
        if spec.sweep_job:
            raise
        print(f"rlplat-train: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    shown = {k: v for k, v in summary.items() if "/" in k and k != TRAIN_SECONDS and v == v}  # v == v: not NaN
    display.summary({"frames": int(summary["frames"]), "wall time (s)": summary[TRAIN_SECONDS], **shown})
    return summary[built.trainer.objective]


def _exit_interrupted(error: BaseException, spec: RunSpec) -> NoReturn:
    """Say where the run stopped and how to resume it; exit with the signal's status."""
    from rlplat.trainer import Interrupted

    name = interrupted_by(error)
    where = (
        f"at {error.frames:,} frames, checkpoint {error.checkpoint}" if isinstance(error, Interrupted) else "at once"
    )
    # a sweep's job is started again by its sweep's resume
    if (spec.output_dir.parent / SWEEP_FILE).is_file() or periodic_checkpoints(spec.output_dir):
        message = f"{where}.\nResume with: {resume_command(spec.output_dir)}"
    else:
        message = f"{where}, before its first checkpoint: nothing to resume"
    print(f"rlplat-train: stopped by {name} {message}", file=sys.stderr)
    raise SystemExit(exit_status(name))


def resume_command(output_dir: Path) -> str:
    """The command that resumes the run of ``output_dir``: its sweep's, for a sweep's job; its run
    id (with ``tracking.uri`` unless the default store), or its directory until it has one."""
    if (output_dir.parent / SWEEP_FILE).is_file():
        return f"rlplat-train resume={shlex.quote(str(output_dir.parent))}"
    run = read_run_file(output_dir)
    if not run:
        return f"rlplat-train resume={shlex.quote(str(output_dir))}"
    command = f"rlplat-train resume={run['run_id']}"
    if run["tracking_uri"] != default_tracking_uri():
        command += " " + shlex.quote(f"tracking.uri={run['tracking_uri']}")
    return command


@contextlib.contextmanager
def _recorded(built: Build, spec: RunSpec, stop: Any) -> Iterator[list[Any]]:
    """The run's own callbacks for the block: the loggers of ``tracking.also`` and, with tracking
    on, the MLflow run's, begun (or reopened) before and ended after as FINISHED, KILLED or
    FAILED; ``time/startup_s`` logged at step 0 (not when resumed)."""
    from rlplat.loggers import logged_paths, make_loggers
    from rlplat.trainer import Interrupted
    from rlplat.video import VideoRecorder

    startup = None if spec.job_start is None or spec.resume_run is not None else time.time() - spec.job_start
    tracker, after_step = _open_run(built, spec) if built.tracking.enabled else (None, None)
    record = RunRecord(tracker, spec.output_dir, built.tracking.uri, spec.reporter, written=spec.resume_run is not None)
    status, loggers = "FAILED", []
    try:
        loggers = make_loggers(built.tracking.also, spec.output_dir, after_step)
        sinks = [*([TrackerCallback(tracker, after_step=after_step)] if tracker is not None else []), *loggers]
        for sink in sinks if startup is not None else ():
            sink.on_log({"time/startup_s": startup}, 0)
        for callback in spec.callbacks if tracker is not None else ():  # periodic videos upload through the tracker
            if isinstance(callback, VideoRecorder):
                callback.upload_with(tracker)
        yield [record, *sinks] if tracker is not None else loggers
        status = "FINISHED"
    except (Interrupted, KeyboardInterrupt) as error:
        name = error.signal if isinstance(error, Interrupted) else stop.signal or interrupted_by(error)
        if tracker is not None:
            tracker.set_tags({SIGNAL_TAG: name})
        status = "KILLED"
        raise
    except BaseException as error:
        if tracker is not None and spec.reporter is not None and spec.reporter.pruned(error):
            tracker.set_tags({PRUNED_TAG: "true"})
            status = "KILLED"
        raise
    finally:
        for logger in loggers:
            logger.close()
        if tracker is not None and record.run_exists(finished=status == "FINISHED"):
            try:
                record.write()  # when no log step came before the end
                for path, folder in logged_paths(loggers):
                    tracker.log_artifact(path, folder)
            finally:
                tracker.end(status)


def _open_run(built: Build, spec: RunSpec) -> tuple[Any, int | None]:
    """Begin the MLflow run (or reopen the resumed one); returns the tracker and the last
    step already logged (a resumed run logs only after it)."""
    from omegaconf import OmegaConf

    from rlplat.tracking.records import flatten

    tracking = built.tracking
    tracker = spec.tracker
    if tracker is None:
        from rlplat.tracking.store import Tracker

        tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location, **spec.tracker_options)
    if spec.resume_run is not None:
        tracker.reopen(spec.resume_run, resumed_at=spec.job_start)
        return tracker, tracker.last_step("time/fps")
    tags = {**spec.tags, RUN_DIR_TAG: str(spec.output_dir.resolve())}
    name = tracking.run_name or f"{tags['algo']}-{built.env.label(tags['env'])}-s{tags['seed']}"
    what = f"{tags['algo']} on {built.env.title}, seed {tags['seed']}, {built.trainer.total_frames:,} frames"
    tags.setdefault(
        DESCRIPTION_TAG, f"`{tags.get('command', 'rlplat-train')}`\n\n{what}. Run directory: `{tags[RUN_DIR_TAG]}`."
    )
    # created while training starts (see RunRecord), and started when the job did: before the
    # metrics logged meanwhile, so that seconds from the run's start count the whole command
    start = spec.run_start if spec.run_start is not None else spec.job_start
    tracker.begin(name, flatten(built.config), tags, start_time=start)
    resolved = spec.output_dir / "config.yaml"
    OmegaConf.save(OmegaConf.create(dict(built.config)), resolved)
    tracker.log_artifact(resolved)
    if (spec.output_dir / ".hydra").is_dir():
        tracker.log_artifact(spec.output_dir / ".hydra", "hydra")
    return tracker, None
