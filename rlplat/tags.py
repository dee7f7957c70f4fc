"""Names of the MLflow tags rlplat writes on runs and reads back (sweeps, reports, resume).

Declared once, below every package that uses them, so that the sweep glue, the report and
the command-line tools agree without importing each other (or MLflow).
"""

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag: the UI shows children under parents
DESCRIPTION_TAG = "mlflow.note.content"  # MLflow's run description, shown as Markdown on the run's page
SWEEP_TAG = "rlplat.sweep"  # on parent and children: the sweep's output directory
OVERRIDES_TAG = "rlplat.overrides"  # on every run: its overrides as typed, space-separated
JOB_TAG = "rlplat.job"  # on a child: the job's number in the sweep
PRUNED_TAG = "rlplat.pruned"  # on a child stopped early by a pruner: "true"
SIGNAL_TAG = "rlplat.signal"  # on a run (or a sweep's parent) stopped by a signal: its name, as signal.Signals names it
RESTARTED_TAG = "rlplat.restarted"  # on a child that stopped before its first checkpoint and was started again: "true"
SOURCE_RUN_TAG = "rlplat.source_run"  # on an rlplat-eval run: the id of the run whose checkpoint it evaluated
RUN_DIR_TAG = "rlplat.run_dir"  # on every run: its absolute run directory (Hydra's output directory)
TRIAL_TAG = "optuna.trial"  # on an Optuna sweep's child: its trial's number in the study
SEED_INDEX_TAG = "optuna.seed_index"  # on such a child when trials run on several seeds: 0 .. seeds_per_trial - 1
MLFLOW_SOURCE_NAME = "mlflow.source.name"  # MLflow's system tag: the command that ran (the UI's "Source")
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"  # MLflow's system tag: the git commit of the source

DIRECTION_PARAM = "sweep.direction"  # param of a sweep's parent whose sweeper is directed: "maximize" or "minimize"
WAITED_TAG = (
    "rlplat.waited_for_server"  # on a run whose creation or writes waited for an unreachable tracking server: "true"
)
