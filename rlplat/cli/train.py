"""rlplat-train: compose the config with Hydra, build the parts, fit, record in MLflow.

    rlplat-train algo=ppo env=pendulum
    rlplat-train -m algo=ppo env=cartpole seed=0,1,2

compose (Hydra, :mod:`rlplat.hydra_ext`) -> build (:func:`rlplat.build.build`, every check)
-> fit (:class:`rlplat.trainer.Trainer`); bad input is reported here, in one place.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from hydra_plugins.rlplat_optuna_sweeper import register_sweeper
from rlplat import __version__
from rlplat.hydra_ext import register_group_options, register_hydra_plugins, route, unroute
from rlplat.registry import ConfigError, PluginError

if TYPE_CHECKING:
    from rlplat.trainer import Callback


def train(cfg: DictConfig, output_dir: Path, command: str, job_start: float) -> float:
    """Build the parts, record the run in MLflow, fit; returns ``trainer.objective``.

    Every config error is raised by the build, before an MLflow run exists. Once it exists,
    the run ends FINISHED, KILLED when a sweeper's pruner stopped it (tag
    ``rlplat.pruned``), or FAILED on any other exception (re-raised), never RUNNING. In a
    multirun the run is the child of the sweep's parent run.

    Args:
        cfg: The composed config.
        output_dir: The run directory (Hydra's).
        command: The ``rlplat-train`` command that reruns this job alone.
        job_start: ``time.time()`` when the job started (its process's start for the first
            job of a process): ``time/startup_s`` is measured from it to the first env step.

    Raises:
        ConfigError, PluginError: for invalid config or a broken plugin.
    """
    from rlplat.build import build
    from rlplat.console import TrainingDisplay
    from rlplat.sweep.reporter import TrialReporter
    from rlplat.trainer import Trainer

    built = build(cfg)
    try:
        choices = HydraConfig.get().runtime.choices
        algo, env, seed = str(choices.get("algo")), str(choices.get("env")), built.config["seed"]
        reporter = TrialReporter.from_environment(built.trainer.objective)
        title = f"{algo} / {env} / seed {seed}"
        with TrainingDisplay(title, built.trainer.total_frames) as display:
            callbacks: list[Callback] = [display, *([reporter] if reporter else [])]
            if not built.tracking.enabled:
                summary = Trainer(built.parts, built.trainer, output_dir, callbacks).fit()
            else:
                tags = _tags(cfg, algo, env, command, reporter)
                summary = _recorded_fit(built, output_dir, tags, callbacks, job_start, reporter)
        display.summary(
            {
                "frames": int(summary["frames"]),
                "wall time (s)": summary["time/train_s"],
                **{k: v for k, v in summary.items() if "/" in k and k != "time/train_s"},
            }
        )
        return summary[built.trainer.objective]
    finally:
        built.parts.close()


def _tags(cfg: DictConfig, algo: str, env: str, command: str, reporter: Any) -> dict[str, str]:
    """The run's tags: rlplat's own, plus the sweep's when this job is a sweep's child."""
    from rlplat.sweep.parent import active_parent, child_tags
    from rlplat.tracking import run_tags

    tags = run_tags(algo, env, int(cfg.seed), __version__, command, Path(hydra.utils.get_original_cwd()))
    parent = active_parent()
    if parent is not None and HydraConfig.get().mode == RunMode.MULTIRUN:
        uri = str(cfg.tracking.uri)
        if parent.uri != uri:
            print(
                f"rlplat-train: warning: tracking.uri={uri!r} differs from the sweep's ({parent.uri!r}): "
                "this run is not nested under the sweep's parent run",
                file=sys.stderr,
            )
        else:
            tags.update(child_tags(parent, HydraConfig.get()))
    if reporter is not None:
        tags["optuna.trial"] = str(reporter.number)
    return tags


def _recorded_fit(
    built: Any, output_dir: Path, tags: dict[str, str], callbacks: list[Callback], job_start: float, reporter: Any
) -> dict[str, float]:
    """Fit inside an MLflow run that always ends FINISHED, KILLED (pruned) or FAILED."""
    from omegaconf import OmegaConf

    from rlplat.sweep.parent import PRUNED_TAG
    from rlplat.tracking import Tracker, TrackerCallback, flatten
    from rlplat.trainer import Trainer

    tracking = built.tracking
    tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location)
    name = tracking.run_name or f"{tags['algo']}-{tags['env']}-s{tags['seed']}"
    tracker.start(name, flatten(built.config), tags)
    status = "FAILED"
    try:
        resolved = output_dir / "config.yaml"
        OmegaConf.save(OmegaConf.create(dict(built.config)), resolved)
        tracker.log_artifact(resolved)
        tracker.log_artifact(output_dir / ".hydra", "hydra")
        tracker.log_metrics({"time/startup_s": time.time() - job_start}, step=0)
        trainer = Trainer(built.parts, built.trainer, output_dir, [TrackerCallback(tracker), *callbacks])
        summary = trainer.fit()
        status = "FINISHED"
        return summary
    except BaseException as error:
        if reporter is not None and reporter.pruned(error):
            tracker.set_tags({PRUNED_TAG: "true"})
            status = "KILLED"
        raise
    finally:
        tracker.end(status)


def process_start_time() -> float:
    """``time.time()`` at which this process started (Linux /proc, 10 ms resolution);
    elsewhere, when this module was imported."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


_IMPORTED = time.time()
_jobs_started = 0


def job_start() -> float:
    """When the current job started: its process's start for the first job of a process
    (imports included), else now."""
    global _jobs_started
    _jobs_started += 1
    return process_start_time() if _jobs_started == 1 else time.time()


def task(cfg: DictConfig) -> float:
    """Hydra's task function: one job, in this process or in a launcher's worker."""
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    args = hydra_cfg.overrides.task if multirun else sys.argv[1:]  # multirun: the job's own command
    command = shlex.join(["rlplat-train", *map(unroute, args)])
    try:
        return train(cfg, output_dir, command, job_start())
    except (ConfigError, PluginError) as error:
        shutil.rmtree(output_dir, ignore_errors=True)  # nothing half-written
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or multirun:
            raise  # in a sweep: this job fails, the sweeper decides about the rest
        fail(error)


def fail(error: Exception) -> NoReturn:
    """Report bad input as one line on stderr and exit with status 2."""
    print(f"rlplat-train: error: {error}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Console entry point of ``rlplat-train``."""
    try:
        register_hydra_plugins()
        register_sweeper()
        register_group_options()
        sys.argv[1:] = route(sys.argv[1:])
    except (ConfigError, PluginError) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        fail(error)
    # Decorated here rather than at definition, so that launchers pickle `task` by reference.
    hydra.main(config_path="pkg://rlplat.conf", config_name="config", version_base="1.3")(task)()


if __name__ == "__main__":
    main()
