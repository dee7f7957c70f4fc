"""``rlplat-train resume=<run id | run dir | sweep dir>``: continue a run in its MLflow run,
with the config of its newest readable checkpoint, or a sweep's unfinished jobs
(:mod:`rlplat.sweep.resume`). See docs/guides/checkpoints.md.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rlplat.checkpoint import CheckpointError
from rlplat.cli.args import default_tracking_uri
from rlplat.registry import ConfigError, PluginError
from rlplat.signals import LIFE, exit_status, interrupted_by
from rlplat.sweep.resume import resume_sweep
from rlplat.sweep.runs import OPTUNA_JOURNAL, OPTUNA_RESULTS
from rlplat.tracking.locate import SWEEP_FILE, locate, run_to_continue
from rlplat.tracking.records import read_run_file
from rlplat.tracking.settings import absolute_sqlite_uri

ALLOWED = ("resume", "tracking.uri")


def _warn(message: str) -> None:
    print(f"rlplat-train: warning: {message}", file=sys.stderr)


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
                return resume_sweep(Path(target), resume_run)
            except KeyboardInterrupt as error:  # outside a job's training, which stops on its own (rlplat.cli.run)
                print(f"rlplat-train: stopped by {interrupted_by(error)} outside a job's training", file=sys.stderr)
                print(f"Resume with: rlplat-train resume={shlex.quote(str(Path(target).resolve()))}", file=sys.stderr)
                return exit_status(interrupted_by(error))
        _refuse_optuna_sweep(Path(target))
        # Ctrl-C before its training leaves the run as it was: rlplat.cli.launch.main says so
        resume_run(target, given or default_tracking_uri(), given_uri=given)
        return 0
    except (ConfigError, PluginError) as error:
        print(f"rlplat-train: error: {error}", file=sys.stderr)
        return 2


def _parse(args: list[str]) -> dict[str, str]:
    """``resume=... [tracking.uri=...]`` -> their values; raises ConfigError for anything else."""
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


def _refuse_other_store(given: str | None, target: str, stores: set[str]) -> None:
    """Raise ConfigError when ``tracking.uri`` was given with a directory whose runs are
    recorded in ``stores`` and names none: they go on there; it only says where a run id is."""
    if given is None or not stores or absolute_sqlite_uri(given) in stores:
        return
    raise ConfigError(
        f"tracking.uri={given!r}: resume={target!r} goes on in the store it was recorded in "
        f"({', '.join(sorted(stores))}); tracking.uri= only says where to find a run id: leave it out"
    )


def resume_run(target: str, tracking_uri: str, given_uri: str | None = None) -> None:
    """Continue one run, ``target`` (a run id looked up in ``tracking_uri``, a run directory or a
    checkpoint), from its newest readable checkpoint; ``given_uri`` (``tracking.uri`` as given)
    must name a directory's run's store.

    Raises:
        ConfigError: for an unknown run, a directory without checkpoints, a checkpoint that
            cannot be read, or a ``given_uri`` that is not the run directory's store.
        SystemExit: 130 or 143 when a signal stops it again (see :mod:`rlplat.cli.run`).
    """
    from omegaconf import OmegaConf

    from rlplat.build import build
    from rlplat.cli.run import RunSpec, run_training
    from rlplat.trainer import load_parts_state
    from rlplat.video import video_callbacks

    started = LIFE.job_start()
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
        run, tags = run_to_continue(located, built.tracking, target, _warn) if built.tracking.enabled else (None, {})
        spec = RunSpec(
            located.run_dir,
            f"{config['loss']['name']} / resumed / seed {built.seed}",
            tags=tags,
            resume_run=run,
            state=located.state,
            job_start=started,
            callbacks=video_callbacks(built, located.run_dir, start_frames=frames),
        )
        run_training(built, spec)
    finally:
        built.parts.close()
