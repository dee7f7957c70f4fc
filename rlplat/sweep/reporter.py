"""The job's side of pruning: report the objective after each evaluation, stop when told to.

A job launched by the ``rlplat_optuna`` sweeper finds its trial through the environment
variables the sweeper sets (:mod:`rlplat.sweep.optuna`): the study's storage, its name and
the trial's number. Optuna is imported only inside such a job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlplat.metrics import TO_TARGET, TRAIN_SECONDS
from rlplat.sweep.optuna import (
    ENV_SEED_INDEX,
    ENV_SEEDS,
    ENV_STORAGE,
    ENV_STUDY,
    ENV_TRIAL_NUMBER,
    PRUNER_ATTR,
    make_pruner,
    open_storage,
)


def _attach_trial(storage: Any, study_name: str, number: int) -> Any:
    """The running trial ``number`` of study ``study_name``, as an ``optuna.trial.Trial``.

    Optuna has no public way to reach a trial that another process asked for: its documented
    routes (``study.optimize``, ``study.ask``) only create trials. This function is the one
    place rlplat goes around that: it reads ids through the storage's documented methods and
    calls ``optuna.trial.Trial(study, trial_id)``, whose docs advise against direct use.
    """
    import optuna

    study_id = storage.get_study_id_from_name(study_name)
    pruner = make_pruner(storage.get_study_user_attrs(study_id)[PRUNER_ATTR])
    study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return optuna.trial.Trial(study, trial_id)


class TrialReporter:
    """Reports ``objective`` to this job's Optuna trial after each evaluation.

    A trainer callback (the hooks of :class:`rlplat.trainer.Callback`, without importing the
    trainer): :meth:`on_evaluation` reports, and raises ``optuna.TrialPruned`` to stop training.

    A trial run on several seeds (``hydra.sweeper.seeds_per_trial``) has one job per seed,
    each with its own reporter. Each records its value at each step as a user attribute of
    the trial (``seed<index>@<frames>``); the job that finds every seed's value at a step
    reports their mean as the trial's intermediate value there (two jobs may both find it
    and report the same mean). Every job then asks the pruner, which judges the trial at its
    last reported step, so a job that runs ahead of the others stops at its next evaluation
    after the trial is pruned. Seeds run one after another (a serial launcher) are judged
    only while the last of them runs, when every step has all its values.

    Args:
        objective: Metric reported as the intermediate value (``trainer.objective``).
        storage: The study's storage: an RDB URL or a journal file path.
        study_name: The study's name.
        number: The trial's number in the study.
        seed_index: Which of the trial's seeds this job runs.
        seeds: How many seeds the trial runs (``seeds_per_trial``).
    """

    def __init__(
        self, objective: str, *, storage: str, study_name: str, number: int, seed_index: int = 0, seeds: int = 1
    ) -> None:
        self.storage = open_storage(storage)
        self.trial = _attach_trial(self.storage, study_name, number)
        study_id = self.storage.get_study_id_from_name(study_name)
        self.trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, number)
        self.objective = objective
        self.number = number
        self.seed_index = seed_index
        self.seeds = seeds

    @classmethod
    def from_environment(cls, objective: str) -> TrialReporter | None:
        """The reporter for this job's trial, or None when this job is not an Optuna trial.

        Args:
            objective: Metric reported as the intermediate value (``trainer.objective``).
        """
        if ENV_TRIAL_NUMBER not in os.environ:
            return None
        return cls(
            objective,
            storage=os.environ[ENV_STORAGE],
            study_name=os.environ[ENV_STUDY],
            number=int(os.environ[ENV_TRIAL_NUMBER]),
            seed_index=int(os.environ.get(ENV_SEED_INDEX, "0")),
            seeds=int(os.environ.get(ENV_SEEDS, "1")),
        )

    @staticmethod
    def pruned(error: BaseException) -> bool:
        """Whether ``error`` is the pruner's stop signal (``optuna.TrialPruned``)."""
        import optuna

        return isinstance(error, optuna.TrialPruned)

    def __call__(self, metrics: Mapping[str, float], frames: int) -> None:
        """Report ``metrics[objective]`` at step ``frames``; nothing when it is missing.

        Args:
            metrics: An evaluation's metrics, name -> value.
            frames: Frames trained so far (the pruner's step).

        Raises:
            optuna.TrialPruned: when the study's pruner stops this trial.
        """
        import optuna

        value = self._value(metrics)
        if value is None:
            return
        if self.seeds == 1:
            self.trial.report(value, step=frames)
            prune = self.trial.should_prune()
        else:
            prune = self._report_mean_of_seeds(value, frames)
        if prune:
            raise optuna.TrialPruned(f"trial {self.number} pruned at {frames} frames ({self.objective} {value:.2f})")

    def _value(self, metrics: Mapping[str, float]) -> float | None:
        """The objective in ``metrics``; for ``time/to_target_s`` not reached yet, the
        training seconds so far (``time/train_s``), a lower bound of it. None when absent."""
        if self.objective in metrics:
            return float(metrics[self.objective])
        if self.objective == TO_TARGET and TRAIN_SECONDS in metrics:
            return float(metrics[TRAIN_SECONDS])
        return None

    def _report_mean_of_seeds(self, value: float, frames: int) -> bool:
        """Record this seed's value at ``frames``; report the seeds' mean once all have one.

        Returns:
            Whether the pruner stops the trial, judged on the trial as the storage has it now
            (``Trial.should_prune`` would judge only the values this process reported).
        """
        self.trial.set_user_attr(f"seed{self.seed_index}@{frames}", value)
        latest = self.storage.get_trial(self.trial_id)
        values = [latest.user_attrs.get(f"seed{i}@{frames}") for i in range(self.seeds)]
        if all(v is not None for v in values) and frames not in latest.intermediate_values:
            self.storage.set_trial_intermediate_value(self.trial_id, frames, sum(values) / self.seeds)
            latest = self.storage.get_trial(self.trial_id)
        study = self.trial.study
        return bool(latest.intermediate_values) and bool(study.pruner.prune(study, latest))

    def link_run(self, run_id: str) -> None:
        """Name this job's MLflow run on the trial: user attribute ``seed<index>.run_id``
        (one key per seed, so that a trial's jobs running at once never overwrite each other).

        Args:
            run_id: The MLflow run that records this job.
        """
        self.trial.set_user_attr(f"seed{self.seed_index}.run_id", run_id)

    def on_evaluation(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer hook after each evaluation: ``__call__``."""
        self(metrics, frames)

    def on_log(self, metrics: Mapping[str, float], frames: int) -> None:
        """Trainer hook after each log step: nothing (only evaluations are reported)."""

    def on_checkpoint(self, path: Path, best: bool) -> None:
        """Trainer hook after each checkpoint: nothing."""
