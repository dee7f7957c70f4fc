"""The plugin's entries checked by rlplat's conformance kit, as rlplat builds and runs them.

Run with the plugin installed (``pip install -e .``, so that its entry points are visible):
``pytest tests/``. Each check builds the entry by its registered name from the same YAML
keys a run would use (the plugin's own presets in ``rlplat_example_plugin/conf/``) and
raises an AssertionError naming what is wrong.
"""

from __future__ import annotations

from importlib.resources import files

import gymnasium
import numpy as np
from omegaconf import OmegaConf

from rlplat.testing import check_collector, check_env, check_loss, check_network


def preset(group: str, name: str) -> dict:
    """The YAML preset ``conf/<group>/<name>.yaml`` shipped with the plugin, as kwargs."""
    return OmegaConf.to_container(OmegaConf.load(files("rlplat_example_plugin.conf") / group / f"{name}.yaml"))


def test_point_mass_env_conforms():
    check_env("point_mass", preset("env", "point_mass"))
    check_env("point_mass", {"dim": 3, "step_size": 0.5, "max_episode_steps": 5})  # episodes end within the check


def test_point_mass_runs_in_rlplats_collector():
    check_collector("sync", {"num_envs": 2, "steps_per_env": 16}, envs=[("point_mass", {"max_episode_steps": 10})])


def test_residual_mlp_network_conforms():
    check_network("residual_mlp", preset("network", "residual_mlp"))
    check_network("residual_mlp", {"width": 8, "num_blocks": 0}, out_features=3)
    # a continuous critic's input: rlplat passes the flat Box of concat(observation, action)
    check_network("residual_mlp", observation_space=gymnasium.spaces.Box(-np.inf, np.inf, (6,), np.float32))


def test_residual_mlp_trains_inside_rlplats_losses():
    network = ("residual_mlp", {"width": 16, "num_blocks": 1})
    check_loss("ppo", network=network)
    check_loss("sac", {"features": 16}, network=network)
