"""rlplat-train: compose the config with Hydra, train, record the run in MLflow.

    rlplat-train algo=ppo env=pendulum
    rlplat-train -m algo=ppo env=cartpole seed=0,1,2
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlplat import __version__
from rlplat.config import check_command_line, register_group_options
from rlplat.registry import ConfigError, PluginError


def train(cfg: DictConfig, output_dir: Path, algo: str, env: str, command: str) -> float:
    """Build the trainer, record the run in MLflow, train; returns ``trainer.objective``.

    Config errors are raised before an MLflow run exists. Once it exists, the run ends
    FINISHED, or FAILED on any exception (re-raised), never RUNNING.

    Raises:
        ConfigError: for invalid config values.
    """
    from rlplat.tracking import Tracker, TrackingConfig, flatten, run_tags
    from rlplat.trainer import Trainer

    tracking = TrackingConfig.from_node(cfg.tracking)
    title = f"{algo} / {env} / seed {cfg.seed}"
    trainer = Trainer(cfg, output_dir, title=title)
    try:
        if not tracking.enabled:
            return trainer.fit()
        tracker = Tracker(tracking.uri, tracking.experiment, tracking.artifact_location)
        tags = run_tags(algo, env, int(cfg.seed), __version__, command, Path(hydra.utils.get_original_cwd()))
        params = flatten(OmegaConf.to_container(cfg, resolve=True))
        tracker.start(tracking.run_name or f"{algo}-{env}-s{cfg.seed}", params, tags)
        trainer.tracker = tracker
        failed = True
        try:
            resolved = output_dir / "config.yaml"
            OmegaConf.save(cfg, resolved, resolve=True)
            tracker.log_artifact(resolved)
            tracker.log_artifact(output_dir / ".hydra", "hydra")
            objective = trainer.fit()
            failed = False
            return objective
        finally:
            tracker.end(failed=failed)
    finally:
        trainer.close()


@hydra.main(config_path="pkg://rlplat.conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float:
    runtime = HydraConfig.get().runtime
    output_dir = Path(runtime.output_dir)
    command = shlex.join(["rlplat-train", *sys.argv[1:]])
    try:
        return train(cfg, output_dir, runtime.choices.get("algo"), runtime.choices.get("env"), command)
    except (ConfigError, PluginError) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        shutil.rmtree(output_dir, ignore_errors=True)  # nothing half-written
        _fail(error)


def _fail(error: Exception) -> None:
    print(f"rlplat-train: error: {error}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Console entry point of ``rlplat-train``."""
    try:
        register_group_options()
        sys.argv[1:] = check_command_line(sys.argv[1:])
    except (ConfigError, PluginError) as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _fail(error)
    _hydra_main()


if __name__ == "__main__":
    main()
