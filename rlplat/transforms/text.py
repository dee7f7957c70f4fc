"""Text observations as integer token ids: the mission strings of MiniGrid and kin."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from rlplat.registry import ConfigError
from rlplat.transforms.base import EnvTransform

PADDING = 0
"""Token id of the padding after the last word."""
UNKNOWN = 1
"""Token id of a word not in the vocabulary."""
MAX_MISSIONS = 100_000
"""Most missions enumerated to find a MissionSpace's words when no vocabulary is given."""

_WORD = re.compile(r"[a-z]+")


def words(text: str) -> list[str]:
    """The words of ``text``: lower-cased, split on every character that is not a letter a-z."""
    return _WORD.findall(text.lower())


def _is_text(space: gymnasium.Space) -> bool:
    """gymnasium's ``Text`` or a space of strings (MiniGrid's ``MissionSpace``)."""
    return isinstance(space, spaces.Text) or (space.dtype is not None and space.dtype.kind in "US")


def mission_words(space: gymnasium.Space) -> list[str] | None:
    """Every word of every mission a MiniGrid ``MissionSpace`` can produce, sorted: its
    ``mission_func`` called on each combination of its ``ordered_placeholders``; None for
    another space, or more than :data:`MAX_MISSIONS` combinations."""
    mission_func = getattr(space, "mission_func", None)
    if not callable(mission_func):
        return None
    placeholders = getattr(space, "ordered_placeholders", None) or []
    if int(np.prod([len(options) for options in placeholders])) > MAX_MISSIONS:
        return None
    found: set[str] = set()
    for combination in itertools.product(*placeholders):
        found.update(words(mission_func(*combination)))
    return sorted(found)


class Tokenize(EnvTransform):
    """A text entry of a Dict observation as integer token ids: lower-cased, split on
    non-letters, each word mapped to its id (``vocabulary[i]`` -> ``i + 2``; an unknown word
    -> 1), then padded with 0 or cut to ``max_length``. The entry becomes a Box ``[max_length]``
    int64 in ``[0, len(vocabulary) + 1]``; the other entries are unchanged. A network embeds the
    ids (``multi_input``'s GRU encoder), as the MiniGrid agents of Chevalier-Boisvert et al.
    2019 ("BabyAI") and torch-rl's starter files encode the mission.

    YAML keys: ``key``, ``vocabulary``, ``max_length``.

    Args:
        observation_space: A Dict with a text entry at ``key`` (gymnasium's ``Text`` or
            MiniGrid's ``MissionSpace``).
        key: The Dict key of the text.
        vocabulary: The known words, each of letters a-z only (case is ignored), no repeats.
            None: for a MiniGrid ``MissionSpace``, every word of the missions it can produce,
            sorted; required for other text spaces.
        max_length: Number of token ids, in words.

    Raises:
        ConfigError: naming ``transforms.tokenize.<key>`` for an observation without a text
            entry at ``key`` (naming the space), a bad or missing vocabulary, or ``max_length`` < 1.
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        key: str = "mission",
        vocabulary: Sequence[str] | None = None,
        max_length: int = 16,
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, spaces.Dict) or key not in observation_space.spaces:
            raise ConfigError(
                f"transforms.tokenize.key={key!r}: needs a Dict observation with a text entry at this key, "
                f"got {observation_space}"
            )
        text = observation_space.spaces[key]
        if not _is_text(text):
            raise ConfigError(f"transforms.tokenize.key={key!r}: the entry {text} is not text")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ConfigError(f"transforms.tokenize.max_length={max_length!r}: must be an integer >= 1")
        if vocabulary is None:
            vocabulary = mission_words(text)
            if vocabulary is None:
                raise ConfigError(
                    f"transforms.tokenize.vocabulary is required for the text entry {text} (a list of words)"
                )
        self.key = key
        self.max_length = max_length
        self.vocabulary = self._checked(vocabulary)
        self.ids = {word: i + 2 for i, word in enumerate(self.vocabulary)}

    @staticmethod
    def _checked(vocabulary: Any) -> list[str]:
        if isinstance(vocabulary, str) or not isinstance(vocabulary, Sequence) or not vocabulary:
            raise ConfigError(f"transforms.tokenize.vocabulary={vocabulary!r}: must be a non-empty list of words")
        lowered = [word.lower() if isinstance(word, str) else word for word in vocabulary]
        bad = [word for word in lowered if not isinstance(word, str) or not _WORD.fullmatch(word)]
        if bad:
            raise ConfigError(f"transforms.tokenize.vocabulary: {bad!r} are not words of letters a-z")
        repeated = sorted({word for word in lowered if lowered.count(word) > 1})
        if repeated:
            raise ConfigError(f"transforms.tokenize.vocabulary: {repeated!r} appear more than once")
        return lowered

    @property
    def space(self) -> spaces.Box:
        """The token ids' space: Box ``[max_length]`` int64 in ``[0, len(vocabulary) + 1]``."""
        return spaces.Box(0, len(self.vocabulary) + 1, (self.max_length,), np.int64)

    def tokens(self, text: str) -> np.ndarray:
        """``text`` -> ``[max_length]`` int64 token ids (0 padding, 1 unknown word)."""
        ids = np.zeros(self.max_length, dtype=np.int64)
        found = [self.ids.get(word, UNKNOWN) for word in words(text)][: self.max_length]
        ids[: len(found)] = found
        return ids

    def wrap(self, env: gymnasium.Env) -> gymnasium.Env:
        space = env.observation_space
        assert isinstance(space, spaces.Dict)  # checked at construction on this space
        key = self.key
        new_space = spaces.Dict({**space.spaces, key: self.space})
        return gymnasium.wrappers.TransformObservation(env, lambda obs: {**obs, key: self.tokens(obs[key])}, new_space)
