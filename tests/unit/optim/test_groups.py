"""Optimizers per parameter group: each configured group gets its own optimizer and clip,
the rest share one; the groups cover every trainable parameter once."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from rlplat.build import build
from rlplat.hydra_ext import compose_config
from rlplat.optim import make_optimizers
from rlplat.registry import ConfigError

ACTOR_CRITIC = [
    ("ppo", "pendulum"),
    ("ppo_kl", "pendulum"),
    ("a2c", "cartpole"),
    ("reinforce", "cartpole"),
    ("ddpg", "pendulum"),
    ("td3", "pendulum"),
    ("sac", "pendulum"),
]


@pytest.mark.parametrize("algo,env", ACTOR_CRITIC)
def test_actor_and_critic_learning_rates_apply_to_their_groups(algo, env):
    cfg = compose_config(
        [
            f"algo={algo}",
            f"env={env}",
            "tracking.enabled=false",
            "optim.actor.lr=0.001",
            "optim.critic.lr=0.002",
            *tiny(algo),
        ]
    )
    built = build(cfg)
    try:
        units = {unit.label: unit for unit in built.parts.optimizers.units}
        assert units["actor"].optimizer.param_groups[0]["lr"] == 0.001
        assert units["critic"].optimizer.param_groups[0]["lr"] == 0.002
        groups = built.parts.loss.param_groups()
        assert {id(p) for p in units["actor"].parameters} == {id(p) for p in groups["actor"] if p.requires_grad}
        trainable = {id(p) for p in built.parts.loss.parameters() if p.requires_grad}
        stepped = [id(p) for unit in units.values() for p in unit.parameters]
        assert sorted(stepped) == sorted(trainable)  # each trainable parameter in exactly one optimizer
    finally:
        built.parts.close()


def test_sac_td3_ddpg_presets_give_every_group_its_own_optimizer():
    for algo, groups in (
        ("sac", {"actor", "critic", "temperature"}),
        ("td3", {"actor", "critic"}),
        ("ddpg", {"actor", "critic"}),
    ):
        built = build(compose_config([f"algo={algo}", "env=pendulum", "tracking.enabled=false"]))
        assert {unit.label for unit in built.parts.optimizers.units} == groups
        built.parts.close()


def test_unconfigured_groups_share_one_optimizer_and_clip_their_joint_norm():
    actor, critic = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    node = {
        "name": "adam",
        "lr": 0.01,
        "eps": 1e-8,
        "betas": [0.9, 0.999],
        "weight_decay": 0.0,
        "fused": False,
        "max_grad_norm": 1.0,
    }
    optimizers = make_optimizers(node, {"actor": list(actor.parameters()), "critic": list(critic.parameters())})
    [shared] = optimizers.units
    assert shared.label == "" and shared.groups == ("actor", "critic")
    for p in [*actor.parameters(), *critic.parameters()]:
        p.grad = torch.full_like(p, 3.0)  # 9 elements of 3: joint norm sqrt(81)
    norms = optimizers.clip_gradients()
    optimizers.step()
    torch.testing.assert_close(norms["grad_norm"], torch.tensor(9.0))


def test_a_group_with_its_own_node_is_clipped_alone():
    actor, critic = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    node = {
        "name": "adam",
        "lr": 0.01,
        "eps": 1e-8,
        "betas": [0.9, 0.999],
        "weight_decay": 0.0,
        "fused": False,
        "max_grad_norm": None,
        "critic": {"max_grad_norm": 0.5},
    }
    optimizers = make_optimizers(node, {"actor": list(actor.parameters()), "critic": list(critic.parameters())})
    actor.weight.grad, critic.weight.grad = torch.tensor([[4.0]]), torch.tensor([[3.0]])
    norms = optimizers.clip_gradients()
    optimizers.step()
    assert set(norms) == {"critic/grad_norm", "grad_norm"}
    assert norms["critic/grad_norm"].item() == 3.0 and norms["grad_norm"].item() == 4.0  # before clipping
    assert critic.weight.grad.item() == pytest.approx(0.5)  # clipped to its own bound
    assert actor.weight.grad.item() == 4.0  # not clipped
    assert set(optimizers.learning_rates()) == {"critic/lr", "lr"}


def test_unknown_group_names_the_loss_groups():
    with pytest.raises(ConfigError, match="optim.policy: the loss has no parameter group 'policy'. Its groups: q."):
        make_optimizers({"name": "adam", "policy": {"lr": 1.0}}, {"q": [torch.nn.Parameter(torch.zeros(1))]})
