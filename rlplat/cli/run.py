"""A training run's life, shared by ``rlplat-train`` and ``rlplat-train resume=``: signals,
the MLflow run around the fit, and how it ends.

A run ends FINISHED; KILLED when a signal stopped it (tag ``rlplat.signal``, a checkpoint
written first) or a sweeper's pruner did (tag ``rlplat.pruned``); FAILED on any other
exception. SIGINT and SIGTERM ask the loop to stop after the current rollout; a second one
stops at once (the run still ends KILLED). The process then exits 130 (SIGINT) or 143
(SIGTERM) after printing how to resume.
"""

from __future__ import annotations

import contextlib
import gc
import shlex
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from rlplat.checkpoint import periodic_checkpoints
from rlplat.cli.args import default_tracking_uri
from rlplat.cli.locate import SWEEP_FILE
from rlplat.command_line import start_up_done
from rlplat.sweep.runs import sweep_stopped_by
from rlplat.tags import DESCRIPTION_TAG, PRUNED_TAG, RUN_DIR_TAG, SIGNAL_TAG
from rlplat.tracking.records import read_run_file, write_run_file

if TYPE_CHECKING:
    from rlplat.build import Build
    from rlplat.trainer import Callback

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


@dataclass
class RunSpec:
    """What a run needs beyond its built parts.

    Attributes:
        output_dir: The run directory.
        title: Shown on the console.
        tags: The MLflow run's tags (a new run); unused when resuming.
        resume_run: The MLflow run to continue (resume), or None for a new run.
        state: The checkpoint to continue from (resume), or None.
        reporter: A sweep's trial reporter (pruning; told the new run's id), or None.
        job_start: ``time.time()`` when the job started, for ``time/startup_s`` (a new run)
            or ``time/downtime_s`` (a resumed one).
        run_start: ``time.time()`` the new MLflow run starts at, when not ``job_start``.
        callbacks: More trainer callbacks (e.g. periodic videos).
        tracker: The tracker to record the run with, started before the parts were built
            (a :class:`rlplat.tracking.process.TrackerProcess`, so that MLflow loads beside
            torch); None opens an in-process one (a process with MLflow loaded already:
            ``resume=``, a sweep's later jobs).
        tracker_options: Keywords of the in-process tracker (see
            :class:`rlplat.tracking.store.Tracker`): a sweep's job waits for its server.
    """

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


@contextlib.contextmanager
def signals_handled(stop: Any) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop.signal`` (the loop checks it after each rollout); a
    second one raises KeyboardInterrupt at once. Previous handlers are restored after."""

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.signal is not None:
            raise KeyboardInterrupt(name)
        stop.signal = name
        print(f"\nrlplat-train: {name}: stopping after this rollout (again to stop at once)", file=sys.stderr)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_training(built: Build, spec: RunSpec) -> float:
    """Fit the built parts (recorded in MLflow when tracking is on); returns the objective.

    Raises:
        SystemExit: with 130 or 143 when a signal stopped the run (after it ended KILLED);
            with 1 for a :class:`rlplat.trainer.TrainingError` (a NaN or inf with
            ``trainer.nonfinite=raise``, a parameter no optimizer steps) in a single run, after
            one line naming it (the run ended FAILED). In a sweep the error is raised, for Hydra.
    """
    from rlplat.console import TrainingDisplay
    from rlplat.trainer import Interrupted, StopRequest, Trainer, TrainingError

    stop = StopRequest()
    stop.signal = sweep_stopped_by()  # a sweep's job that a signal reached in its start-up stops at once
    try:
        with (
            long_lived_objects_frozen(),
            signals_handled(stop),
            TrainingDisplay(spec.title, built.trainer.total_frames) as display,
        ):
            display.say(built.acceleration)
            callbacks: list[Callback] = [display, *spec.callbacks, *([spec.reporter] if spec.reporter else [])]
            if built.tracking.enabled:
                summary = _recorded_fit(built, spec, callbacks, stop)
            else:
                loggers = _start_loggers(built, spec, after_step=None, startup=_startup_seconds(spec))
                try:
                    trainer = Trainer(
                        built.parts, built.trainer, spec.output_dir, [*callbacks, *loggers], built.checkpoint, stop
                    )
                    if spec.state is not None:
                        trainer.load_state_dict(spec.state)
                    summary = trainer.fit()
                finally:
                    for logger in loggers:
                        logger.close()
    except (Interrupted, KeyboardInterrupt) as error:
        _exit_interrupted(error, spec)
    except TrainingError as error:
        if _in_multirun():
            raise
        print(f"rlplat-train: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    display.summary(
        {
            "frames": int(summary["frames"]),
            "wall time (s)": summary["time/train_s"],
            **{k: v for k, v in summary.items() if "/" in k and k != "time/train_s" and v == v},  # v == v: not nan
        }
    )
    return summary[built.trainer.objective]


def _in_multirun() -> bool:
    """Whether this process runs a job of Hydra's multirun (``-m``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


@contextlib.contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Exempt the objects alive now (modules, config, the built parts) from Python's cyclic
    garbage collector while the block runs; they are given back to it after.

    A full collection scans every tracked object, after torch's imports several hundred
    thousand: ~0.2 s each, which a training run otherwise pays once or twice at random points
    of its loop (a fifth of a second in a 3 s PPO run). Objects made inside the block are
    collected as usual (``gc.freeze``, ``gc.unfreeze``).
    """
    start_up_done()  # gc.freeze(), and the collector runs again if start-up paused it
    try:
        yield
    finally:
        gc.unfreeze()


def _exit_interrupted(error: BaseException, spec: RunSpec) -> NoReturn:
    from rlplat.trainer import Interrupted

    name = getattr(error, "signal", None) or (str(error) if str(error) in EXIT_CODES else "SIGINT")
    where = "at once"
    if isinstance(error, Interrupted):
        where = f"at {error.frames:,} frames, checkpoint {error.checkpoint}"
    in_sweep = (spec.output_dir.parent / SWEEP_FILE).is_file()  # its sweep's resume starts it again
    if in_sweep or periodic_checkpoints(spec.output_dir):
        message = f"{where}.\nResume with: {resume_command(spec.output_dir)}"
    else:
        message = f"{where}, before its first checkpoint: nothing to resume"
    print(f"rlplat-train: stopped by {name} {message}", file=sys.stderr)
    raise SystemExit(EXIT_CODES.get(name, 130))


def resume_command(output_dir: Path) -> str:
    """The command that resumes the run of ``output_dir``, as a stopped run prints it: its
    sweep directory for a sweep's job (the sweep stops with it: finished jobs are skipped, the
    rest resumed); else its run id, with the store's ``tracking.uri`` unless it is the default
    store of the working directory; its run directory while it has not recorded its run."""
    if (output_dir.parent / SWEEP_FILE).is_file():
        return f"rlplat-train resume={shlex.quote(str(output_dir.parent))}"
    run = read_run_file(output_dir)
    if not run:
        return f"rlplat-train resume={shlex.quote(str(output_dir))}"
    command = f"rlplat-train resume={run['run_id']}"
    if run["tracking_uri"] != default_tracking_uri():
        command += " " + shlex.quote(f"tracking.uri={run['tracking_uri']}")
    return command


def _recorded_fit(built: Build, spec: RunSpec, callbacks: list[Callback], stop: Any) -> dict[str, float]:
    """Fit inside an MLflow run that always ends FINISHED, KILLED or FAILED."""
    from rlplat.trainer import Interrupted, Trainer

    tracker, after_step = _open_run(built, spec)
    record = RunRecord(tracker, spec, built.tracking.uri, written=spec.resume_run is not None)
    status = "FAILED"
    loggers: list[Any] = []
    try:
        from rlplat.tracking.records import TrackerCallback

        startup = _startup_seconds(spec)
        loggers = _start_loggers(built, spec, after_step, startup)
        if startup is not None:
            tracker.log_metrics({"time/startup_s": startup}, step=0)
        recorder = TrackerCallback(tracker, after_step=after_step)
        for callback in callbacks:  # callbacks that upload files (periodic videos) upload through the tracker
            upload_with = getattr(callback, "upload_with", None)
            if upload_with is not None:
                upload_with(tracker)
        sinks = [record, recorder, *loggers, *callbacks]
        trainer = Trainer(built.parts, built.trainer, spec.output_dir, sinks, built.checkpoint, stop)
        if spec.state is not None:
            trainer.load_state_dict(spec.state)
        summary = trainer.fit()
        status = "FINISHED"
        return summary
    except (Interrupted, KeyboardInterrupt) as error:
        name = getattr(error, "signal", None) or stop.signal or "SIGINT"
        tracker.set_tags({SIGNAL_TAG: name})
        status = "KILLED"
        raise
    except BaseException as error:
        if spec.reporter is not None and spec.reporter.pruned(error):
            tracker.set_tags({PRUNED_TAG: "true"})
            status = "KILLED"
        raise
    finally:
        from rlplat.loggers import logged_paths

        for logger in loggers:
            logger.close()
        if record.run_exists(finished=status == "FINISHED"):
            try:
                record.write()  # when no log step came before the end
                for path, folder in logged_paths(loggers):
                    tracker.log_artifact(path, folder)
            finally:
                tracker.end(status)


class RunRecord:
    """Trainer callback that writes the run directory's :data:`RUN_FILE` (the MLflow run's
    id, store and experiment: what ``resume=<run dir>`` reads) and tells a sweep's reporter
    the run's id, once the run exists.

    The tracker creates the run while training starts (:meth:`TrackerProcess.begin`); the
    record is written at the first log step, evaluation (``best.pt``) or ``final.pt`` after
    the tracker has answered, without waiting for it; it waits only once the run can be
    resumed, at the first of these hooks after a periodic checkpoint (what a resume reads)
    was written, and at the run's end. A run that is not yet resumable never waits for its
    MLflow run. An error of the creation (a tracking server that does not answer:
    ``ConfigError``) is raised there.

    Args:
        tracker: The run's tracker, its run begun (or reopened).
        spec: The run's spec (output directory, reporter).
        uri: The tracking URI, as recorded.
        written: The record exists already (a resumed run).
    """

    def __init__(self, tracker: Any, spec: RunSpec, uri: str, written: bool = False) -> None:
        self.tracker, self.spec, self.uri = tracker, spec, uri
        self.written = written
        self._raised: BaseException | None = None  # the creation's error, once raised from a hook

    def write(self) -> None:
        """Write the record (once); waits for the run's creation and raises its error. A run
        whose creation waits for the tracking server (a sweep's job) is left to its tracker,
        which writes the record when it creates the run."""
        if self.written:
            return
        run_id = self.tracker.started()
        if run_id is None:
            self.written = True
            return
        if self.spec.reporter is not None:
            self.spec.reporter.link_run(run_id)
        write_run_file(self.spec.output_dir, run_id, self.uri, self.tracker.experiment_id)
        self.written = True

    def run_exists(self, finished: bool) -> bool:
        """Whether the run was created (waits for its creation). A creation that failed is
        raised when training finished; when training stopped for another reason (being
        raised), it is reported on stderr, unless it is that reason."""
        try:
            self.tracker.started()
        except Exception as error:
            if finished:
                raise
            if error is not self._raised:
                print(f"rlplat-train: warning: the run was not recorded in MLflow ({error})", file=sys.stderr)
            return False
        return True

    def _write_from_hook(self) -> None:
        try:
            self.write()
        except Exception as error:
            self._raised = error
            raise

    def _write_when_due(self) -> None:
        """Write the record once the tracker has answered, or, waiting for it, once the run
        has a periodic checkpoint (it can be resumed from then on)."""
        if self.written:
            return
        if self.tracker.start_answered() or periodic_checkpoints(self.spec.output_dir):
            self._write_from_hook()

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """A log step: write the record when due."""
        self._write_when_due()

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Nothing more: an evaluation was logged first."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """``best.pt``: as a log step. ``final.pt``: write the record, waiting for the run."""
        if best:
            self._write_when_due()
        else:
            self._write_from_hook()


def _startup_seconds(spec: RunSpec) -> float | None:
    """Seconds from the job's start to now (``time/startup_s``); None when unknown, or for a
    resumed run (its first process logged it)."""
    return None if spec.job_start is None or spec.resume_run is not None else time.time() - spec.job_start


def _start_loggers(built: Build, spec: RunSpec, after_step: int | None, startup: float | None) -> list[Any]:
    """The loggers of ``tracking.also`` in the run directory, given the job's start-up time
    (``time/startup_s`` at step 0, as MLflow gets it)."""
    from rlplat.loggers import make_loggers

    loggers = make_loggers(built.tracking.also, spec.output_dir, after_step)
    if startup is not None:
        for logger in loggers:
            logger.on_log({"time/startup_s": startup}, 0)
    return loggers


def env_label(choice: str, env_node: Mapping[str, Any]) -> str:
    """The env as a run's name and console title show it: the ``env=`` choice, or for the
    generic ``env=gym`` the gymnasium id it was given (``Acrobot-v1``)."""
    return str(env_node.get("id") or choice) if choice == "gym" else choice


def _description(built: Build, tags: dict[str, str]) -> str:
    """The run's description on its MLflow page: the command, what is trained, where."""
    env = built.config["env"]
    env_name = env.get("id", env.get("name", tags["env"]))
    frames = built.trainer.total_frames
    return (
        f"`{tags.get('command', 'rlplat-train')}`\n\n{tags['algo']} on {env_name}, seed {tags['seed']}, "
        f"{frames:,} frames. Run directory: `{tags[RUN_DIR_TAG]}`."
    )


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
    name = tracking.run_name or f"{tags['algo']}-{env_label(tags['env'], built.config['env'])}-s{tags['seed']}"
    tags.setdefault(DESCRIPTION_TAG, _description(built, tags))
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
