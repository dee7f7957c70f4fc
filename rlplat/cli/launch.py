"""The ``rlplat-train`` console script: MLflow's child process first, then the command.

The child process that records the run in MLflow (:mod:`rlplat.tracking.process`) takes
~1.2 s to import MLflow, and the run is created by it. Started here, before
:mod:`rlplat.cli.train` and Hydra are imported (~0.15 s), it is ready about when training
starts. Which command lines start a run is read from their flags alone
(:func:`rlplat.command_line.starts_one_run`). Python's garbage collector waits until
training starts (:func:`rlplat.command_line.collect_after_start_up`), and its last
collection, at exit, is skipped (:func:`rlplat.command_line.skip_final_collection`)."""

from __future__ import annotations

import sys

from rlplat.command_line import (
    STOPPED_IN_START_UP,
    collect_after_start_up,
    in_start_up,
    skip_final_collection,
    starts_one_run,
)


def main() -> None:
    """Console entry point of ``rlplat-train``: :func:`rlplat.cli.train.main`.

    Ctrl-C during a new run's start-up (imports, composition, the build), before its MLflow
    run begins, stops it with one line and exit status 130; its run directory is removed
    (:func:`rlplat.cli.train.task`). So does Ctrl-C during a sweep's start-up, before its
    parent run begins (:meth:`rlplat.sweep.parent.MlflowSweep.on_multirun_start`), and
    during a resume's, before its training (the run is left as it was). Once training has
    started, a signal stops the run after its rollout (:mod:`rlplat.cli.run`), and a
    sweep's jobs as :func:`rlplat.sweep.runs.wait_for_the_jobs_on_signals` says."""
    skip_final_collection()
    tracker = None
    if starts_one_run(sys.argv[1:]):
        collect_after_start_up()  # until training starts (rlplat.cli.run.run_training)
        from rlplat.tracking.process import TrackerProcess

        tracker = TrackerProcess.spare()
    try:
        from rlplat.cli.train import main as train

        train(tracker)
    except KeyboardInterrupt:
        if not in_start_up():
            raise
        print(STOPPED_IN_START_UP, file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
