"""The CNN torso: Mnih et al.'s shapes, pixel scaling, errors naming the network keys."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from rlplat.networks.cnn import NatureCNN
from rlplat.registry import ConfigError

FRAMES = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def test_nature_cnn_on_84x84_frames_has_the_papers_layers():
    torso = NatureCNN(FRAMES, 512)
    convolutions = [m for m in torso.layers if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convolutions] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    linear = torso.layers[-2]
    assert (linear.in_features, linear.out_features) == (64 * 7 * 7, 512)
    out = torso(torch.randint(0, 256, (3, 4, 84, 84)).float())
    assert out.shape == (3, 512) and out.dtype == torch.float32 and bool((out >= 0).all())


def test_images_are_divided_by_255_unless_told_not_to():
    torch.manual_seed(0)
    scaled = NatureCNN(FRAMES, 16)
    raw = NatureCNN(FRAMES, 16, normalize_images=False)
    raw.load_state_dict(scaled.state_dict())
    pixels = torch.randint(0, 256, (2, 4, 84, 84)).float()
    torch.testing.assert_close(scaled(pixels), raw(pixels / 255.0))


@pytest.mark.parametrize(
    ("space", "kwargs", "needle"),
    [
        (gymnasium.spaces.Box(-1, 1, (4,)), {}, "network=cnn needs image observations"),
        (FRAMES, {"channels": [32, 64]}, "one entry per convolution"),
        (gymnasium.spaces.Box(0, 255, (1, 20, 20), np.uint8), {}, "20x20 image is too small"),
    ],
)
def test_bad_inputs_name_the_network_keys(space, kwargs, needle):
    with pytest.raises(ConfigError) as error:
        NatureCNN(space, 8, **kwargs)
    assert needle in str(error.value)
