"""An Optuna search for Hydra that prunes: RL-Zoo-style hyperparameter search over rlplat runs.

Select it with ``hydra/sweeper=rlplat_optuna`` (the Optuna sweeps in sweeps/ do)::

    rlplat-train -m +sweep=ppo_pendulum_hpo

The sweeper asks Optuna (current versions; hydra-optuna-sweeper pins optuna<3) for
``n_jobs`` trials at a time, launches them through whatever Hydra launcher is configured
(in-process, joblib, Ray, Slurm), and tells Optuna each result: the job's return value
(``trainer.objective``), PRUNED, or FAIL. The Sweeper class Hydra instantiates lives in
``hydra_plugins/rlplat_optuna_sweeper`` and delegates to :class:`OptunaSearch`.

Pruning happens inside the job (:mod:`rlplat.sweep.reporter`): after each evaluation the
trainer reports ``trainer.objective`` as the trial's intermediate value, at step = frames,
and the job stops early when the study's pruner says so (median or successive halving).
The job reaches the study through its storage, named to it by environment variables that
the sweeper sets with ``hydra.job.env_set``, so this works in any launcher whose workers see
the storage (by default a journal file in the sweep directory; give ``storage`` an RDB URL
for workers on other machines). A pruned job's MLflow run ends KILLED with tag
``rlplat.pruned=true``.

Seed-robust tuning: with ``hydra.sweeper.seeds_per_trial=k`` each trial runs as k jobs on
seeds ``seed``, ``seed + 1``, ..., launched together (in parallel where the launcher runs
jobs in parallel), each job's MLflow run tagged ``optuna.trial`` and ``optuna.seed_index``
(the trial, in turn, names its runs: user attributes ``seed<i>.run_id``).
The trial's value is the ``seed_aggregate`` (mean, median or IQM) of the k jobs' values,
and it is pruned on the mean of the seeds' intermediate values (see
:mod:`rlplat.sweep.reporter`); a trial with a failed job fails, one with a pruned job is
pruned.

Search space (``hydra.sweeper.params``), in Hydra's override grammar:

* ``interval(1e-4, 1e-2)``: float uniform; ``tag(log, interval(...))`` log-uniform;
  ``int(interval(8, 64))`` integer uniform;
* ``range(1, 10)`` or ``range(0, 1, step=0.1)``: a stepped int or float grid;
* ``choice(64, 128)`` or ``64,128``: categorical.

References: Akiba et al., "Optuna: A Next-generation Hyperparameter Optimization
Framework" (KDD 2019); Bergstra et al., "Algorithms for Hyper-Parameter Optimization"
(TPE, NeurIPS 2011); Li et al., "A System for Massively Parallel Hyperparameter Tuning"
(ASHA, MLSys 2020).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
)
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from rlplat.hydra_ext.overrides import env_set_override, route
from rlplat.registry import ConfigError, closest
from rlplat.signals import LIFE, exit_status
from rlplat.sweep.runs import (
    OPTUNA_JOURNAL,
    OPTUNA_RESULTS,
    log_to_active_parent,
)

log = logging.getLogger(__name__)

ENV_STORAGE = "RLPLAT_OPTUNA_STORAGE"  # the study's storage: an RDB URL or a journal file path
ENV_STUDY = "RLPLAT_OPTUNA_STUDY"  # the study's name
ENV_TRIAL_NUMBER = "RLPLAT_OPTUNA_TRIAL"  # the trial's number in the study
ENV_SEED_INDEX = "RLPLAT_OPTUNA_SEED_INDEX"  # which of the trial's seeds this job runs: 0 .. seeds_per_trial - 1
ENV_SEEDS = "RLPLAT_OPTUNA_SEEDS"  # the trial's seeds_per_trial
SEED_AGGREGATES = ("mean", "median", "iqm")
PRUNER_ATTR = "rlplat.pruner"  # study user attribute: the pruner config, so jobs build the same
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "successive_halving", "worse_than_best", "none")


@dataclass
class SamplerConf:
    """``hydra.sweeper.sampler``: how Optuna proposes trials."""

    name: str = "tpe"  # tpe (Bergstra et al. 2011) or random
    seed: int | None = None  # seed of the sampler; null draws one
    n_startup_trials: int = 5  # TPE: random trials before the model takes over


@dataclass
class PrunerConf:
    """``hydra.sweeper.pruner``: when a running trial stops early. Steps are frames."""

    name: str = "median"  # median, successive_halving, worse_than_best, or none
    n_startup_trials: int = 5  # median: trials that complete before any pruning
    n_warmup_steps: int = 0  # median: frames of a trial before it can be pruned
    interval_steps: int = 1  # median: frames between pruning checks (each report is checked when 1)
    min_resource: int = 1  # successive halving: frames before the first rung
    reduction_factor: int = 3  # successive halving: 1/reduction_factor of trials go on per rung


@dataclass
class RlplatOptunaSweeperConf:
    """``hydra.sweeper`` when ``hydra/sweeper=rlplat_optuna``."""

    _target_: str = "hydra_plugins.rlplat_optuna_sweeper.RlplatOptunaSweeper"
    direction: str = "maximize"  # maximize or minimize trainer.objective
    study_name: str | None = None  # null: the sweep directory's name
    storage: str | None = None  # RDB URL (sqlite:///..., postgresql://...); null: a journal file in the sweep dir
    n_trials: int = 20  # trials in all
    n_jobs: int = 1  # trials launched at once, as one batch of the launcher
    seeds_per_trial: int = 1  # jobs per trial, on seeds seed, seed + 1, ...; the trial's value aggregates theirs
    seed_aggregate: str = "mean"  # how a trial's value is made from its seeds' values: mean, median or iqm
    sampler: SamplerConf = field(default_factory=SamplerConf)
    pruner: PrunerConf = field(default_factory=PrunerConf)
    params: dict[str, str] = field(default_factory=dict)  # config key -> search space (see module doc)


def make_sampler(conf: dict[str, Any]) -> Any:
    """An Optuna sampler from a ``hydra.sweeper.sampler`` mapping (see :class:`SamplerConf`).

    Raises:
        ConfigError: for an unknown sampler name.
    """
    import optuna

    if conf["name"] == "tpe":
        return optuna.samplers.TPESampler(seed=conf["seed"], n_startup_trials=conf["n_startup_trials"])
    if conf["name"] == "random":
        return optuna.samplers.RandomSampler(seed=conf["seed"])
    raise ConfigError(f"hydra.sweeper.sampler.name={conf['name']!r}: valid: {', '.join(SAMPLERS)}")


def make_pruner(conf: dict[str, Any]) -> Any:
    """An Optuna pruner from a ``hydra.sweeper.pruner`` mapping (see :class:`PrunerConf`; steps are frames).

    Raises:
        ConfigError: for an unknown pruner name.
    """
    import optuna

    if conf["name"] == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=conf["n_startup_trials"],
            n_warmup_steps=conf["n_warmup_steps"],
            interval_steps=conf["interval_steps"],
        )
    if conf["name"] == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=conf["min_resource"], reduction_factor=conf["reduction_factor"]
        )
    if conf["name"] == "worse_than_best":
        return worse_than_best_pruner(conf["n_warmup_steps"])
    if conf["name"] == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"hydra.sweeper.pruner.name={conf['name']!r}: valid: {', '.join(PRUNERS)}")


def worse_than_best_pruner(n_warmup_steps: int) -> Any:
    """A pruner that stops a trial once its last intermediate value is already worse than the
    best completed trial's value.

    For objectives that a running trial can only make worse, such as the seconds to a target
    return (``trainer.objective=time/to_target_s``, minimised: a trial that has not reached
    the target after t seconds cannot reach it in fewer), this prunes exactly the trials
    that cannot win, whatever the others' learning curves; for other objectives it is not
    meaningful.

    Args:
        n_warmup_steps: Frames of a trial before it can be pruned.
    """
    import optuna

    class WorseThanBestPruner(optuna.pruners.BasePruner):
        def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
            step = trial.last_step
            if step is None or step < n_warmup_steps:
                return False
            complete = optuna.trial.TrialState.COMPLETE
            finished = [
                t.value for t in study.get_trials(deepcopy=False) if t.state == complete and t.value is not None
            ]
            if not finished:
                return False
            value = trial.intermediate_values[step]
            if study.direction == optuna.study.StudyDirection.MINIMIZE:
                return bool(value > min(finished))
            return bool(value < max(finished))

    return WorseThanBestPruner()


def open_storage(spec: str) -> Any:
    """An Optuna storage: ``spec`` is an RDB URL (has ``://``) or a journal file path."""
    import optuna

    if "://" in spec:
        return optuna.storages.RDBStorage(spec)
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(spec))


def distribution(key: str, override: Override) -> Any:
    """The Optuna distribution for one search-space entry.

    Args:
        key: The config key searched over, for messages.
        override: ``key=<space>`` parsed by Hydra's override parser.

    Raises:
        ConfigError: when the entry is a single value, not a search space.
    """
    import optuna.distributions as d

    value = override.value()
    if isinstance(value, IntervalSweep) and value.start is not None and value.end is not None:
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return d.IntDistribution(value.start, value.end, log=log_scale)
        return d.FloatDistribution(float(value.start), float(value.end), log=log_scale)
    if isinstance(value, RangeSweep) and value.start is not None and value.stop is not None:
        count = math.ceil(round((value.stop - value.start) / value.step, 9))  # Hydra's range excludes stop
        if isinstance(value.start, int) and isinstance(value.stop, int) and isinstance(value.step, int):
            return d.IntDistribution(value.start, value.start + (count - 1) * value.step, step=value.step)
        last = round(value.start + (count - 1) * value.step, 12)
        return d.FloatDistribution(float(value.start), last, step=float(value.step))
    if isinstance(value, ChoiceSweep):
        # optuna takes any choice (warning about non-scalar ones); its stubs list only scalars
        return d.CategoricalDistribution(value.list)  # type: ignore[arg-type]
    raise ConfigError(
        f"hydra.sweeper.params.{key}={override.get_value_string()!r} is a single value, not a search "
        "space: use interval(a, b), tag(log, interval(a, b)), int(interval(a, b)), range(a, b) or choice(a, b, ...)"
    )


def job_outcome(ret: JobReturn) -> tuple[Any, Exception | None]:
    """A launched job's return value, or the exception it raised.

    Uses Hydra's public ``JobReturn.return_value``, which re-raises a failed job's exception
    after writing "Error executing job with overrides ..." to stderr; that line is kept out
    of the output, since the sweeper reports failures itself and a pruned trial is no error.

    Returns:
        ``(value, None)`` for a completed job, ``(None, exception)`` for a failed one.
    """
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return ret.return_value, None
    except Exception as error:  # noqa: BLE001  (whatever the job raised is the trial's outcome)
        return None, error


def _config_dict(node: DictConfig | dict[str, Any] | None) -> dict[str, Any]:
    """A plain, resolved dict from a config node (empty for None)."""
    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.create(node), resolve=True)) if node else {}


class OptunaSearch:
    """The work of Hydra's ``rlplat_optuna`` sweeper: Optuna ask-and-tell over batches of
    launched jobs, with pruning. (The Sweeper class itself must live in ``hydra_plugins``.)

    Args: the fields of :class:`RlplatOptunaSweeperConf`, as keywords.
    """

    def __init__(
        self,
        *,
        direction: str,
        study_name: str | None,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        seeds_per_trial: int = 1,
        seed_aggregate: str = "mean",
        sampler: DictConfig | dict[str, Any],
        pruner: DictConfig | dict[str, Any],
        params: DictConfig | dict[str, str] | None,
    ) -> None:
        self.direction = direction
        self.study_name = study_name
        self.storage = storage
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.seeds_per_trial = seeds_per_trial
        self.seed_aggregate = seed_aggregate
        self.sampler_conf = _config_dict(sampler)
        self.pruner_conf = _config_dict(pruner)
        self.params = _config_dict(params)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        """Hydra's ``Sweeper.setup``: keep the composed config, build the configured launcher."""
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def _check(self) -> None:
        """Check direction, counts and the seed aggregate."""
        if self.direction not in ("maximize", "minimize"):
            raise ConfigError(f"hydra.sweeper.direction={self.direction!r}: valid: maximize, minimize")
        counts = {"n_trials": self.n_trials, "n_jobs": self.n_jobs, "seeds_per_trial": self.seeds_per_trial}
        for key, value in counts.items():
            if value < 1:
                raise ConfigError(f"hydra.sweeper.{key}={value}: must be >= 1")
        if self.seed_aggregate not in SEED_AGGREGATES:
            raise ConfigError(
                f"hydra.sweeper.seed_aggregate={self.seed_aggregate!r}: valid: {', '.join(SEED_AGGREGATES)}"
            )

    def _check_space(self, config: DictConfig, space: Mapping[str, Any]) -> None:
        """Check that the search space (``params`` and the command line's sweeps) is not
        empty and that each of its keys exists in ``config``."""
        if not space:
            raise ConfigError(
                "hydra.sweeper.params is empty and the command line sweeps no key: give at least one key -> "
                "search space (e.g. 'optim.lr=tag(log, interval(1e-4, 1e-2))')"
            )
        for key in space:
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(config, parent) if parent else config
            if not isinstance(node, DictConfig) or leaf not in node:
                valid = [str(k) for k in node] if isinstance(node, DictConfig) else []
                where = f"hydra.sweeper.params.{key}" if key in self.params else key
                message = f"{where}: the config has no key {key!r}."
                suggestion = closest(leaf, valid)
                if suggestion is not None:
                    message += f" Did you mean {(parent + '.' if parent else '') + suggestion!r}?"
                raise ConfigError(message)

    def prepare(self, arguments: list[str], config: DictConfig) -> tuple[dict[str, Any], list[str], Any, Any]:
        """Check the sweeper's config against the composed ``config``; build what a sweep needs.

        Args:
            arguments: The sweep's overrides (``hydra.overrides.task``).
            config: The composed config, with its ``hydra`` node.

        Returns:
            The search space (key -> distribution), the fixed overrides, the sampler and the pruner.

        Raises:
            ConfigError: naming the ``hydra.sweeper`` key at fault and what is valid.
        """
        self._check()
        space, fixed = self._search_space(arguments)
        self._check_space(config, space)
        if self.seeds_per_trial > 1 and "seed" in space:
            raise ConfigError(
                f"hydra.sweeper.seeds_per_trial={self.seeds_per_trial} runs each trial on its own seeds: "
                "take seed out of the search space (a fixed seed=N sets the first one)"
            )
        return space, fixed, make_sampler(self.sampler_conf), make_pruner(self.pruner_conf)

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, Any], list[str]]:
        """Distributions from ``params`` and from sweeps on the command line; the fixed rest."""
        parser = OverridesParser.create()
        space = {}
        for key, value in self.params.items():
            space[key] = distribution(key, parser.parse_override(f"{key}={value}"))
        fixed: list[str] = []
        for override in parser.parse_overrides(arguments):
            if override.is_sweep_override():
                space[override.key_or_group] = distribution(override.key_or_group, override)
            else:
                assert override.input_line is not None, "Hydra's parser keeps the line of each override"
                fixed.append(override.input_line)
        return space, fixed

    def sweep(self, arguments: list[str]) -> dict[str, Any]:
        """Hydra's ``Sweeper.sweep``: run ``n_trials`` trials, ``n_jobs`` at a time.

        Returns:
            The results written to ``<sweep dir>/optimization_results.yaml``.

        Raises:
            SystemExit: (2) for a bad sweeper config, after one ``rlplat-train: error:`` line;
                (1) when no trial completed, after a line that says so.
        """
        try:
            space, fixed, sampler, pruner = self.prepare(list(arguments), self.config)
        except ConfigError as error:  # checked before anything is recorded, unless the callback is off
            print(f"rlplat-train: error: {error}", file=sys.stderr)
            sys.exit(2)
        study, storage_spec = self._open_study(sampler, pruner)
        seeds = self._seeds(fixed)
        if len(seeds) > 1:
            fixed = [o for o in fixed if o.split("=", 1)[0].lstrip("+~") != "seed"]
        launched = jobs = 0
        while launched < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - launched))]
            batch = [
                self._job_overrides(fixed, trial, storage_spec, study.study_name, seeds, index)
                for trial in trials
                for index in range(len(seeds))
            ]
            returns = self.launcher.launch(batch, initial_job_idx=jobs)
            if (stopped := LIFE.stopped_by) is not None:  # the trials stay open, to be resumed one by one
                raise SystemExit(exit_status(stopped))
            for n, trial in enumerate(trials):
                self._tell(study, trial, returns[n * len(seeds) : (n + 1) * len(seeds)])
            launched += len(trials)
            jobs += len(batch)
        return self._finish(study)

    def _seeds(self, fixed: list[str]) -> list[int]:
        """The seeds of each trial's jobs: ``seeds_per_trial`` of them, counting up from the
        config's seed (or a fixed ``seed=N`` override). With one, the job keeps its own seed."""
        base = int(self.config.seed)
        for override in fixed:
            key, _, value = override.partition("=")
            if key.lstrip("+~") == "seed" and value.lstrip("-").isdigit():
                base = int(value)
        return [base + i for i in range(self.seeds_per_trial)]

    def _open_study(self, sampler: Any, pruner: Any) -> tuple[Any, str]:
        """Create (or load) the study in its storage; returns it and the storage's spec."""
        import optuna

        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        storage_spec = self.storage or str((self.sweep_dir / OPTUNA_JOURNAL).resolve())
        study_name = self.study_name or self.sweep_dir.name
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=study_name,
            storage=open_storage(storage_spec),
            sampler=sampler,
            pruner=pruner,
            direction=cast(Literal["maximize", "minimize"], self.direction),  # checked by _check
            load_if_exists=True,
        )
        study.set_user_attr(PRUNER_ATTR, self.pruner_conf)
        log.info(f"Optuna study {study_name!r} in {storage_spec}: {self.n_trials} trials, {self.n_jobs} at once")
        return study, storage_spec

    @staticmethod
    def _job_overrides(
        fixed: list[str], trial: Any, storage_spec: str, study_name: str, seeds: list[int], index: int
    ) -> list[str]:
        """A trial's job on its ``index``-th seed: the fixed overrides, the trial's params, the
        seed (when the trial has several), and where its study is."""
        chosen = [f"{key}={value}" for key, value in trial.params.items()]
        if len(seeds) > 1:
            chosen.append(f"seed={seeds[index]}")
        return [
            *route([*fixed, *chosen]),
            env_set_override(ENV_STORAGE, storage_spec),
            env_set_override(ENV_STUDY, study_name),
            env_set_override(ENV_TRIAL_NUMBER, trial.number),
            env_set_override(ENV_SEED_INDEX, index),
            env_set_override(ENV_SEEDS, len(seeds)),
        ]

    def _tell(self, study: Any, trial: Any, returns: Sequence[JobReturn]) -> None:
        """Tell the study a trial's outcome from its jobs (one per seed): the aggregate of
        their values; PRUNED when any was pruned; FAIL (logged) when any failed."""
        import optuna

        outcomes = [job_outcome(ret) for ret in returns]
        errors = [error for _, error in outcomes if error is not None]
        failed = [e for e in errors if not isinstance(e, optuna.TrialPruned)]  # each job recorded why it failed
        if failed:
            error = failed[0]
            log.error(f"trial {trial.number} failed: {type(error).__name__}: {error}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif errors:  # a job's own optuna.TrialPruned
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            values = [float(value) for value, _ in outcomes]
            if len(values) > 1:
                trial.set_user_attr("seed_values", values)
            study.tell(trial, aggregate_seeds(values, self.seed_aggregate))

    def _finish(self, study: Any) -> dict[str, Any]:
        """Print and save the best trial, and log it on the sweep's parent run."""
        import optuna
        from rich.console import Console

        states = [t.state for t in study.trials]
        counts = {s.name: states.count(s) for s in optuna.trial.TrialState if states.count(s)}
        summary = ", ".join(f"{n} {name.lower()}" for name, n in counts.items())
        if not any(s == optuna.trial.TrialState.COMPLETE for s in states):  # the trials' errors were printed
            message = f"Optuna study {study.study_name!r}: no trial completed ({summary})"
            print(f"rlplat-train: error: {message}", file=sys.stderr)
            raise SystemExit(1)
        best = study.best_trial
        results = {
            "best_value": best.value,
            "best_params": best.params,
            "best_trial": best.number,
            "trials": counts,
            "seeds_per_trial": self.seeds_per_trial,
            "seed_aggregate": self.seed_aggregate,
        }
        OmegaConf.save(OmegaConf.create(results), self.sweep_dir / OPTUNA_RESULTS)
        console = Console(soft_wrap=True)
        console.print(f"[bold]Optuna[/bold]: {len(study.trials)} trials ({summary})")
        over = f" ({self.seed_aggregate} of {self.seeds_per_trial} seeds)" if self.seeds_per_trial > 1 else ""
        console.print(f"best trial {best.number}: {self.direction} objective{over} = {best.value:.2f}")
        for key, value in best.params.items():
            console.print(f"  {key}={value}", markup=False)
        log_to_active_parent(
            params={f"best.{k}": str(v) for k, v in best.params.items()},
            metrics={"best/value": best.value, **{f"optuna/{k.lower()}": float(n) for k, n in counts.items()}},
            tags={"optuna.study": study.study_name, "optuna.best_trial": str(best.number)},
            artifact=self.sweep_dir / OPTUNA_RESULTS,
        )
        return results


def aggregate_seeds(values: Sequence[float], how: str) -> float:
    """A trial's value from its seeds' values: their mean, median, or interquartile mean
    (:func:`rlplat.report.stats.iqm`: ``int(0.25 n)`` values cut from each end, so with fewer
    than 4 seeds the IQM is the mean).

    Args:
        values: The seeds' values (``trainer.objective``), one per job, at least one.
        how: ``hydra.sweeper.seed_aggregate``: mean, median or iqm.

    Raises:
        ConfigError: for an unknown ``how``.
    """
    if how == "mean":
        return float(np.mean(values))
    if how == "median":
        return float(np.median(values))
    if how == "iqm":
        from rlplat.report.stats import iqm

        return float(iqm(values))
    raise ConfigError(f"hydra.sweeper.seed_aggregate={how!r}: valid: {', '.join(SEED_AGGREGATES)}")


def check_sweeper(config: DictConfig) -> None:
    """Check an ``rlplat_optuna`` sweeper's config before a sweep records anything; a config
    with another sweeper passes unchecked.

    Args:
        config: The composed config, with its ``hydra`` node.

    Raises:
        ConfigError: naming the ``hydra.sweeper`` key at fault and what is valid.
    """
    node = config.hydra.sweeper
    if node.get("_target_") != RlplatOptunaSweeperConf._target_:
        return
    search = OptunaSearch(**{str(k): v for k, v in node.items() if k != "_target_"})
    search.prepare(list(config.hydra.overrides.task), config)
