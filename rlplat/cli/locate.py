"""Find a run's checkpoint from what a user types: :mod:`rlplat.tracking.locate`, where the
build (a loss add-on's reference run) finds runs too; re-exported for the commands."""

from rlplat.tracking.locate import SWEEP_FILE, Located, locate, run_dir_of, run_of_dir, with_source_run

__all__ = ["SWEEP_FILE", "Located", "locate", "run_dir_of", "run_of_dir", "with_source_run"]
