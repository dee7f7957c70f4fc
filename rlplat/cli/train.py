"""rlplat-train: compose the config with Hydra, train, record the run in MLflow.

    rlplat-train algo=ppo env=pendulum
    rlplat-train -m algo=ppo env=cartpole seed=0,1,2
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rlplat import __version__
from rlplat.config import (
    check_command_line,
    register_group_options,
    register_hydra_plugins,
    unroute,
)
from rlplat.registry import ConfigError, PluginError

log = logging.getLogger(__name__)


def train(cfg: DictConfig, output_dir: Path, algo: str, env: str, command: str, job_start: float) -> float:
    """Build the trainer, record the run in MLflow, train; returns ``trainer.objective``.

    Config errors are raised before an MLflow run exists. Once it exists, the run ends
    FINISHED, KILLED when a sweeper's pruner stopped it (tag ``rlplat.pruned``), or FAILED on
    any other exception (re-raised), never RUNNING. In a multirun the run is the child of
    the sweep's parent run. The metric ``time/startup_s`` is the start-up cost: seconds from
    ``job_start`` to the first env step.

    Args:
        job_start: ``time.time()`` when the job started: when its process started, for the
            first job of a process.

    Raises:
        ConfigError: for invalid config values.
    """
    from rlplat.multirun import PRUNED_TAG, active_parent, child_tags
    from rlplat.optuna_sweeper import TrialReporter
    from rlplat.tracking import Tracker, TrackingConfig, flatten, run_tags
    from rlplat.trainer import Trainer

    tracking = TrackingConfig.from_node(cfg.tracking)
    title = f"{algo} / {env} / seed {cfg.seed}"
    trainer = Trainer(cfg, output_dir, title=title)
    trainer.job_start = job_start
    try:
        reporter = TrialReporter.from_environment(trainer.config.objective)
        if reporter is not None:
            trainer.evaluation_hooks.append(reporter)
        if not tracking.enabled:
            return trainer.fit()
        tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location)
        tags = run_tags(algo, env, int(cfg.seed), __version__, command, Path(hydra.utils.get_original_cwd()))
        parent = active_parent()
        if parent is not None and HydraConfig.get().mode == RunMode.MULTIRUN:
            if parent.uri != tracking.uri:
                log.warning(f"tracking.uri={tracking.uri!r} differs from the sweep's ({parent.uri!r}): "
                            "this run is not nested under the sweep's parent run")
            else:
                tags.update(child_tags(parent, HydraConfig.get()))
        if reporter is not None:
            tags["optuna.trial"] = str(reporter.number)
        params = flatten(OmegaConf.to_container(cfg, resolve=True))
        tracker.start(tracking.run_name or f"{algo}-{env}-s{cfg.seed}", params, tags)
        trainer.tracker = tracker
        status = "FAILED"
        try:
            resolved = output_dir / "config.yaml"
            OmegaConf.save(cfg, resolved, resolve=True)
            tracker.log_artifact(resolved)
            tracker.log_artifact(output_dir / ".hydra", "hydra")
            objective = trainer.fit()
            status = "FINISHED"
            return objective
        except Exception as error:
            if reporter is not None and reporter.pruned(error):
                tracker.set_tags({PRUNED_TAG: "true"})
                status = "KILLED"
            raise
        finally:
            tracker.end(status)
    finally:
        trainer.close()


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


def task(cfg: DictConfig) -> float:
    """Hydra's task function: one job, in this process or in a launcher's worker."""
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    output_dir = Path(runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:  # the job's own command, also on a remote worker
        command = shlex.join(["rlplat-train", *map(unroute, hydra_cfg.overrides.task)])
    else:
        command = shlex.join(["rlplat-train", *map(unroute, sys.argv[1:])])
    try:
        return train(cfg, output_dir, runtime.choices.get("algo"), runtime.choices.get("env"), command, job_start())
    except (ConfigError, PluginError) as error:
        shutil.rmtree(output_dir, ignore_errors=True)  # nothing half-written
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hydra_cfg.mode == RunMode.MULTIRUN:
            raise  # in a sweep: this job fails, the sweeper decides about the rest
        _fail(error)


def job_start() -> float:
    """When the current job started: its process's start for the first job of a process
    (imports included), else now."""
    global _jobs_started
    _jobs_started += 1
    return process_start_time() if _jobs_started == 1 else time.time()


def _fail(error: Exception) -> None:
    print(f"rlplat-train: error: {error}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Console entry point of ``rlplat-train``."""
    try:
        register_hydra_plugins()
        register_group_options()
        sys.argv[1:] = check_command_line(sys.argv[1:])
    except (ConfigError, PluginError) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _fail(error)
    # Decorated here rather than at definition, so that launchers pickle `task` by reference.
    hydra.main(config_path="pkg://rlplat.conf", config_name="config", version_base="1.3")(task)()


if __name__ == "__main__":
    main()
