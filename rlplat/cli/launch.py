"""The ``rlplat-train`` console script: MLflow's child process first, then the command.

The child process that records the run in MLflow (:mod:`rlplat.tracking.process`) takes
~1.2 s to import MLflow, and the run's creation waits for it. Started here, before
:mod:`rlplat.cli.train` and Hydra are imported (~0.15 s), it is ready about when the parts
are built. Which command lines start a run is read from their flags alone
(:func:`rlplat.command_line.starts_one_run`).
"""

from __future__ import annotations

import sys

from rlplat.command_line import starts_one_run


def main() -> None:
    """Console entry point of ``rlplat-train``: :func:`rlplat.cli.train.main`."""
    tracker = None
    if starts_one_run(sys.argv[1:]):
        from rlplat.tracking.process import TrackerProcess

        tracker = TrackerProcess.spare()
    from rlplat.cli.train import main as train

    train(tracker)


if __name__ == "__main__":
    main()
