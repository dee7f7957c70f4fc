"""Loss add-ons (rlplat.losses.addons): the registry and its messages, the conformance kit on
``kl_to_reference`` and on broken add-ons, and the reference loader's checks against real
checkpoints (a trainer's own ``state_dict``, as a run writes it)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from conftest import DEVICES, TINY, make_trainer
from torch import nn

from rlplat.agent import restore
from rlplat.build import build, build_loss
from rlplat.checkpoint import CHECKPOINT_DIR, FINAL, atomic_save, load_checkpoint
from rlplat.cli.list import main as list_main
from rlplat.hydra_ext import compose_config
from rlplat.losses.addons import WeightedAddon, addon_terms
from rlplat.losses.addons.kl_to_reference import KLToReference
from rlplat.registry import LOSS_ADDONS, REGISTRIES, ConfigError, PluginError
from rlplat.settings import resolve_config
from rlplat.testing import check_loss_addon
from rlplat.tracking.locate import Located

CARTPOLE = ["env=cartpole", "transforms.obs_norm=null", "tracking.enabled=false", *TINY]
"""A PPO run on CartPole without running observation statistics (a reference needs none)."""


def addon(source, coef=0.5, **extra) -> str:
    """The override that sets ``loss.addons.kl_to_reference``."""
    keys = ",".join([f"source:'{source}'", f"coef:{coef}", *(f"{k}:{v}" for k, v in extra.items())])
    return f"loss.addons={{kl_to_reference:{{{keys}}}}}"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``make(overrides) -> path``: the checkpoint of a freshly built run, written as a run
    writes it (Trainer.state_dict), under a run directory's checkpoints/final.pt."""
    made = {}

    def make(overrides: list[str], name: str):
        if name not in made:
            run_dir = tmp_path_factory.mktemp(name)
            trainer = make_trainer(overrides, run_dir)
            made[name] = atomic_save(trainer.state_dict(), run_dir / CHECKPOINT_DIR / FINAL)
            trainer.parts.close()
        return made[name]

    return make


@pytest.fixture(scope="module")
def reference(checkpoints):
    """A CartPole PPO run's checkpoint (seed 3: another policy than this test's runs)."""
    return checkpoints([*CARTPOLE, "seed=3"], "cartpole")


def loss_config(overrides: list[str]):
    """The resolved config of ``rlplat-train <overrides>`` (no run), and its env's spaces."""
    config = resolve_config(compose_config(overrides))
    env = gymnasium.make(config["env"]["id"])
    return config, env.observation_space, env.action_space


def never_loads(source, key):
    raise AssertionError("the add-on's reference was loaded before the config was checked")


# --- the registry and rlplat-list -------------------------------------------------------------------


def test_kl_to_reference_is_a_builtin_add_on_listed_with_its_keys(capsys):
    assert REGISTRIES["loss_addon"] is LOSS_ADDONS and LOSS_ADDONS.group == "rlplat.loss_addons"
    assert LOSS_ADDONS.get("kl_to_reference") is KLToReference
    assert LOSS_ADDONS.distribution("kl_to_reference") == "rlplat"
    assert list_main(["--kind", "loss_addon"]) == 0
    out = capsys.readouterr().out
    assert "entry-point group rlplat.loss_addons" in out and "kl_to_reference" in out
    assert "keys: source (required)" in out and "also takes coef" in out


# --- the conformance kit --------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["ppo", "a2c", "ppo_kl", "reinforce", "impala"])
def test_kl_to_reference_passes_the_kit_in_every_on_policy_loss(host):
    check_loss_addon("kl_to_reference", {"source": "any run"}, host=host, zero_at_reference=True)


class PerSample:
    """An add-on that forgets to average: ``[N]`` instead of a 0-dim term."""

    def __init__(self, observation_space, action_space, *, load_policy):
        pass

    def __call__(self, policy, batch):
        return policy.actor_torso(batch["observation"]).pow(2).mean(-1)


class Detached:
    """An add-on whose term carries no gradient."""

    def __init__(self, observation_space, action_space, *, load_policy):
        pass

    def __call__(self, policy, batch):
        return policy.actor_torso(batch["observation"]).pow(2).mean().detach()


class Learned(nn.Module):
    """An add-on with a parameter of its own, which no optimizer would step."""

    def __init__(self, observation_space, action_space, *, load_policy):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, policy, batch):
        return self.scale * policy.actor_torso(batch["observation"]).pow(2).mean()


class NotZeroAtReference:
    """An add-on that calls itself a divergence from the reference but is not 0 there."""

    def __init__(self, observation_space, action_space, *, load_policy):
        self.reference = load_policy("any run", "source")

    def __call__(self, policy, batch):
        return policy.actor_torso(batch["observation"]).pow(2).mean()


@pytest.mark.parametrize(
    "constructor,options,needle",
    [
        (PerSample, {}, "the term (action_space=Box(-1.0, 1.0, (2,), float32)) on a batch of 16 is Tensor [16]"),
        (Detached, {}, "carries no gradient"),
        (Learned, {}, "holds trainable parameters ['scale']"),
        (NotZeroAtReference, {"zero_at_reference": True}, "where the policy is the reference; expected 0"),
    ],
    ids=["per-sample", "detached", "trainable", "not zero at the reference"],
)
def test_the_kit_names_what_is_wrong_with_a_broken_add_on(constructor, options, needle):
    with pytest.raises(AssertionError) as error:
        check_loss_addon(constructor, **options)
    assert str(error.value).startswith(f"loss_addon {constructor.__name__!r}: ")
    assert needle in str(error.value)


def test_an_add_on_named_as_a_key_of_the_loss_is_refused():
    config, observation_space, action_space = loss_config(["env=cartpole"])
    loss = build_loss(config, observation_space, action_space)
    loss.attach_addons((WeightedAddon("entropy", Detached(None, None, load_policy=None), 1.0),))
    batch = {"observation": torch.zeros(2, 4)}
    with pytest.raises(PluginError, match="loss add-on 'entropy' would replace the loss's own output entropy"):
        addon_terms(loss.addons, loss.agent, batch, ["loss_objective", "entropy"])


# --- the config's checks, before anything is loaded ------------------------------------------------


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["env=pendulum", "algo=sac", "+" + addon("x")],
            "loss.addons (kl_to_reference): loss 'sac' takes no add-ons. Losses that do: a2c, impala, ppo, ppo_kl",
        ),
        (
            ["env=cartpole", "loss.addons={kl_to_referense:{coef:1}}"],
            "loss.addons.kl_to_referense: no loss add-on is named 'kl_to_referense'. Valid: kl_to_reference. "
            "Did you mean 'kl_to_reference'?",
        ),
        (
            ["env=cartpole", "loss.addons={kl_to_reference:{source:x}}"],
            "loss.addons.kl_to_reference.coef is required and not set",
        ),
        (
            ["env=cartpole", addon("x", coef=-0.1)],
            "loss.addons.kl_to_reference.coef=-0.1: must be a finite number >= 0",
        ),
        (["env=cartpole", addon("x", coef="true")], "loss.addons.kl_to_reference.coef=True: must be a finite number"),
        (
            ["env=cartpole", addon("x", sorce="y")],
            "loss.addons.kl_to_reference.sorce='y': loss.addons.kl_to_reference has no key 'sorce'. "
            "Valid keys: source, coef. Did you mean 'source'?",
        ),
        (
            ["env=cartpole", "loss.addons={kl_to_reference:{coef:1}}"],
            "loss.addons.kl_to_reference.source is required and not set",
        ),
        (
            ["env=cartpole", "network.core=lstm", addon("x")],
            "loss.addons (kl_to_reference): add-ons compare single-step policies, and this policy is recurrent",
        ),
    ],
    ids=[
        "off-policy loss",
        "unknown name",
        "no coef",
        "negative coef",
        "bool coef",
        "unknown key",
        "no source",
        "lstm",
    ],
)
def test_bad_add_on_settings_are_config_errors_raised_before_any_reference_loads(overrides, message):
    config, observation_space, action_space = loss_config(overrides)
    with pytest.raises(ConfigError) as error:
        build_loss(config, observation_space, action_space, never_loads)
    assert message in str(error.value)


@pytest.mark.parametrize("node", ["loss.addons={}", "loss.addons=null"])
def test_no_add_ons_is_the_loss_alone(node):
    config, observation_space, action_space = loss_config(["env=cartpole", node])
    loss = build_loss(config, observation_space, action_space, never_loads)
    assert loss.addons == () and loss._addons_hook is None


# --- the reference: loaded from a real checkpoint, checked, frozen --------------------------------


def test_a_run_with_kl_to_reference_logs_its_term_trains_on_it_and_keeps_the_reference_out_of_its_state(
    reference, tmp_path
):
    built = build(compose_config([*CARTPOLE, addon(reference, coef=0.5)]))
    plain = build(compose_config(CARTPOLE))
    try:
        loss, (kl_addon,) = built.parts.loss, built.parts.loss.addons
        assert kl_addon.name == "kl_to_reference" and kl_addon.coef == 0.5
        assert "update by autograd (loss.addons is set)" in built.acceleration
        assert "closed-form gradients" in plain.acceleration
        frozen = kl_addon.term.reference
        assert not any(p.requires_grad for p in frozen.parameters()) and not frozen.training
        ids = {id(p) for p in loss.parameters()}
        assert not any(id(p) in ids for p in frozen.parameters())
        assert loss.state_dict().keys() == plain.parts.loss.state_dict().keys()  # not in the checkpoint
        saved = load_checkpoint(reference)["loss"]
        agent = {k.removeprefix("agent."): v for k, v in saved.items() if k.startswith("agent.")}
        torch.testing.assert_close(frozen.state_dict(), agent)
        rollout = loss.preprocess(built.parts.collector.rollout())
        output = loss(rollout.reshape(-1)[:64].select(*loss.in_keys).clone())  # a buffer's copy, out of inference mode
        assert output["loss_kl_to_reference"].requires_grad and output["kl_to_reference"] > 0
        torch.testing.assert_close(output["loss_kl_to_reference"].detach(), 0.5 * output["kl_to_reference"])
    finally:
        built.parts.close()
        plain.parts.close()


@pytest.mark.parametrize("device", DEVICES)
def test_the_reference_is_on_the_runs_device(reference, device):
    built = build(compose_config([*CARTPOLE, f"trainer.device={device}", addon(reference)]))
    try:
        loss, device = built.parts.loss, built.parts.device
        (kl_addon,) = loss.addons
        assert {p.device.type for p in kl_addon.term.reference.parameters()} == {device.type}
        rollout = loss.preprocess(built.parts.collector.rollout())
        output = loss(rollout.reshape(-1)[:64].select(*loss.in_keys).clone())
        assert output["kl_to_reference"].device.type == device.type and output["kl_to_reference"] > 0
    finally:
        built.parts.close()


def test_loading_a_reference_leaves_the_runs_random_draws_as_they_were(reference):
    draws = []
    for overrides in (CARTPOLE, [*CARTPOLE, addon(reference)]):
        built = build(compose_config(overrides))
        draws.append(torch.rand(4))
        built.parts.close()
    torch.testing.assert_close(draws[0], draws[1])


def test_a_run_directory_gives_its_final_checkpoint(reference):
    built = build(compose_config([*CARTPOLE, addon(reference.parent.parent, coef=0)]))
    built.parts.close()


@pytest.mark.parametrize(
    "source,message",
    [
        ("/no/such/run.pt", "loss.addons.kl_to_reference.source='/no/such/run.pt': no such file or directory"),
        ("''", "loss.addons.kl_to_reference.source='': give a run id, a run directory or a checkpoint file"),
        ("0123abcd", "loss.addons.kl_to_reference.source='0123abcd': no run with this id: there is no store at"),
    ],
    ids=["missing file", "empty", "unknown run id"],
)
def test_a_source_that_does_not_exist_is_named(source, message, tmp_path):
    overrides = [*CARTPOLE, f"tracking.uri=sqlite:///{tmp_path / 'none.db'}"]
    node = f"loss.addons={{kl_to_reference:{{source:{source},coef:1}}}}"
    with pytest.raises(ConfigError) as error:
        build(compose_config([*overrides, node]))
    assert message in str(error.value)


def test_a_file_that_is_no_checkpoint_is_named(tmp_path):
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"^loss.addons.kl_to_reference.source='.*notes.pt': checkpoint"):
        build(compose_config([*CARTPOLE, addon(tmp_path / "notes.pt")]))


def test_a_reference_of_other_spaces_is_refused_naming_both(reference):
    with pytest.raises(ConfigError) as error:
        build(compose_config(["env=pendulum", "transforms.obs_norm=null", "tracking.enabled=false", addon(reference)]))
    message = str(error.value)
    assert message.startswith(f"loss.addons.kl_to_reference.source='{reference}': that run's policy reads")
    assert "acts in Discrete(2)" in message and "actions Box(-2.0, 2.0, (1,), float32)" in message


def test_running_observation_statistics_are_refused_and_fixed_alike_ones_taken(reference, checkpoints):
    with pytest.raises(ConfigError, match="this run's transforms \\(ObservationNorm\\) update running statistics"):
        build(compose_config(["env=cartpole", "tracking.enabled=false", *TINY, addon(reference)]))
    fixed = ["env=cartpole", "tracking.enabled=false", *TINY, "transforms.obs_norm.init_steps=50"]
    normalised = checkpoints([*fixed, "seed=3"], "fixed_statistics")
    with pytest.raises(ConfigError, match="that run's transforms \\(ObservationNorm\\) map observations otherwise"):
        build(compose_config([*fixed, "seed=4", addon(normalised)]))  # statistics of another seed's steps
    with pytest.raises(ConfigError, match="that run's transforms \\(none\\) map observations otherwise"):
        build(compose_config([*fixed, "seed=3", addon(reference)]))
    build(compose_config([*fixed, "seed=3", addon(normalised)])).parts.close()


def test_a_recurrent_or_off_policy_reference_is_refused(checkpoints):
    lstm = checkpoints([*CARTPOLE, "network.core=lstm", "buffer.sequence_length=8"], "lstm")
    with pytest.raises(ConfigError, match="that run's policy is recurrent \\(network.core='lstm'\\)"):
        build(compose_config([*CARTPOLE, addon(lstm)]))
    pendulum = ["env=pendulum", "transforms.obs_norm=null", "tracking.enabled=false"]
    sac = checkpoints([*pendulum, "algo=sac", "buffer.learning_starts=64", "buffer.capacity=512"], "sac")
    with pytest.raises(ConfigError, match="the run's loss 'sac' has no actor-critic policy to compare with"):
        build(compose_config([*pendulum, *TINY, addon(sac)]))


def test_evaluation_rebuilds_the_policy_without_its_add_ons_even_when_the_reference_is_gone(reference, tmp_path):
    run_dir = tmp_path / "run"
    trainer = make_trainer([*CARTPOLE, addon(reference)], run_dir)
    state = trainer.state_dict()
    trainer.parts.close()
    assert state["config"]["loss"]["addons"]["kl_to_reference"]["source"] == str(reference)
    state["config"]["loss"]["addons"]["kl_to_reference"]["source"] = str(tmp_path / "deleted.pt")
    built = restore(Located(run_dir / "final.pt", state, run_dir, None, None), {}, None, None)
    try:
        assert built.parts.loss.addons == ()
        torch.testing.assert_close(built.parts.loss.state_dict(), state["loss"])
    finally:
        built.parts.close()


def test_observation_spaces_of_other_dtype_or_size_do_not_match():
    from rlplat.build import space_signature

    box = gymnasium.spaces.Box(-1, 1, (4,), np.float32)
    assert space_signature(box) == space_signature(gymnasium.spaces.Box(-5, 5, (4,), np.float32))
    assert space_signature(box) != space_signature(gymnasium.spaces.Box(-1, 1, (4,), np.float64))
    assert space_signature(gymnasium.spaces.Discrete(2)) != space_signature(gymnasium.spaces.Discrete(3))
    multi = gymnasium.spaces.MultiDiscrete([3, 2])
    assert space_signature(multi) != space_signature(gymnasium.spaces.MultiDiscrete([2, 3]))
