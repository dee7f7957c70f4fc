"""Multirun glue: the sweep's MLflow parent run, the job table, the Optuna search and its reporter.

Modules, each importing only the ones above it (and :mod:`rlplat.hydra_ext`):

* :mod:`~rlplat.sweep.runs`: how a sweep is recorded in MLflow (tags, the parent run);
* :mod:`~rlplat.sweep.table`: the job table read back from MLflow;
* :mod:`~rlplat.sweep.optuna`: the Optuna search behind ``hydra/sweeper=rlplat_optuna``;
* :mod:`~rlplat.sweep.reporter`: a job's side of pruning;
* :mod:`~rlplat.sweep.parent`: the Hydra callback ``MlflowSweep`` (re-exports runs' names).

This package imports nothing at import, so that ``hydra_plugins.rlplat_optuna_sweeper`` can
import :mod:`rlplat.sweep.optuna` without a cycle; MLflow and Optuna load only when used.
"""
