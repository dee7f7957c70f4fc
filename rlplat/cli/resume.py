"""``rlplat-train resume=<run id | run dir | sweep dir>``: continue a run, or a sweep's
unfinished jobs, from the newest readable checkpoint.

The run goes on in the same MLflow run (same id; status back to RUNNING, then FINISHED),
with the config stored in the checkpoint; metrics continue after the last step already
logged, params are not logged again. A corrupt newest checkpoint is skipped with a warning
for the previous one. For a sweep directory, jobs whose run FINISHED are skipped and the
others resume one after another; the sweep's parent run ends FINISHED again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rlplat.checkpoint import CHECKPOINT_DIR
from rlplat.cli.locate import SWEEP_FILE, locate, read_run_file, run_of_dir, write_run_file
from rlplat.deferred_dynamo import defer_dynamo
from rlplat.registry import ConfigError, PluginError
from rlplat.tags import PARENT_TAG

ALLOWED = ("resume", "tracking.uri")


def main(args: list[str]) -> int:
    """Resume what ``resume=`` names; returns the exit status (2 for bad input)."""
    try:
        options = _parse(args)
        target = options["resume"]
        uri = options.get("tracking.uri") or f"sqlite:///{Path.cwd() / 'outputs' / 'mlflow.db'}"
        if (Path(target) / SWEEP_FILE).is_file():
            return resume_sweep(Path(target))
        resume_run(target, uri)
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


def _warn(message: str) -> None:
    print(f"rlplat-train: warning: {message}", file=sys.stderr)


def resume_run(target: str, tracking_uri: str) -> None:
    """Continue one run from its newest readable checkpoint.

    Raises:
        ConfigError: for an unknown run, a directory without checkpoints or a checkpoint
            that cannot be read.
        SystemExit: 130 or 143 when a signal stops it again (see :mod:`rlplat.cli.run`).
    """
    from omegaconf import OmegaConf

    defer_dynamo()  # before the build imports tensordict
    from rlplat.build import build
    from rlplat.cli.record import video_callbacks
    from rlplat.cli.run import RunSpec, run_training

    located = locate("resume", target, tracking_uri, which="newest", warn=_warn)
    if located.run_dir is None:
        raise ConfigError(f"resume={target!r}: a checkpoint outside a run directory cannot be resumed")
    config = located.state["config"]
    built = build(OmegaConf.create(dict(config)))
    try:
        frames = int(located.state["frames"])
        print(
            f"rlplat-train: resuming {located.run_id or located.run_dir} from {located.checkpoint} "
            f"({frames:,} of {built.trainer.total_frames:,} frames)",
            file=sys.stderr,
        )
        title = f"{config['loss']['name']} / resumed / seed {config['seed']}"
        run, tags = located.run_id, {}
        tracking = built.tracking
        if tracking.enabled and not read_run_file(located.run_dir):  # killed before it recorded its run
            found = run_of_dir(located.run_dir, tracking.uri, tracking.experiment)
            if found is not None:
                run = found[0]
                write_run_file(located.run_dir, run, tracking.uri, found[1])
            else:
                _warn(
                    f"{located.run_dir} has no MLflow run in {tracking.uri} (stopped before one was created): "
                    "the resumed run is recorded as a new run"
                )
                tags = _new_run_tags(config, located.run_dir, target)
        callbacks = video_callbacks(built, located.run_dir, start_frames=frames)
        spec = RunSpec(
            located.run_dir,
            title,
            tags=tags,
            resume_run=run if tracking.enabled else None,
            state=located.state,
            callbacks=callbacks,
        )
        run_training(built, spec)
    finally:
        built.parts.close()


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
    """Resume each unfinished job of a sweep (jobs whose run FINISHED are skipped); the
    parent run ends FINISHED. Returns 0, or 1 when a job failed again."""
    from mlflow import MlflowClient

    jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    parents, failed = set(), 0

    def recorded_run(record: dict[str, str]) -> Any:
        """The job's MLflow run; its sweep's parent run is noted to end FINISHED."""
        run = MlflowClient(tracking_uri=record["tracking_uri"]).get_run(record["run_id"])
        parents.add((record["tracking_uri"], run.data.tags.get(PARENT_TAG)))
        return run

    for job in jobs:
        record = read_run_file(job)
        if record:
            run = recorded_run(record)
            if run.info.status == "FINISHED":
                print(f"rlplat-train: job {job.name} finished already ({record['run_id']})", file=sys.stderr)
                continue
        elif not any((job / CHECKPOINT_DIR).glob("step_*.pt")):
            _warn(f"job {job.name} never started a run; rerun the sweep's command for it")
            continue
        # a job without a record but with a checkpoint was killed before it recorded its run:
        # resume_run finds the run by its directory (the URI is only for run ids)
        try:
            resume_run(str(job), record.get("tracking_uri", ""))
        except (ConfigError, PluginError) as error:
            _warn(f"job {job.name} not resumed: {error}")
            failed += 1
        if not record and (written := read_run_file(job)):  # the record the resume wrote
            recorded_run(written)
    for uri, parent in parents:
        if parent:
            MlflowClient(tracking_uri=uri).set_terminated(parent, status="FINISHED")
    return 1 if failed else 0
