"""The conformance kit (rlplat.testing) over every built-in entry, against deliberately broken
entries, and the registry's protocol check (check_conforms) it rests on."""

from __future__ import annotations

from typing import Protocol

import gymnasium
import numpy as np
import pytest
import torch
from conftest import install_distribution
from tensordict import TensorDict
from torch import nn

from rlplat import keys
from rlplat.collectors.sync import SyncCollector
from rlplat.losses.base import Loss, LossModule
from rlplat.losses.ppo import PPOLoss
from rlplat.registry import (
    BUILTIN_DISTRIBUTION,
    REGISTRIES,
    PluginError,
    Registry,
    check_conforms,
    protocol_members,
)
from rlplat.testing import (
    check_buffer,
    check_collector,
    check_env,
    check_loss,
    check_loss_addon,
    check_network,
    check_transform,
)
from rlplat.transforms.base import Transform

CHECKS = {
    "env": check_env,
    "transform": check_transform,
    "network": check_network,
    "collector": check_collector,
    "buffer": check_buffer,
    "loss": check_loss,
    "loss_addon": check_loss_addon,
}

SMALL = {
    ("env", "gym"): [{"id": "CartPole-v1"}, {"id": "Pendulum-v1", "max_episode_steps": 20}],
    ("collector", "sync"): [{"num_envs": 2, "steps_per_env": 16}],
    ("collector", "async"): [{"num_workers": 1, "num_envs": 2, "steps_per_env": 16}],
    ("collector", "ray"): [{"num_workers": 1, "num_envs": 2, "steps_per_env": 16, "num_cpus": 0.5}],
    ("buffer", "rollout"): [{"epochs": 2, "minibatch_size": 16}],
    ("buffer", "replay"): [
        {"capacity": 256, "batch_size": 8, "learning_starts": 64, "replay_ratio": 0.25},
        {"capacity": 256, "batch_size": 8, "learning_starts": 64, "replay_ratio": 0.25, "sequence_length": 3},
    ],
    ("buffer", "prioritized"): [
        {"capacity": 256, "batch_size": 8, "learning_starts": 64, "replay_ratio": 0.25},
        {"capacity": 256, "batch_size": 8, "learning_starts": 64, "replay_ratio": 0.25, "sequence_length": 3},
    ],
    ("loss", "dqn"): [{}, {"n_step": 3}],
    ("env", "atari"): [{"max_episode_steps": 30}],
    ("env", "minigrid"): [{"keys": ["image", "direction"]}],
    ("transform", "time_limit"): [{"max_episode_steps": 20}],
    ("transform", "reward_shaping"): [{"function": "test_testing_kit:halve_reward"}],
    ("transform", "resize"): [{"size": 16}],
    ("transform", "tokenize"): [{"vocabulary": ["key", "door", "goal"]}],
    ("transform", "mask_observation"): [{"keep": [0, 2]}],
    ("loss_addon", "kl_to_reference"): [{"source": "a run the kit stands in for"}],
}
"""YAML kwargs per built-in, small enough for a unit test; a built-in not listed is checked
with its defaults."""


def halve_reward(observation, action, reward, terminated):
    """A reward function for ``transforms.reward_shaping``."""
    return reward / 2


def cartpole() -> gymnasium.Env:
    return gymnasium.make("CartPole-v1")


def pendulum() -> gymnasium.Env:
    return gymnasium.make("Pendulum-v1")


def rendered_cartpole() -> gymnasium.Env:
    return gymnasium.make("CartPole-v1", render_mode="rgb_array")


def cartpole_pixels() -> gymnasium.Env:
    """CartPole's frames at 30 x 45, [H, W, 3] uint8: an image env for the image transforms."""
    env = gymnasium.wrappers.AddRenderObservation(rendered_cartpole(), render_only=True)
    return gymnasium.wrappers.ResizeObservation(env, (30, 45))


def minigrid_mission() -> gymnasium.Env:
    from rlplat.envs.minigrid import make_minigrid

    return make_minigrid("MiniGrid-DoorKey-5x5-v0")


ONE_ENV = {"envs": (("gym", {"id": "CartPole-v1", "max_episode_steps": 10}),)}
"""The kit's envs cut to one for the collectors that start worker processes (or Ray actors)
for each of its checks: a Box env adds nothing their workers do differently."""

KIT_ARGS = {
    ("collector", "async"): ONE_ENV,
    ("collector", "ray"): ONE_ENV,
    ("network", "cnn"): {"observation_space": gymnasium.spaces.Box(0, 255, (2, 36, 36), np.uint8)},
    ("loss_addon", "kl_to_reference"): {"zero_at_reference": True},
    **{
        ("transform", name): {"make_env": make, "steps": 20}
        for name, make in (
            ("from_pixels", rendered_cartpole),
            ("to_tensor_image", cartpole_pixels),
            ("resize", cartpole_pixels),
            ("grayscale", cartpole_pixels),
            ("frame_stack", cartpole),
            ("noop_reset", cartpole),
            ("step_counter", cartpole),
            ("time_limit", cartpole),
            ("mask_observation", cartpole),
            ("clip_action", pendulum),
            ("rescale_action", pendulum),
            ("reward_shaping", cartpole),
            ("tokenize", minigrid_mission),
        )
    },
}
"""Further arguments of the kit's check per built-in: the inputs rlplat would give it."""


def builtins() -> list[tuple[str, str, dict]]:
    """``(kind, name, kwargs)`` for every entry rlplat itself declares, read from the registries."""
    cases = []
    for kind in CHECKS:
        registry = REGISTRIES[kind]
        for name in registry.names():
            if registry.distribution(name) == BUILTIN_DISTRIBUTION:
                cases += [(kind, name, kwargs) for kwargs in SMALL.get((kind, name), [{}])]
    return cases


@pytest.mark.parametrize(
    ("kind", "name", "kwargs"), builtins(), ids=lambda v: str(v) if not isinstance(v, dict) else ""
)
def test_every_builtin_entry_passes_the_kit(kind, name, kwargs, request):
    if (kind, name) == ("collector", "ray"):
        request.getfixturevalue("local_ray")  # one Ray instance for the kit's six collectors
    CHECKS[kind](name, kwargs, **KIT_ARGS.get((kind, name), {}))


def test_every_kind_of_entry_has_builtins_to_check():
    assert {kind for kind, _, _ in builtins()} == set(CHECKS)


# --- broken entries fail with a message naming the problem -------------------------------------


def wrong_width(observation_space, out_features):
    return nn.Linear(int(np.prod(observation_space.shape)), out_features + 1)


def test_a_network_of_the_wrong_width_is_named_with_the_shapes():
    with pytest.raises(AssertionError) as error:
        check_network(wrong_width, out_features=8, batch_size=5)
    message = str(error.value)
    assert message.startswith("network 'wrong_width': ")
    assert "shape [5, 9]" in message and "expected [5, 8]" in message


def detached(observation_space, out_features):
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(int(np.prod(observation_space.shape)), out_features)

        def forward(self, observation):
            return self.linear(observation).detach()

    return Detached()


def test_a_network_that_blocks_gradients_is_named():
    with pytest.raises(AssertionError, match=r"network 'detached': its features carry no gradient"):
        check_network(detached)


def partly_used(observation_space, out_features):
    class PartlyUsed(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(int(np.prod(observation_space.shape)), out_features)
            self.unused = nn.Linear(2, 2)

        def forward(self, observation):
            return self.used(observation)

    return PartlyUsed()


def test_a_network_with_parameters_outside_the_graph_is_named():
    with pytest.raises(AssertionError, match=r"no gradient reaches the parameters \['unused.weight', 'unused.bias'\]"):
        check_network(partly_used)


def not_an_env():
    return object()


def test_an_env_factory_returning_a_non_env_is_named():
    with pytest.raises(AssertionError, match="env 'not_an_env': the factory returned object, not a gymnasium.Env"):
        check_env(not_an_env)


def int_flags():
    class IntFlags(gymnasium.Wrapper):
        def step(self, action):
            observation, reward, terminated, truncated, info = self.env.step(action)
            return observation, reward, int(terminated), truncated, info

    return IntFlags(gymnasium.make("CartPole-v1"))


def test_an_env_with_int_terminated_is_named():
    with pytest.raises(
        AssertionError, match="env 'int_flags': step.. returned terminated=0 of type int; it must be a bool"
    ):
        check_env(int_flags)


def test_unknown_yaml_keys_fail_as_in_a_run():
    from rlplat.registry import ConfigError

    with pytest.raises(ConfigError, match="network.hiden_sizes"):
        check_network("mlp", {"hiden_sizes": [8]})


class NoUpdateLoss(nn.Module):
    """A loss that forgot ``after_update`` and ``param_groups``."""

    on_policy = True
    sequence_length = 1

    def __init__(self, observation_space, action_space, network):
        super().__init__()
        self.policy = _LinearPolicy(observation_space, action_space)

    def preprocess(self, rollout):
        return rollout

    def forward(self, batch):
        return TensorDict({"loss_objective": self.policy.linear(batch[keys.OBSERVATION]).pow(2).mean()}, [])


class _LinearPolicy(nn.Module):
    def __init__(self, observation_space, action_space):
        super().__init__()
        self.action_dim = int(action_space.shape[0])
        self.linear = nn.Linear(int(observation_space.shape[0]), self.action_dim)

    def act(self, observation, deterministic=False):
        return torch.tanh(self.linear(observation)), torch.zeros(observation.shape[0])


def test_a_loss_missing_methods_is_named_with_every_missing_member():
    with pytest.raises(AssertionError) as error:
        check_loss(NoUpdateLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])
    message = str(error.value)
    assert message.startswith(
        "loss 'NoUpdateLoss' built a NoUpdateLoss that does not implement rlplat.losses.base.Loss"
    )
    assert "missing after_update(), param_groups()." in message


class LeakyLoss(NoUpdateLoss):
    """Keeps gradients on a diagnostic and leaves a parameter out of its groups."""

    def __init__(self, observation_space, action_space, network, leak="diagnostic"):
        super().__init__(observation_space, action_space, network)
        self.leak = leak
        self.extra = nn.Parameter(torch.zeros(()))

    def forward(self, batch):
        out = super().forward(batch)
        if self.leak == "diagnostic":
            out["q_mean"] = self.policy.linear.weight.mean()
        return out

    def after_update(self):
        pass

    def param_groups(self):
        return {
            "actor": list(self.policy.parameters()),
            **({"extra": [self.extra]} if self.leak == "diagnostic" else {}),
        }


def test_a_diagnostic_with_gradients_is_named():
    with pytest.raises(AssertionError, match="loss 'LeakyLoss': diagnostic 'q_mean' carries gradients; detach it"):
        check_loss(LeakyLoss, {"leak": "diagnostic"}, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


def test_a_parameter_outside_every_param_group_is_named():
    with pytest.raises(AssertionError, match=r"trainable parameters in no param group \(actor\): \['extra'\]"):
        check_loss(LeakyLoss, {"leak": "group"}, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


class _StalePolicy(_LinearPolicy):
    """Its act function keeps an action offset that ``act`` no longer has."""

    def act_function(self, deterministic):
        offset = 0.1
        return lambda observation: (torch.tanh(self.linear(observation)) + offset, torch.zeros(observation.shape[0]))


class StaleActLoss(LeakyLoss):
    def __init__(self, observation_space, action_space, network):
        super().__init__(observation_space, action_space, network)
        self.policy = _StalePolicy(observation_space, action_space)


def test_an_act_function_that_differs_from_act_is_named():
    with pytest.raises(
        AssertionError,
        match=r"loss 'StaleActLoss': policy.act_function\(False\)\(\[4, 4\] float32\) returned another action",
    ):
        check_loss(StaleActLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_an_accelerated_update_unlike_autograd_is_named(monkeypatch, kind):
    """check_loss compares every closed form of rlplat.accel that covers the entry with autograd."""
    from rlplat.accel import plan

    original = plan.NumpyPPOGradients if kind == "numpy" else plan.PPOGradients

    class Wrong(original):
        def __call__(self, batch):
            output = super().__call__(batch)
            self.loss.agent.value_head.weight.grad.mul_(2.0)
            return output

    monkeypatch.setattr(plan, original.__name__, Wrong)
    with pytest.raises(
        AssertionError,
        match=rf"loss 'ppo': rlplat.accel's closed-form update in {kind} disagrees with autograd: "
        r"parameter agent.value_head.weight",
    ):
        check_loss("ppo", action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


class ShortInKeysLoss(PPOLoss):
    """PPO that declares too few in_keys: the old log-probabilities it reads are left out."""

    in_keys = (keys.OBSERVATION, keys.ACTION, keys.ADVANTAGE, keys.VALUE_TARGET)

    def __init__(self, observation_space, action_space, network):
        super().__init__(observation_space, action_space, network)
        self.in_keys = ShortInKeysLoss.in_keys


class AbsentInKeysLoss(ShortInKeysLoss):
    def __init__(self, observation_space, action_space, network):
        super().__init__(observation_space, action_space, network)
        self.in_keys = (*PPOLoss.in_keys, keys.ACTION_LOG_PROB, "returns")


def test_in_keys_that_leave_out_a_key_the_loss_reads_fail_as_the_trainer_would():
    with pytest.raises(AssertionError, match=r"loss 'ShortInKeysLoss': .*action_log_prob"):
        check_loss(ShortInKeysLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


def test_in_keys_that_the_rollout_does_not_hold_are_named():
    with pytest.raises(
        AssertionError, match=r"loss 'AbsentInKeysLoss': in_keys \['returns'\] are not keys of the preprocessed rollout"
    ):
        check_loss(AbsentInKeysLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


class StructuralLoss(LeakyLoss):
    """Implements Loss without subclassing LossModule: checked and trained with its defaults."""

    def __init__(self, observation_space, action_space, network):
        super().__init__(observation_space, action_space, network, leak="none")
        del self.extra

    def param_groups(self):
        return {"actor": list(self.policy.parameters())}


class UndeclaredInKeysLoss(StructuralLoss):
    in_keys = (keys.OBSERVATION,)


class DeclaredInKeysLoss(LossModule):
    """The same loss with in_keys, subclassing LossModule."""

    on_policy = True
    sequence_length = 1
    action_spaces = (gymnasium.spaces.Box,)
    in_keys = (keys.OBSERVATION,)

    def __init__(self, observation_space, action_space, network):
        super().__init__()
        self.policy = _LinearPolicy(observation_space, action_space)

    def preprocess(self, rollout):
        return rollout

    def forward(self, batch):
        assert list(batch.keys()) == [keys.OBSERVATION]  # only its in_keys
        return TensorDict({"loss_objective": self.policy.linear(batch[keys.OBSERVATION]).pow(2).mean()}, [])

    def after_update(self):
        pass

    def param_groups(self):
        return {"actor": list(self.policy.parameters())}


def test_a_loss_that_only_implements_the_protocol_passes_with_the_defaults():
    assert not isinstance(StructuralLoss, LossModule)
    check_loss(StructuralLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


def test_a_loss_subclassing_loss_module_has_its_members_read():
    check_loss(DeclaredInKeysLoss)  # action_spaces: Box only, else the Discrete(3) policy would fail


def test_an_optional_member_defined_without_subclassing_loss_module_is_named():
    with pytest.raises(
        AssertionError,
        match=r"loss 'UndeclaredInKeysLoss': UndeclaredInKeysLoss defines in_keys without subclassing "
        r"rlplat.losses.base.LossModule",
    ):
        check_loss(UndeclaredInKeysLoss, action_spaces=[gymnasium.spaces.Box(-1, 1, (2,))])


class Reshaping(Transform):
    def __init__(self, observation_space):
        super().__init__()

    def transform_observation(self, observation, update):
        return observation.flatten()


def test_a_transform_that_changes_the_shape_is_named():
    with pytest.raises(
        AssertionError,
        match=r"transform 'Reshaping': transform_observation returned \[16\] torch.float32 for input \[4, 4\] float32",
    ):
        check_transform(Reshaping)


class Forgetful(Transform):
    """Counts steps, but its count is not part of its state_dict."""

    def __init__(self, observation_space):
        super().__init__()
        self.count = 0

    def transform_observation(self, observation, update):
        self.count += int(update)
        return observation + self.count


def test_a_transform_whose_state_is_not_checkpointed_is_named():
    with pytest.raises(
        AssertionError, match="after a state_dict round trip a fresh instance maps observations differently"
    ):
        check_transform(Forgetful)


class StaleNext(SyncCollector):
    """Stores s_t as the next observation: the bug SAME_STEP autoreset handling prevents."""

    def rollout(self):
        rollout = super().rollout()
        rollout[keys.NEXT_OBSERVATION] = rollout[keys.OBSERVATION].clone()
        return rollout


def test_a_collector_with_wrong_next_observations_is_named():
    with pytest.raises(AssertionError, match=r"collector 'StaleNext': within an episode \('next', 'observation'\)"):
        check_collector(StaleNext, {"num_envs": 2, "steps_per_env": 8})


class Forgets(SyncCollector):
    """Never resets a recurrent policy's state where an episode ends."""

    def rollout(self):
        self.acting.episodes_ended = lambda done: None
        return super().rollout()


def test_a_collector_that_carries_a_recurrent_state_across_episodes_is_named():
    with pytest.raises(AssertionError, match=r"collector 'Forgets': 'recurrent_state' is not the state each step"):
        check_collector(
            Forgets, {"num_envs": 2, "steps_per_env": 8}, envs=[("gym", {"id": "CartPole-v1", "max_episode_steps": 5})]
        )


# --- check_conforms: the registry's protocol check -----------------------------------------------


class Greeter(Protocol):
    name: str

    def greet(self, other: str) -> str: ...

    def __call__(self) -> None: ...


class LoudGreeter(Greeter, Protocol):
    volume: int

    def shout(self) -> str: ...


def test_protocol_members_are_read_from_the_protocols_own_bodies():
    assert protocol_members(Greeter) == {"name": "attribute", "greet": "method", "__call__": "method"}
    assert protocol_members(LoudGreeter) == {
        "volume": "attribute",
        "shout": "method",
        "name": "attribute",
        "greet": "method",
        "__call__": "method",
    }
    members = protocol_members(Loss)
    assert {
        "policy",
        "on_policy",
        "sequence_length",
        "preprocess",
        "__call__",
        "after_update",
        "parameters",
        "param_groups",
        "state_dict",
        "load_state_dict",
    } == set(members)


def test_check_conforms_names_every_missing_member():
    class Partial:
        name = "x"
        shout = "not a method"

    with pytest.raises(PluginError) as error:
        check_conforms("thing", "partial", Partial(), LoudGreeter, distribution="fakeplugin-partial")
    message = str(error.value)
    assert message.startswith("thing 'partial' from distribution 'fakeplugin-partial' built a Partial")
    assert "does not implement test_testing_kit.LoudGreeter" in message
    assert "missing volume, greet(), __call__()" in message and "not callable: shout" in message


def test_check_conforms_passes_a_conforming_object():
    class Full:
        name, volume = "x", 3

        def greet(self, other):
            return other

        def shout(self):
            return "!"

        def __call__(self):
            return None

    check_conforms("thing", "full", Full(), LoudGreeter)


def test_build_with_a_protocol_names_the_plugins_distribution(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    install_distribution(
        tmp_path,
        "fakeplugin-greeter",
        {"rlplat_test.greeters": {"mute": "fakeplugin_greeter:Mute"}},
        {"fakeplugin_greeter.py": "class Mute:\n    name = 'mute'\n"},
    )
    registry = Registry("greeter", "rlplat_test.greeters")
    assert registry.build("greeter", {"name": "mute"}).name == "mute"  # no protocol: no check
    with pytest.raises(PluginError) as error:
        registry.build("greeter", {"name": "mute"}, protocol=Greeter)
    assert str(error.value).startswith("greeter 'mute' from distribution 'fakeplugin-greeter' built a Mute")
    assert "missing greet(), __call__()." in str(error.value)


def test_registry_looks_up_the_distribution_of_builtin_entries():
    with pytest.raises(PluginError, match="loss 'ppo' from distribution 'rlplat' built a object"):
        check_conforms("loss", "ppo", object(), Loss)


def test_rlplats_own_adapter_and_parts_are_instances_of_the_runtime_protocols():
    from rlplat.buffers.base import Buffer
    from rlplat.collectors.base import Collector, Policy
    from rlplat.envs.base import VectorEnvLike
    from rlplat.envs.vector import VectorEnv
    from rlplat.testing.collectors import ObservationPolicy

    space = gymnasium.spaces.Discrete(2)
    env = VectorEnv(lambda: gymnasium.make("CartPole-v1"), 2)
    try:
        check_conforms("env", "VectorEnv", env, VectorEnvLike)
        assert isinstance(env, VectorEnvLike)
    finally:
        env.close()

    def make(n, vectorization):
        return VectorEnv(lambda: gymnasium.make("CartPole-v1"), n, vectorization=vectorization)

    collector = SyncCollector(make, ObservationPolicy(space), 64, torch.device("cpu"), 0, num_envs=2, steps_per_env=4)
    try:
        assert isinstance(collector, Collector) and isinstance(collector.policy, Policy)
        assert collector.rollout_shape == (4, 2)
    finally:
        collector.close()
    assert not isinstance(object(), Buffer)
