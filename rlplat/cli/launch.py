"""The ``rlplat-train`` console script: MLflow's child process first, then the command.

The child process that records the run in MLflow (:mod:`rlplat.tracking.process`) takes
~1.2 s to import MLflow, and the run is created by it. Started here, before
:mod:`rlplat.cli.train` and Hydra are imported (~0.15 s), it is ready about when training
starts. Which command lines start a run is read from their flags alone
(:func:`rlplat.command_line.starts_one_run`). Python's garbage collector waits until
training starts (:func:`rlplat.command_line.collect_after_start_up`), and its last
collection, at exit, is skipped (:func:`rlplat.command_line.skip_final_collection`).
For such a run, :func:`rlplat.cli.train.main` has torch's shared libraries loaded in a
background thread while Hydra composes the config (:mod:`rlplat.torch_libraries`)."""

from __future__ import annotations

import sys

from rlplat.command_line import collect_after_start_up, skip_final_collection, starts_one_run


def main() -> None:
    """Console entry point of ``rlplat-train``: :func:`rlplat.cli.train.main`."""
    skip_final_collection()
    tracker = None
    if starts_one_run(sys.argv[1:]):
        collect_after_start_up()  # until training starts (rlplat.cli.run.run_training)
        from rlplat.tracking.process import TrackerProcess

        tracker = TrackerProcess.spare()
    from rlplat.cli.train import main as train

    train(tracker)


if __name__ == "__main__":
    main()
