"""The multi-input torso: one encoder per Dict entry, the mission read by a GRU, usable as a
TensorDict module; MiniGrid's observations through the env adapter."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rlplat.build import build_transforms
from rlplat.envs.vector import VectorEnv
from rlplat.networks.actor_critic import ActorCritic
from rlplat.networks.multi_input import ImageEncoder, MultiInput, OneHot, TextEncoder, VectorEncoder
from rlplat.registry import ConfigError
from rlplat.transforms.text import Tokenize

pytest.importorskip("minigrid")

DOORKEY = {"name": "minigrid", "id": "MiniGrid-DoorKey-5x5-v0", "keys": ["image", "direction", "mission"]}
VOCABULARY = ["get", "the", "a", "red", "green", "blue", "key", "ball", "box", "open", "door", "go", "to"]


def mission_space() -> gymnasium.spaces.Dict:
    transforms, space, _ = build_transforms({"tokenize": {"vocabulary": VOCABULARY, "max_length": 8}}, DOORKEY)
    assert isinstance(transforms[0], Tokenize)
    return space


def tokens(text: str) -> torch.Tensor:
    ids = [VOCABULARY.index(word) + 2 for word in text.split()]
    return torch.tensor([ids + [0] * (8 - len(ids))])


def test_minigrid_observations_reach_the_policy_as_a_tensordict_of_their_own_dtypes():
    transforms, _, _ = build_transforms({"tokenize": {"vocabulary": VOCABULARY}}, DOORKEY)
    env = VectorEnv(lambda: gymnasium.make("MiniGrid-DoorKey-5x5-v0"), 2, transforms)
    try:
        observation = env.reset(seed=0)
        assert isinstance(observation, TensorDict) and observation.batch_size == torch.Size([2])
        assert observation["image"].dtype == torch.uint8 and observation["image"].shape == (2, 7, 7, 3)
        assert observation["direction"].dtype == torch.int64 and observation["direction"].shape == (2,)
        assert observation["mission"].dtype == torch.int64 and observation["mission"].shape == (2, 16)
        step = env.step(torch.tensor([2, 2]))
        assert isinstance(step.next_observation, TensorDict) and step.reward.shape == (2, 1)
    finally:
        env.close()


def test_changing_only_the_mission_changes_the_policys_output():
    torch.manual_seed(0)
    space = mission_space()
    network = lambda features: MultiInput(space, features)  # noqa: E731
    agent = ActorCritic(space, gymnasium.spaces.Discrete(7), network, features=32)
    image = torch.randint(0, 6, (1, 7, 7, 3), dtype=torch.uint8)
    direction = torch.tensor([1])

    def logits(text: str) -> torch.Tensor:
        observation = TensorDict({"image": image, "direction": direction, "mission": tokens(text)}, batch_size=[1])
        features = agent.actor_torso(observation)
        return agent.head.logits(features)

    red, blue = logits("get the red key"), logits("get the blue key")
    assert not torch.allclose(red, blue)
    torch.testing.assert_close(red, logits("get the red key"))  # and nothing else does


def test_the_text_encoder_reads_up_to_the_last_word_whatever_the_padding():
    encoder = TextEncoder(vocabulary=20, embedding_dim=8, hidden_size=16)
    short = torch.tensor([[3, 4, 5, 0, 0, 0]])
    longer = torch.tensor([[3, 4, 5, 0, 0, 0, 0, 0, 0]])
    torch.testing.assert_close(encoder(short), encoder(longer))
    assert not torch.allclose(encoder(short), encoder(torch.tensor([[3, 4, 6, 0, 0, 0]])))


def test_each_entry_gets_the_encoder_of_its_space():
    space = gymnasium.spaces.Dict(
        {
            "pixels": gymnasium.spaces.Box(0, 255, (3, 16, 16), np.uint8),
            "view": gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8),
            "state": gymnasium.spaces.Box(-1, 1, (5,), np.float32),
            "tokens": gymnasium.spaces.Box(0, 9, (6,), np.int64),
            "direction": gymnasium.spaces.Discrete(4),
            "buttons": gymnasium.spaces.MultiDiscrete([3, 2]),
        }
    )
    torso = MultiInput(space, 24)
    kinds = {key: type(encoder) for key, encoder in torso.encoders.items()}
    assert kinds == {
        "pixels": ImageEncoder,
        "view": ImageEncoder,
        "state": VectorEncoder,
        "tokens": TextEncoder,
        "direction": OneHot,
        "buttons": OneHot,
    }
    assert not torso.encoders["pixels"].channels_last and torso.encoders["view"].channels_last
    sample = TensorDict(
        {
            "pixels": torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8),
            "view": torch.randint(0, 256, (5, 7, 7, 3), dtype=torch.uint8),
            "state": torch.rand(5, 5),
            "tokens": torch.randint(0, 10, (5, 6)),
            "direction": torch.randint(0, 4, (5,)),
            "buttons": torch.stack([torch.randint(0, 3, (5,)), torch.randint(0, 2, (5,))], -1),
        },
        batch_size=[5],
    )
    out = torso(sample)
    assert out.shape == (5, 24) and out.dtype == torch.float32
    out.sum().backward()
    assert all(p.grad is not None for p in torso.parameters())


def test_a_torso_composes_as_a_tensordict_module():
    space = mission_space()
    module = TensorDictModule(MultiInput(space, 16), in_keys=["observation"], out_keys=["features"])
    observation = TensorDict(
        {
            "image": torch.zeros(3, 7, 7, 3, dtype=torch.uint8),
            "direction": torch.zeros(3, dtype=torch.int64),
            "mission": torch.zeros(3, 8, dtype=torch.int64),
        },
        batch_size=[3],
    )
    out = module(TensorDict({"observation": observation}, batch_size=[3]))
    assert out["features"].shape == (3, 16)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"keys": ["image", "inventory"]}, "network.keys=['image', 'inventory']: the observation has the entries"),
        ({"image": {"filters": [8]}}, "network.image.filters: no such setting of the image encoders"),
        ({"image": {"kernel_sizes": [9, 9, 9]}}, "image is too small for these convolutions"),
        ({"activation": "swish"}, "network.activation='swish': valid"),
    ],
)
def test_bad_settings_name_the_network_key(kwargs, needle):
    with pytest.raises(ConfigError) as error:
        MultiInput(mission_space(), 16, **kwargs)
    assert needle in str(error.value)
