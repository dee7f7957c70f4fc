"""On-policy rollout buffer: the last rollout, served as shuffled minibatch epochs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.functional.sequences import episode_sequences
from rlplat.registry import ConfigError, check_at_least, check_minibatch_size


class RolloutBuffer:
    """Holds one rollout ``[T, B]`` flattened to ``[T * B]`` and yields minibatch epochs.

    Each call to :meth:`batches` makes ``epochs`` passes over the rollout in a fresh random
    order, in minibatches of ``minibatch_size`` samples (the last, smaller one is dropped
    when ``T * B`` is not a multiple), as PPO's epochs of minibatch SGD; with
    ``minibatch_size`` None, the whole rollout in one update per epoch (A2C, REINFORCE),
    whatever the collector's ``T`` and ``B``.

    With ``sequence_length`` L > 1 (a recurrent policy's truncated BPTT), the rollout is cut
    into sequences of at most L steps of one env and one episode
    (:func:`rlplat.functional.sequences.episode_sequences`: a sequence never crosses an
    episode's end), each padded to L and preceded by up to ``burn_in`` earlier steps of its
    episode; batches are ``[n, burn_in + L]`` with ``mask`` (the steps a loss averages over)
    and ``burn_in`` (the steps that only refresh the recurrent state). Each epoch shuffles the
    sequences and splits them into ``T * B // minibatch_size`` minibatches (one with
    ``minibatch_size`` None) of about ``minibatch_size`` steps each: as many updates as
    without sequences. The rollout must hold ``("next", "done")``.

    Args:
        rollout_shape: ``(T, B)`` of the collector's rollouts (supplied by rlplat).
        epochs: Passes over each rollout.
        minibatch_size: Samples (steps) per gradient update; None for the whole rollout.
        sequence_length: Steps per sequence L; 1 for single transitions.
        burn_in: Steps before each sequence that refresh a recurrent state without
            gradients (Kapturowski et al. 2019); 0 for none.

    Attributes:
        on_policy: True: serves only the latest rollout.
        sequence_length: As given.

    Raises:
        ConfigError: if ``epochs`` < 1, ``minibatch_size`` is not None or an integer in
            ``[1, T * B]``, ``sequence_length`` is not in ``[1, T]``, or ``burn_in`` is not
            in ``[0, T)`` (or not 0 without sequences).
    """

    on_policy = True

    def __init__(
        self,
        rollout_shape: tuple[int, int],
        *,
        epochs: int = 10,
        minibatch_size: int | None = 64,
        sequence_length: int = 1,
        burn_in: int = 0,
    ) -> None:
        steps = rollout_shape[0]
        frames_per_batch = steps * rollout_shape[1]
        check_at_least("buffer.epochs", epochs)
        if (
            isinstance(sequence_length, bool)
            or not isinstance(sequence_length, int)
            or not 1 <= sequence_length <= steps
        ):
            raise ConfigError(
                f"buffer.sequence_length={sequence_length!r}: must be an integer in [1, {steps}], "
                "the steps of a rollout (collector.steps_per_env)"
            )
        if isinstance(burn_in, bool) or not isinstance(burn_in, int) or not 0 <= burn_in < steps:
            raise ConfigError(f"buffer.burn_in={burn_in!r}: must be an integer in [0, {steps - 1}]")
        if burn_in and sequence_length == 1:
            raise ConfigError(
                f"buffer.burn_in={burn_in}: burn-in refreshes a recurrent state before sequences; "
                "set buffer.sequence_length > 1 too, or buffer.burn_in=0"
            )
        check_minibatch_size(minibatch_size, frames_per_batch)
        if minibatch_size is None:
            minibatch_size = frames_per_batch
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self.sequence_length = sequence_length
        self.burn_in = burn_in
        self._updates = frames_per_batch // minibatch_size  # minibatches per epoch
        self._data: TensorDict | None = None

    def extend(self, rollout: TensorDict) -> None:
        """Replace the contents with ``rollout`` (batch ``[T, B]``), flattened to ``[T * B]``,
        or cut into sequences ``[S, burn_in + L]`` when ``sequence_length`` > 1.

        Raises:
            KeyError: for sequences of a rollout without ``("next", "done")``.
        """
        data = rollout.reshape(-1)
        if self.sequence_length == 1:
            self._data = data
            return
        sequences = episode_sequences(rollout[keys.NEXT_DONE], self.sequence_length, self.burn_in)
        self._data = data[sequences.steps]  # [S, P], one gather
        self._data[keys.MASK] = sequences.mask
        self._data[keys.BURN_IN] = sequences.burn_in

    def batches(self) -> Iterator[TensorDict]:
        """Yield ``epochs * (T * B // minibatch_size)`` minibatches ``[minibatch_size]``, or
        as many of sequences ``[n, burn_in + L]`` (n varies by at most 1 within an epoch)."""
        if self._data is None:
            raise RuntimeError("RolloutBuffer.batches() called before extend()")
        n = self._data.batch_size[0]
        if self.sequence_length > 1:
            for _ in range(self.epochs):
                order = torch.randperm(n, device=self._data.device)
                yield from self._data[order].tensor_split(min(self._updates, n))
            return
        usable = n - n % self.minibatch_size
        for _ in range(self.epochs):
            order = torch.randperm(n, device=self._data.device)[:usable]
            yield from self._data[order].split(self.minibatch_size)  # one gather per epoch

    def state_dict(self, with_data: bool = False) -> dict[str, Any]:
        """Nothing to resume: the rollout held is used up before the next one is collected."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""
