"""The ``rlplat-train`` console script: read the command line, then hand it to Hydra.

    rlplat-train algo=ppo env=pendulum
    rlplat-train -m algo=ppo env=cartpole seed=0,1,2
    rlplat-train resume=<run id | run dir | sweep dir>

The way to the loop: :func:`main` -> :func:`rlplat.cli.train.train` (Hydra's task: checks,
:func:`rlplat.build.build`) -> :func:`rlplat.cli.run.run_training` (the MLflow run, signals,
the checkpoint on a stop) -> :meth:`rlplat.trainer.Trainer.fit`. A single run starts MLflow's
child process (:mod:`rlplat.tracking.process`, ~1.2 s to import MLflow) here, before Hydra is
imported, so that it is ready about when training starts.
"""

from __future__ import annotations

import os
import sys

from rlplat.command_line import collect_after_start_up, is_multirun, is_resume, prints_only, skip_final_collection
from rlplat.signals import LIFE, Phase, stopped_in_start_up


def main() -> None:
    """Console entry point of ``rlplat-train``. Bad input, and Hydra's own errors in a single run,
    are one line and exit status 2 (``HYDRA_FULL_ERROR=1`` shows the traceback); Ctrl-C before
    training is one line and exit status 130, nothing recorded."""
    skip_final_collection()
    args = sys.argv[1:]
    tracker = None
    single_run = not (is_multirun(args) or prints_only(args) or is_resume(args))
    if single_run:
        collect_after_start_up()  # until training starts
        from rlplat.tracking.process import TrackerProcess

        tracker = TrackerProcess.spare()
    try:
        if is_resume(args):  # the run's config is in its checkpoint: no composition
            from rlplat.cli.resume import main as resume

            sys.exit(resume(args))
        _compose_and_train(args, tracker, single_run)
    except KeyboardInterrupt:
        if LIFE.phase is not Phase.START_UP:
            raise
        stopped_in_start_up()
    finally:
        if tracker is not None and tracker.uri is None:
            tracker.discard()  # not taken: tracking off, or the config was rejected


def _compose_and_train(args: list[str], tracker: object, single_run: bool) -> None:
    """Register rlplat's Hydra plugins and options, check the command line, run Hydra with
    :class:`rlplat.cli.train.Job`. Hydra prints its errors and exits 1 unless ``HYDRA_FULL_ERROR=1``,
    where it raises them: a single run sets it to compose (the job restores the user's value)."""
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from hydra_plugins.rlplat_optuna_sweeper import register_sweeper
    from rlplat.cli.args import fail
    from rlplat.cli.train import Job, set_full_error
    from rlplat.hydra_ext import register_group_options, register_hydra_plugins, route
    from rlplat.hydra_ext.validate import check_command_line
    from rlplat.registry import ConfigError, PluginError

    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    try:
        register_hydra_plugins()
        register_sweeper()
        register_group_options()
        sys.argv[1:] = route(args)
        check_command_line(sys.argv[1:])
        if single_run:
            os.environ["HYDRA_FULL_ERROR"] = "1"
        job = Job(tracker, user_full_error, restore=single_run)
        # decorated here, not at definition, so that launchers pickle the job by reference
        hydra.main(config_path="pkg://rlplat.conf", config_name="config", version_base="1.3")(job)()
    except (HydraException, OmegaConfBaseException, ConfigError, PluginError) as error:
        if user_full_error == "1" or not (single_run or isinstance(error, (ConfigError, PluginError))):
            raise
        fail("rlplat-train", error)
    finally:
        set_full_error(user_full_error)


if __name__ == "__main__":
    main()
