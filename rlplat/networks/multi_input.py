"""Multi-input torso: one encoder per entry of a Dict observation, features concatenated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.nn import functional as F

from rlplat.networks.cnn import conv_layers, orthogonal_, pixels_as_float
from rlplat.networks.mlp import ACTIVATIONS, check_widths
from rlplat.registry import ConfigError

IMAGE_DEFAULTS: dict[str, Any] = {
    "channels": [16, 32, 64],
    "kernel_sizes": [2, 2, 2],
    "strides": [1, 1, 1],
    "normalize_images": True,
}
VECTOR_DEFAULTS: dict[str, Any] = {"hidden_sizes": [64]}
TEXT_DEFAULTS: dict[str, Any] = {"embedding_dim": 32, "hidden_size": 128}
KINDS = ("image", "vector", "text", "discrete")


def entry_kind(space: gymnasium.Space) -> str | None:
    """How :class:`MultiInput` encodes an entry of ``space``, or None for one it cannot take.

    * ``image``: a 3-dimensional Box (``[C, H, W]``, or ``[H, W, C]`` with at most 4
      channels last, as MiniGrid's and gymnasium's rendered frames come): convolutions;
    * ``text``: a 1-dimensional Box of integers (token ids, as ``transforms.tokenize`` gives
      them, 0 for padding): an embedding, then a GRU;
    * ``discrete``: ``Discrete`` or ``MultiDiscrete``: one-hot codes;
    * ``vector``: any other Box or a ``MultiBinary``: flattened, then an MLP.
    """
    if isinstance(space, gymnasium.spaces.Discrete | gymnasium.spaces.MultiDiscrete):
        return "discrete"
    if isinstance(space, gymnasium.spaces.MultiBinary):
        return "vector"
    if not isinstance(space, gymnasium.spaces.Box):
        return None
    if len(space.shape) == 3:
        return "image"
    if len(space.shape) == 1 and np.issubdtype(space.dtype, np.integer) and space.dtype != np.uint8:
        return "text"
    return "vector"


def _channels_last(shape: Sequence[int]) -> bool:
    """Whether an image of ``shape`` is ``[H, W, C]``: at most 4 channels last, more first."""
    return shape[-1] <= 4 < shape[0]


class ImageEncoder(nn.Module):
    """Convolutions with ReLU over one image entry, flattened.

    Args:
        space: A 3-dimensional Box, ``[C, H, W]`` or ``[H, W, C]`` (see :func:`entry_kind`).
        key: The config key of its settings, for messages (``network.image``).
        channels: Filters of each convolution.
        kernel_sizes: Kernel size of each convolution, in pixels.
        strides: Stride of each convolution, in pixels.
        normalize_images: Divide by 255 first (uint8 pixels -> [0, 1]).

    Attributes:
        out_features: Width of the flattened output.
    """

    def __init__(
        self,
        space: gymnasium.spaces.Box,
        key: str,
        channels: Sequence[int],
        kernel_sizes: Sequence[int],
        strides: Sequence[int],
        normalize_images: bool,
    ) -> None:
        super().__init__()
        shape = tuple(int(n) for n in space.shape)
        self.channels_last = _channels_last(shape)
        chw = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        layers, self.out_features = conv_layers(chw, channels, kernel_sizes, strides, key)
        self.layers = nn.Sequential(*layers)
        self.scale = 1.0 / 255.0 if normalize_images else 1.0

    def forward(self, image: Tensor) -> Tensor:
        """``[N, C, H, W]`` or ``[N, H, W, C]`` uint8 or float -> ``[N, out_features]`` float32."""
        x = pixels_as_float(image, self.scale)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.layers(x)


class TextEncoder(nn.Module):
    """Token ids -> an embedding per token -> a GRU; the GRU's state after the last token
    that is not padding (id 0) is the output. As the mission encoder of the BabyAI and
    torch-rl agents (Chevalier-Boisvert et al. 2019).

    Args:
        vocabulary: Number of token ids, the Box's ``high + 1`` (id 0 pads).
        embedding_dim: Width of each token's embedding.
        hidden_size: Width of the GRU's state, the output.
    """

    def __init__(self, vocabulary: int, embedding_dim: int, hidden_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, embedding_dim, padding_idx=0)
        self.gru = nn.GRU(embedding_dim, hidden_size, batch_first=True)
        self.out_features = hidden_size

    def forward(self, tokens: Tensor) -> Tensor:
        """``[N, L]`` int64 token ids (0 pads at the end) -> ``[N, hidden_size]`` float32."""
        outputs, _ = self.gru(self.embedding(tokens.long()))  # [N, L, H]
        last = (tokens != 0).sum(-1).clamp(min=1) - 1  # index of the last real token
        return outputs.gather(1, last.view(-1, 1, 1).expand(-1, 1, outputs.shape[-1])).squeeze(1)


class OneHot(nn.Module):
    """``Discrete(n)`` -> one-hot ``[N, n]``; ``MultiDiscrete(nvec)`` -> one-hots concatenated."""

    def __init__(self, space: gymnasium.spaces.Discrete | gymnasium.spaces.MultiDiscrete) -> None:
        super().__init__()
        if isinstance(space, gymnasium.spaces.Discrete):
            self.sizes, self.starts = [int(space.n)], [int(space.start)]
        else:
            self.sizes, self.starts = [int(n) for n in space.nvec.reshape(-1)], [0] * int(space.nvec.size)
        self.out_features = sum(self.sizes)

    def forward(self, value: Tensor) -> Tensor:
        """``[N]`` or ``[N, k]`` int64 -> ``[N, out_features]`` float32."""
        columns = value.reshape(value.shape[0], -1).long()
        codes = [F.one_hot(columns[:, i] - start, n) for i, (n, start) in enumerate(zip(self.sizes, self.starts))]
        return torch.cat(codes, -1).float()


class VectorEncoder(nn.Module):
    """Flatten, then Linear + activation layers (none: the flat vector itself)."""

    def __init__(self, space: gymnasium.Space, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        width = int(np.prod(space.shape or ()))
        layers: list[nn.Module] = [nn.Flatten()]
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), ACTIVATIONS[activation]()]
            width = int(size)
        self.layers = nn.Sequential(*layers)
        self.out_features = width

    def forward(self, value: Tensor) -> Tensor:
        """``[N, *shape]`` -> ``[N, out_features]`` float32."""
        return self.layers(value if value.is_floating_point() else value.float())


class MultiInput(nn.Module):
    """A torso for ``Dict`` observations: one encoder per entry, chosen from the entry's space
    (:func:`entry_kind`: convolutions for images, an embedding and a GRU for token sequences,
    one-hot codes for discrete values, an MLP for vectors), their outputs concatenated, then
    Linear + activation layers up to ``out_features``. Stable-Baselines3's
    ``MultiInputPolicy`` (its ``CombinedExtractor``) in shape, with the text encoder of the
    BabyAI agents. A plain Box observation is one entry (``observation``).

    Args:
        observation_space: A ``Dict`` of Box, Discrete, MultiDiscrete and MultiBinary entries
            (text tokenised first: ``transforms.tokenize``), or one such space.
        out_features: Width of the output features ``[N, out_features]``.
        keys: Entries to encode; None: all of them, in the space's order.
        image: Settings of the image encoders: ``channels``, ``kernel_sizes``, ``strides``
            (one per convolution), ``normalize_images`` (divide by 255).
        vector: Settings of the vector encoders: ``hidden_sizes``.
        text: Settings of the text encoders: ``embedding_dim``, ``hidden_size`` (the GRU's).
        hidden_sizes: Widths of Linear layers after the concatenation, before the output layer.
        activation: Activation of every Linear layer: ``tanh``, ``relu``, ``elu``, ``gelu``, ``silu``.
        orthogonal_init: Orthogonal weights (gain sqrt 2) and zero biases for convolutions and
            Linear layers.

    Attributes:
        encoders: The encoder of each key.

    Raises:
        ConfigError: for a key the space lacks, an entry no encoder takes, an unknown setting
            or a bad size, naming ``network.<key>``.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        out_features: int,
        keys: Sequence[str] | None = None,
        image: Mapping[str, Any] | None = None,
        vector: Mapping[str, Any] | None = None,
        text: Mapping[str, Any] | None = None,
        hidden_sizes: Sequence[int] = (),
        activation: str = "relu",
        orthogonal_init: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"network.activation={activation!r}: valid: {', '.join(ACTIVATIONS)}")
        check_widths(out_features, hidden_sizes)
        self.dict_input = isinstance(observation_space, gymnasium.spaces.Dict)
        spaces: dict[str, Any] = (
            dict(cast(gymnasium.spaces.Dict, observation_space).spaces)
            if self.dict_input
            else {"observation": observation_space}
        )
        if keys is None:
            keys = list(spaces)
        missing = [key for key in keys if key not in spaces]
        if missing or not keys:
            raise ConfigError(
                f"network.keys={list(keys)}: the observation has the entries {', '.join(spaces)}"
                + (f"; no entry {missing[0]!r}" if missing else "")
            )
        image_settings = _settings("image", image, IMAGE_DEFAULTS)
        vector_settings = _settings("vector", vector, VECTOR_DEFAULTS)
        text_settings = _settings("text", text, TEXT_DEFAULTS)
        settings = {"image": image_settings, "vector": vector_settings, "text": text_settings}
        encoders = {key: make_encoder(key, spaces[key], settings, activation) for key in keys}
        self.keys = list(keys)
        self.encoders = nn.ModuleDict(encoders)
        width = sum(cast(int, encoder.out_features) for encoder in encoders.values())
        layers: list[nn.Module] = []
        for size in [*hidden_sizes, out_features]:
            layers += [nn.Linear(width, int(size)), ACTIVATIONS[activation]()]
            width = int(size)
        self.head = nn.Sequential(*layers)
        if orthogonal_init:
            orthogonal_([m for m in self.modules() if not isinstance(m, TextEncoder)])

    def forward(self, observation: TensorDict | Tensor) -> Tensor:
        """Observations ``[N]`` (a TensorDict of the entries, or the tensor of a plain Box)
        -> ``[N, out_features]`` float32."""
        if not self.dict_input:
            return self.head(self.encoders["observation"](observation))
        entries = cast(TensorDict, observation)
        features = [self.encoders[key](entries.get(key)) for key in self.keys]
        return self.head(torch.cat(features, -1) if len(features) > 1 else features[0])


def make_encoder(key: str, space: gymnasium.Space, settings: Mapping[str, Any], activation: str) -> nn.Module:
    """The encoder of observation entry ``key`` of ``space`` (:func:`entry_kind`), with the
    ``image``, ``vector`` and ``text`` settings of :class:`MultiInput`.

    Raises:
        ConfigError: for an entry no encoder takes, or bad image settings.
    """
    kind = entry_kind(space)
    if kind == "image":
        return ImageEncoder(cast(gymnasium.spaces.Box, space), "network.image", **settings["image"])
    if kind == "text":
        vocabulary = int(np.max(cast(gymnasium.spaces.Box, space).high)) + 1
        return TextEncoder(vocabulary, **settings["text"])
    if kind == "discrete":
        return OneHot(cast(gymnasium.spaces.Discrete, space))
    if kind == "vector":
        return VectorEncoder(space, settings["vector"]["hidden_sizes"], activation)
    raise ConfigError(
        f"network=multi_input: no encoder takes the observation entry {key!r}, {space}; it takes "
        "Box (images, token ids, vectors), Discrete, MultiDiscrete and MultiBinary entries"
    )


def _settings(name: str, given: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated with ``given``; an unknown setting is a ConfigError naming it."""
    unknown = sorted(set(given or {}) - set(defaults))
    if unknown:
        raise ConfigError(
            f"network.{name}.{unknown[0]}: no such setting of the {name} encoders; valid: {', '.join(defaults)}"
        )
    return {**defaults, **dict(given or {})}
