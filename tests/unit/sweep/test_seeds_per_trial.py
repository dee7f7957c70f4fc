"""hydra.sweeper.seeds_per_trial on the sweeper's side: the seeds each trial's jobs get, what
they are told, and how the jobs' outcomes become the trial's, against a real Optuna study.
(The jobs' side, pruning on the mean of the seeds, is in tests/integration/test_sweeps.py.)"""

from __future__ import annotations

import logging

import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from rlplat.registry import ConfigError
from rlplat.sweep.optuna import ENV_SEED_INDEX, ENV_SEEDS, ENV_TRIAL_NUMBER, OptunaSearch, aggregate_seeds


def search(seeds_per_trial: int, seed_aggregate: str = "mean", seed: int = 10) -> OptunaSearch:
    """An OptunaSearch as Hydra would build it, with the composed config's seed."""
    found = OptunaSearch(
        direction="maximize",
        study_name=None,
        storage=None,
        n_trials=2,
        n_jobs=1,
        seeds_per_trial=seeds_per_trial,
        seed_aggregate=seed_aggregate,
        sampler={"name": "random", "seed": 0},
        pruner={"name": "none"},
        params={"optim.lr": "interval(1e-4, 1e-2)"},
    )
    found.config = OmegaConf.create({"seed": seed})
    return found


def job(value: float | BaseException) -> JobReturn:
    """A launched job's return: its value, or the exception it failed with."""
    ret = JobReturn()
    ret.status = JobStatus.FAILED if isinstance(value, BaseException) else JobStatus.COMPLETED
    ret.return_value = value
    return ret


def test_aggregate_seeds_against_hand_computed_values():
    values = [8.0, 1.0, 100.0, 3.0, 7.0, 2.0, 6.0, 4.0]  # sorted: 1 2 3 4 6 7 8 100
    assert aggregate_seeds(values, "mean") == pytest.approx(131 / 8)
    assert aggregate_seeds(values, "median") == pytest.approx((4 + 6) / 2)
    assert aggregate_seeds(values, "iqm") == pytest.approx((3 + 4 + 6 + 7) / 4)  # 2 cut from each end
    assert aggregate_seeds([1.0, 2.0, 9.0], "iqm") == pytest.approx(4.0)  # 3 seeds: nothing cut, the mean
    with pytest.raises(ConfigError, match="hydra.sweeper.seed_aggregate='max': valid: mean, median, iqm"):
        aggregate_seeds(values, "max")


def test_each_trial_runs_on_seeds_counting_up_from_the_configs_seed():
    assert search(3, seed=10)._seeds([]) == [10, 11, 12]
    assert search(3)._seeds(["seed=-3"]) == [-3, -2, -1]  # a fixed seed on the command line
    assert search(1)._seeds([]) == [10]

    trial = optuna.create_study().ask({"optim.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2)})
    overrides = OptunaSearch._job_overrides(["env=pendulum"], trial, "j", "s", [10, 11, 12], 2)
    assert "seed=12" in overrides and "env=pendulum" in overrides
    assert f"++hydra.job.env_set.{ENV_SEED_INDEX}='2'" in overrides
    assert f"++hydra.job.env_set.{ENV_SEEDS}='3'" in overrides
    assert f"++hydra.job.env_set.{ENV_TRIAL_NUMBER}='0'" in overrides
    alone = OptunaSearch._job_overrides([], trial, "j", "s", [10], 0)
    assert not any(o.startswith("seed=") for o in alone)  # one seed: the job keeps its own


def test_a_seed_in_the_search_space_with_several_seeds_is_refused():
    config = OmegaConf.create({"seed": 0, "optim": {"lr": 1e-3}})
    with pytest.raises(ConfigError, match=r"hydra.sweeper.seeds_per_trial=3 .* take seed out of the search space"):
        search(3).prepare(["seed=0,1"], config)
    space, _, _, _ = search(1).prepare(["seed=0,1"], config)  # one seed per trial: seed may be searched
    assert "seed" in space


@pytest.mark.parametrize(("how", "expected"), [("mean", 4.0), ("median", 3.0), ("iqm", 4.0)])
def test_a_trials_value_is_the_aggregate_of_its_seeds(how, expected):
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    search(3, how)._tell(study, trial, [job(1.0), job(8.0), job(3.0)])
    [told] = study.trials
    assert told.state == optuna.trial.TrialState.COMPLETE and told.value == pytest.approx(expected)
    assert told.user_attrs["seed_values"] == [1.0, 8.0, 3.0]


def test_a_pruned_seed_prunes_the_trial_and_a_failed_one_fails_it(caplog):
    study = optuna.create_study(direction="maximize")
    sweeper = search(3)
    pruned, failed = study.ask(), study.ask()
    sweeper._tell(study, pruned, [job(1.0), job(optuna.TrialPruned("at 256 frames")), job(2.0)])
    with caplog.at_level(logging.ERROR, logger="rlplat.sweep.optuna"):
        sweeper._tell(study, failed, [job(optuna.TrialPruned("p")), job(RuntimeError("boom")), job(2.0)])
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL]
    assert "trial 1 failed: RuntimeError: boom" in caplog.text  # a failure outranks a pruned seed
