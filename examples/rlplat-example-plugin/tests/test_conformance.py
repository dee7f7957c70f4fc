"""The plugin's entries checked by rlplat's conformance kit, as rlplat builds and runs them.

Run with the plugin installed (``pip install -e .``, so that its entry points are visible):
``pytest tests/``. Each check builds the entry by its registered name from the same YAML
keys a run would use (the plugin's own presets in ``rlplat_example_plugin/conf/``) and
raises an AssertionError naming what is wrong; the transform and the loss add-on are also
checked against their definitions.
"""

from __future__ import annotations

from importlib.resources import files

import gymnasium
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rlplat.networks.actor_critic import ActorCritic
from rlplat.registry import ConfigError
from rlplat.testing import check_collector, check_env, check_loss, check_loss_addon, check_network, check_transform


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


def test_clip_observation_transform_conforms():
    check_transform("clip_observation", preset("tuned", "ppo_point_mass")["transforms"]["clip_observation"])
    check_transform("clip_observation", {}, observation_space=gymnasium.spaces.Box(-1, 1, (2, 3), np.float32))


def test_clip_observation_clips_each_entry_and_leaves_rewards():
    from rlplat_example_plugin.transforms import ClipObservation

    clip = ClipObservation(gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32), low=-1.0, high=2.0)
    observation = torch.tensor([[-3.0, 0.5, 7.0], [2.0, -1.0, 1.999]])
    assert torch.equal(
        clip.transform_observation(observation, update=True), torch.tensor([[-1.0, 0.5, 2.0], [2.0, -1.0, 1.999]])
    )
    reward, done = torch.tensor([[5.0], [-9.0]]), torch.tensor([[False], [True]])
    assert torch.equal(clip.transform_reward(reward, done, update=True), reward)


def test_clip_observation_errors_name_the_key():
    from rlplat_example_plugin.transforms import ClipObservation

    with pytest.raises(ConfigError, match="transforms.clip_observation needs a Box of floats"):
        ClipObservation(gymnasium.spaces.Box(0, 255, (4, 4), np.uint8))
    with pytest.raises(ConfigError, match=r"transforms.clip_observation.low=1.0, high=1.0: low must be < high"):
        ClipObservation(gymnasium.spaces.Box(-1, 1, (2,), np.float32), low=1.0, high=1.0)


def test_entropy_floor_add_on_conforms_in_every_on_policy_loss():
    for host in ("ppo", "a2c", "ppo_kl", "reinforce"):
        check_loss_addon("entropy_floor", {"floor": 0.5}, host=host)


def test_entropy_floor_is_zero_above_the_floor_and_its_errors_name_the_key():
    from rlplat_example_plugin.addons import EntropyFloor

    space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    policy = ActorCritic(space, gymnasium.spaces.Discrete(4), lambda features: torch.nn.Linear(2, features))
    batch = {"observation": torch.zeros(3, 2), "action": torch.zeros(3, dtype=torch.int64)}
    assert EntropyFloor(space, space, load_policy=None, floor=0.5)(policy, batch).item() == 0.0  # log 4 > 0.5
    above = EntropyFloor(space, space, load_policy=None, floor=2.0)(policy, batch)
    assert above.item() == pytest.approx(2.0 - np.log(4), abs=1e-3)  # a near-uniform policy's entropy: log 4
    with pytest.raises(ConfigError, match="loss.addons.entropy_floor.floor=-1: must be >= 0 nats"):
        EntropyFloor(space, space, load_policy=None, floor=-1)
