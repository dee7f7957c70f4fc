"""On-policy rollout buffer: the last rollout, served as shuffled minibatch epochs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict

from rlplat.registry import ConfigError


class RolloutBuffer:
    """Holds one rollout ``[T, B]`` flattened to ``[T * B]`` and yields minibatch epochs.

    Each call to :meth:`batches` makes ``epochs`` passes over the rollout in a fresh random
    order, in minibatches of ``minibatch_size`` samples (the last, smaller one is dropped
    when ``T * B`` is not a multiple), as PPO's epochs of minibatch SGD; with
    ``minibatch_size`` None, the whole rollout in one update per epoch (A2C, REINFORCE),
    whatever the collector's ``T`` and ``B``.

    Args:
        rollout_shape: ``(T, B)`` of the collector's rollouts (supplied by rlplat).
        epochs: Passes over each rollout.
        minibatch_size: Samples per gradient update; None for the whole rollout.

    Attributes:
        on_policy: True: serves only the latest rollout.
        sequence_length: 1: samples are single transitions.

    Raises:
        ConfigError: if ``epochs`` < 1 or ``minibatch_size`` is not None or an integer in
            ``[1, T * B]``.
    """

    on_policy = True
    sequence_length = 1

    def __init__(self, rollout_shape: tuple[int, int], *, epochs: int = 10, minibatch_size: int | None = 64) -> None:
        frames_per_batch = rollout_shape[0] * rollout_shape[1]
        if epochs < 1:
            raise ConfigError(f"buffer.epochs={epochs}: must be at least 1")
        if minibatch_size is None:
            minibatch_size = frames_per_batch
        if (
            isinstance(minibatch_size, bool)
            or not isinstance(minibatch_size, int)
            or not 1 <= minibatch_size <= frames_per_batch
        ):
            raise ConfigError(
                f"buffer.minibatch_size={minibatch_size!r}: must be in [1, {frames_per_batch}], "
                f"the frames per rollout (collector.num_envs * collector.steps_per_env)"
            )
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self._data: TensorDict | None = None

    def extend(self, rollout: TensorDict) -> None:
        """Replace the contents with ``rollout`` (batch ``[T, B]``), flattened to ``[T * B]``."""
        self._data = rollout.reshape(-1)

    def batches(self) -> Iterator[TensorDict]:
        """Yield ``epochs * (T * B // minibatch_size)`` minibatches ``[minibatch_size]``."""
        if self._data is None:
            raise RuntimeError("RolloutBuffer.batches() called before extend()")
        n = self._data.batch_size[0]
        usable = n - n % self.minibatch_size
        for _ in range(self.epochs):
            order = torch.randperm(n, device=self._data.device)[:usable]
            yield from self._data[order].split(self.minibatch_size)  # one gather per epoch

    def state_dict(self, with_data: bool = False) -> dict[str, Any]:
        """Nothing to resume: the rollout held is used up before the next one is collected."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""
