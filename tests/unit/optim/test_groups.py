"""Optimizers per parameter group: each configured group gets its own optimizer and clip,
the rest share one; the groups cover every trainable parameter once."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from rlplat.accel.flat import FlatParameters
from rlplat.build import build
from rlplat.hydra_ext import compose_config
from rlplat.optim import make_optimizers
from rlplat.registry import ConfigError
from rlplat.trainer import ParameterError

LAYOUTS = [pytest.param(None, id="one-by-one"), pytest.param(FlatParameters, id="flat")]

ACTOR_CRITIC = [
    ("ppo", "pendulum"),
    ("ppo_kl", "pendulum"),
    ("a2c", "cartpole"),
    ("reinforce", "cartpole"),
    ("impala", "cartpole"),
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
        assert units["actor"].param_groups[0]["lr"] == 0.001
        assert units["critic"].param_groups[0]["lr"] == 0.002
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
    actor.weight.grad = torch.full_like(actor.weight, 4.0)
    critic.weight.grad = torch.full_like(critic.weight, 3.0)
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


ADAM = {"name": "adam", "lr": 0.01, "eps": 1e-8, "betas": [0.9, 0.999], "weight_decay": 0.0, "fused": True}


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("flatten", LAYOUTS)
@pytest.mark.parametrize("max_grad_norm", [None, 0.05])
def test_the_parameters_step_exactly_as_adam_over_each_parameter(max_grad_norm, flatten):
    flat_net, reference = _net(), _net()
    optimizers = make_optimizers(
        {**ADAM, "max_grad_norm": max_grad_norm}, {"q": list(flat_net.parameters())}, (), flatten
    )
    [unit] = optimizers.units
    if flatten is not None:
        [buffer] = unit.flat.grads
        storage = buffer.untyped_storage().data_ptr()
        assert all(p.grad.untyped_storage().data_ptr() == storage for p in unit.parameters)
    adam = torch.optim.Adam(reference.parameters(), lr=0.01, eps=1e-8)
    x = torch.randn(16, 3)
    for _ in range(5):
        optimizers.zero_grad()
        flat_net(x).pow(2).mean().backward()  # accumulates into the flat gradient buffer
        norm = optimizers.clip_gradients()["grad_norm"]
        optimizers.step()
        adam.zero_grad()
        reference(x).pow(2).mean().backward()
        expected = (
            torch.nn.utils.clip_grad_norm_(reference.parameters(), max_grad_norm)
            if max_grad_norm
            else torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
        )
        adam.step()
        torch.testing.assert_close(norm, expected)
    for p, q in zip(flat_net.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    state = optimizers.state_dict()
    make_optimizers({**ADAM, "max_grad_norm": None}, {"q": list(_net().parameters())}, (), flatten).load_state_dict(
        state
    )


def test_an_optimizer_entry_not_marked_elementwise_gets_the_parameters_one_by_one(monkeypatch):
    from rlplat.registry import OPTIMIZERS, Entry

    def sgd(params, /, *, lr):
        return torch.optim.SGD(params, lr=lr)

    OPTIMIZERS.names()  # entry points discovered first, so that the test entry is not overwritten
    monkeypatch.setitem(OPTIMIZERS._entries, "plain_sgd", Entry("plain_sgd", "test", target=sgd))
    net = _net()
    node = {"name": "plain_sgd", "lr": 0.1, "max_grad_norm": 1.0}
    optimizers = make_optimizers(node, {"q": list(net.parameters())}, (), FlatParameters)
    [unit] = optimizers.units
    assert unit.flat is None and len(unit.optimizer.param_groups[0]["params"]) == 4
    net(torch.randn(4, 3)).sum().backward()
    optimizers.clip_gradients()
    optimizers.step()
    optimizers.zero_grad()
    assert all(p.grad is None for p in net.parameters())


@pytest.mark.parametrize("flatten", LAYOUTS)
def test_groups_with_the_same_settings_but_the_rate_share_one_optimizer_and_step_as_separate_ones(flatten):
    actor, critic, reference_actor, reference_critic = _net(), _net(), _net(), _net()
    node = {**ADAM, "max_grad_norm": None, "actor": {"lr": 0.05}, "critic": {"max_grad_norm": 0.1}}
    groups = {"actor": list(actor.parameters()), "critic": list(critic.parameters())}
    optimizers = make_optimizers(node, groups, (), flatten)
    assert len(optimizers.optimizers) == 1 and len(optimizers.units) == 2
    assert optimizers.learning_rates() == {"actor/lr": 0.05, "critic/lr": 0.01}
    separate = [
        torch.optim.Adam(reference_actor.parameters(), lr=0.05, eps=1e-8),
        torch.optim.Adam(reference_critic.parameters(), lr=0.01, eps=1e-8),
    ]
    x = torch.randn(16, 3)
    for _ in range(4):
        optimizers.zero_grad()
        (actor(x).pow(2).mean() + critic(x).abs().mean()).backward()
        optimizers.clip_gradients()
        optimizers.step()
        for optimizer in separate:
            optimizer.zero_grad()
        (reference_actor(x).pow(2).mean() + reference_critic(x).abs().mean()).backward()
        torch.nn.utils.clip_grad_norm_(reference_critic.parameters(), 0.1)
        for optimizer in separate:
            optimizer.step()
    for net, reference in ((actor, reference_actor), (critic, reference_critic)):
        for p, q in zip(net.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q)
    optimizers.set_lr_factor(0.5)
    assert optimizers.learning_rates() == {"actor/lr": 0.025, "critic/lr": 0.005}


def test_a_fused_adam_over_parameters_one_by_one_keeps_adam_step(monkeypatch):
    """A plugin's Adam not marked elementwise gets the parameters one by one, whose gradients
    may be None (here the second layer's): it must step through Adam's own step."""
    from rlplat.registry import OPTIMIZERS, Entry

    def plain_adam(params, /, *, lr):
        return torch.optim.Adam(params, lr=lr, fused=True)

    OPTIMIZERS.names()
    monkeypatch.setitem(OPTIMIZERS._entries, "plain_adam", Entry("plain_adam", "test", target=plain_adam))
    net = _net()
    optimizers = make_optimizers(
        {"name": "plain_adam", "lr": 0.1, "max_grad_norm": None}, {"q": list(net.parameters())}
    )
    first, second = net[0], net[2]
    before = second.weight.detach().clone()
    for _ in range(3):
        optimizers.zero_grad()
        first(torch.randn(4, 3)).sum().backward()  # no gradient reaches the second layer
        optimizers.step()
    assert second.weight.grad is None and torch.equal(second.weight, before)


@pytest.mark.parametrize("replace", ["set_to_none", "assigned"])
def test_a_gradient_taken_out_of_the_flat_buffer_fails_naming_its_parameter(replace):
    """zero_grad() (set_to_none) or an assignment would leave the buffer behind, and the
    optimizer would step without that gradient: it fails, in one line naming the parameter."""
    net = _net()
    names = {id(p): name for name, p in net.named_parameters()}
    optimizers = make_optimizers(
        {**ADAM, "max_grad_norm": 1.0}, {"q": list(net.parameters())}, (), lambda ps: FlatParameters(ps, names)
    )
    optimizers.zero_grad()
    net(torch.randn(4, 3)).sum().backward()
    optimizers.clip_gradients()  # every gradient in its view: fine
    if replace == "set_to_none":
        net.zero_grad()  # torch's default: every .grad set to None
    else:
        net[2].bias.grad = torch.zeros(2)
    net(torch.randn(4, 3)).sum().backward()
    name = "0.weight" if replace == "set_to_none" else "2.bias"
    with pytest.raises(ParameterError, match=rf"^parameter {name}: its \.grad was"):
        optimizers.clip_gradients()


def test_a_loaded_state_leaves_the_learning_rate_schedule_setting_the_rates_the_optimizers_use():
    """torch's load_state_dict replaces the param group dicts: the schedule must follow."""

    def built() -> tuple:
        actor, critic, other = _net(), _net(), _net()
        node = {**ADAM, "actor": {"lr": 0.05}, "critic": {"lr": 0.02}}
        nets = {"actor": actor, "critic": critic, "other": other}
        groups = {name: list(net.parameters()) for name, net in nets.items()}
        return make_optimizers(node, groups), actor, critic, other

    saved, *nets = built()
    x = torch.randn(8, 3)
    sum(net(x).pow(2).mean() for net in nets).backward()
    saved.step()
    saved.set_lr_factor(0.5)
    loaded, *_ = built()
    loaded.load_state_dict(saved.state_dict())
    assert loaded.learning_rates() == {"actor/lr": 0.025, "critic/lr": 0.01, "lr": 0.005}
    loaded.set_lr_factor(0.1)
    rates = {"actor/lr": 0.005, "critic/lr": 0.002, "lr": 0.001}
    assert loaded.learning_rates() == pytest.approx(rates)
    used = sorted(group["lr"] for optimizer in loaded.optimizers for group in optimizer.param_groups)
    assert used == pytest.approx(sorted(rates.values()))


@pytest.mark.parametrize("algo,shared,other", [("ppo", "adam", "rmsprop"), ("a2c", "rmsprop", "adam")])
def test_a_group_naming_another_optimizer_starts_from_that_optimizers_defaults(algo, shared, other):
    """The shared keys belong to the shared optimizer (Adam's betas mean nothing to RMSprop):
    ``optim.critic.name=<other>`` takes ``conf/optim/<other>.yaml``, and the group's own keys."""
    overrides = [f"algo={algo}", "env=cartpole", "tracking.enabled=false", f"optim.critic.name={other}", *tiny(algo)]
    built = build(compose_config([*overrides, "optim.critic.eps=0.001"]))
    try:
        units = {unit.label: unit for unit in built.parts.optimizers.units}
        classes = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}
        assert type(units["critic"].optimizer) is classes[other]
        assert type(units[""].optimizer) is classes[shared]  # the actor keeps the shared one
        critic = units["critic"].param_groups[0]
        assert critic["eps"] == 0.001
        assert critic["lr"] == {"adam": 0.0003, "rmsprop": 0.0007}[other]  # conf/optim/<other>.yaml
    finally:
        built.parts.close()


def test_td3_steps_its_actor_on_delayed_updates_only(tmp_path):
    """Between TD3's delayed policy updates the actor's loss is zero: a step of its optimizer
    would still move it by Adam's momentum, so the actor's optimizer is not stepped."""
    from conftest import make_trainer

    overrides = ["algo=td3", "env=pendulum", "tracking.enabled=false", "buffer.learning_starts=64"]
    trainer = make_trainer([*overrides, "buffer.batch_size=32", "collector.num_envs=1"], tmp_path)
    loss, parts = trainer.parts.loss, trainer.parts
    assert loss.policy_delay == 2 and loss.delayed_groups == ("actor",)
    assert {unit.label for unit in parts.optimizers.units} == {"actor", "critic"}
    assert len(parts.optimizers.optimizers) == 2  # the actor's is its own, not merged with the critic's
    rollouts = iter(parts.collector)
    for _ in range(64):
        trainer._buffer(next(rollouts))
    batch = next(iter(parts.buffer.batches()))
    moved = []
    for _ in range(6):
        due = loss.delayed_due
        before = [p.detach().clone() for p in loss.actor.parameters()]
        critic = [p.detach().clone() for p in loss.critics.parameters()]
        assert trainer._update(batch, 64) is not None
        actor_moved = any(not torch.equal(a, b) for a, b in zip(loss.actor.parameters(), before))
        assert any(not torch.equal(a, b) for a, b in zip(loss.critics.parameters(), critic))
        moved.append((due, actor_moved))
    parts.close()
    assert moved == [(False, False), (True, True)] * 3
