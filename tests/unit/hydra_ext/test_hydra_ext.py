"""Hydra extension: group options for registered names, tuned presets, override routing and
its undo, YAML comments."""

from __future__ import annotations

import pytest

from rlplat.hydra_ext import compose_config, group_options, route, unroute
from rlplat.registry import REGISTRIES, ConfigError


def test_every_yaml_key_has_a_comment():
    from importlib.resources import files

    root = files("rlplat.conf")
    uncommented = []
    for path in [root / "config.yaml", *(p for d in root.iterdir() if d.is_dir() for p in d.iterdir())]:
        if not path.name.endswith(".yaml"):
            continue
        for line in path.read_text().splitlines():
            body = line.strip()
            keyed = body and not body.startswith(("#", "-")) and ":" in body and "#" not in body
            if keyed and not body.endswith(":"):  # a key with a value and no comment
                uncommented.append(f"{path.name}: {body}")
    assert not uncommented, uncommented


@pytest.mark.parametrize("group", ["env", "network", "collector", "buffer", "loss", "optim"])
def test_every_registered_name_is_an_option_of_its_group(group):
    kind = {"optim": "optimizer"}.get(group, group)
    assert set(REGISTRIES[kind].names()) <= group_options(group)


def test_registered_name_without_yaml_composes_to_a_minimal_node():
    cfg = compose_config(["env=gym", "tracking.enabled=false"])
    assert dict(cfg.env) == {"name": "gym"}


def test_tuned_preset_is_applied_for_its_pair_only():
    tuned = compose_config(["algo=ppo", "env=pendulum"])
    plain = compose_config(["algo=ppo", "env=pendulum", "~tuned"])
    assert tuned.loss.gamma == 0.9 and plain.loss.gamma == 0.99


@pytest.mark.parametrize(
    "arg,needle",
    [
        (
            "algo=ppoo",
            "algo='ppoo' is not known. Valid: a2c, a2c_lstm, ddpg, dqn, impala, ppo, ppo_kl, ppo_lstm, ppo_rnd, "
            "reinforce, sac, td3. Did you mean 'ppo'?",
        ),
        ("env=pendulumm", "Did you mean 'pendulum'?"),
        ("env=cartpole,pendulumm", "env='pendulumm'"),
    ],
)
def test_unknown_group_option_names_key_value_and_choices(arg, needle):
    with pytest.raises(ConfigError) as error:
        route([arg])
    assert needle in str(error.value)


def test_checked_node_keys_are_routed_to_rlplat_checks():
    routed = route(["network.hiden_sizes=[8]", "seed=3", "+x.y=1", "-m", "hydra.verbose=true"])
    assert routed == ["++network.hiden_sizes=[8]", "seed=3", "+x.y=1", "-m", "hydra.verbose=true"]


def test_unroute_undoes_route_and_nothing_else():
    typed = ["network.hiden_sizes=[8]", "trainer.total_frames=256", "seed=3", "+x.y=1", "algo=ppo"]
    assert [unroute(o) for o in route(typed)] == typed
    assert unroute("++hydra.job.env_set.X='1'") == "++hydra.job.env_set.X='1'"  # a user's own ++ stays


def test_a_tuned_target_return_is_a_float_so_a_float_override_validates():
    # validation types a key by its composed value: an int there would refuse target_return=475.0
    assert isinstance(compose_config(["algo=dqn", "env=cartpole"]).trainer.target_return, float)
