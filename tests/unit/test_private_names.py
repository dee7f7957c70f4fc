"""The private names of dependencies that rlplat still reads, each where no public API does
the job (listed with its reason in docs/concepts/architecture.md): these tests fail loudly the day one
disappears or changes what rlplat relies on."""

from __future__ import annotations

from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from rlplat.hydra_ext.compose import CONFIG_MODULE
from rlplat.sweep.resume import BASIC_SWEEPER, basic_sweep_jobs
from rlplat.sweep.runs import BASIC_LAUNCHER


def test_hydras_default_sweeper_and_launcher_are_the_classes_rlplat_recognises():
    """rlplat reads ``hydra.sweeper._target_`` and ``hydra.launcher._target_`` to tell Hydra's
    default (basic) sweeper and launcher from others; their class paths are private."""
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.sweeper._target_ == BASIC_SWEEPER
    assert cfg.hydra.launcher._target_ == BASIC_LAUNCHER


def test_the_basic_sweepers_split_numbers_the_jobs_as_rlplat_resumes_them():
    """``resume=<sweep dir>`` lists a basic sweep's jobs as Hydra numbers them, through the
    basic sweeper's own (private) ``split_arguments``: the last override varies fastest."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    overrides = OverridesParser.create().parse_overrides(["seed=0,1", "algo=ppo,a2c"])
    [batch] = BasicSweeper.split_arguments(overrides, None)
    assert batch == [["seed=0", "algo=ppo"], ["seed=0", "algo=a2c"], ["seed=1", "algo=ppo"], ["seed=1", "algo=a2c"]]
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        composed = compose("config", return_hydra_config=True)
    config = OmegaConf.create(OmegaConf.to_container(composed))  # as a sweep's multirun.yaml holds it
    config.hydra.sweeper.params = {"seed": "0,1"}
    config.hydra.overrides.task = ["algo=ppo,a2c"]
    jobs, why = basic_sweep_jobs(config)
    assert why == "" and [job[-2:] for job in jobs] == [
        ["seed=0", "algo=ppo"], ["seed=0", "algo=a2c"], ["seed=1", "algo=ppo"], ["seed=1", "algo=a2c"]
    ]  # fmt: skip
