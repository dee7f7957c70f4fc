"""What a buffer entry implements (entry-point group ``rlplat.buffers``).

A buffer holds collected data and hands the trainer its minibatches. The trainer drives it
once per rollout::

    rollout = loss.preprocess(rollout)   # [T, B]
    buffer.extend(rollout)
    for batch in buffer.batches():       # [N] (or [N, L] windows)
        losses = loss(batch)  ...

The buffer decides how many batches a rollout earns: minibatch epochs over the latest
rollout (on-policy, :class:`rlplat.buffers.rollout.RolloutBuffer`) or sampled updates at a
replay ratio (off-policy, :class:`rlplat.buffers.replay.ReplayBuffer`).

* :class:`BufferFactory`: what the entry point names; which arguments rlplat supplies.
* :class:`Buffer`: what the built buffer provides to the trainer.
* :class:`PrioritizedBuffer`: a buffer that takes priorities back from the loss's TD errors.
* :class:`RunDirectoryUser`: a buffer that keeps files in the run directory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tensordict import TensorDict
from torch import Tensor


class BufferFactory(Protocol):
    """A buffer entry: the rollout's shape from rlplat, by keyword, plus the YAML keys.

    rlplat supplies ``rollout_shape``, the collector's ``(T, B)`` (every rollout has that
    batch size, so ``T * B`` frames; reserved: not settable from YAML); the ``buffer`` YAML
    node supplies every other keyword argument (``epochs``, ``minibatch_size``,
    ``capacity``, ...), checked against the signature.

    Raises:
        ConfigError: for a bad YAML value or one inconsistent with the rollout (e.g. a
            minibatch larger than a rollout), naming ``buffer.<key>`` and the fix.
    """

    def __call__(self, *, rollout_shape: tuple[int, int], **kwargs: Any) -> Buffer:
        """Build the buffer (storage may be allocated here, or at the first :meth:`Buffer.extend`)."""
        ...


@runtime_checkable
class Buffer(Protocol):
    """A built buffer, as the trainer drives it.

    Data is stored with every key the rollout carries (including those the loss's
    ``preprocess`` added: ``state_value``, ``advantage``, ``value_target``, ...), with their
    per-sample shapes and dtypes unchanged (see :mod:`rlplat.collectors.base`).

    Attributes:
        on_policy: True when it serves only the latest rollout (for on-policy losses);
            False when it replays older data. rlplat pairs it with the loss's ``on_policy``.
        sequence_length: Steps per sample: 1 for batches ``[N]``, L > 1 for windows
            ``[N, L]``; rlplat checks it equals the loss's ``sequence_length``.
    """

    on_policy: bool
    sequence_length: int

    def extend(self, rollout: TensorDict) -> None:
        """Add one rollout.

        Args:
            rollout: TensorDict with batch size ``[T, B]`` (time first, then envs); the
                buffer copies or keeps it, the collector does not reuse it.
        """
        ...

    def batches(self) -> Iterator[TensorDict]:
        """The minibatches this rollout earned, each used for one gradient update.

        Yields:
            TensorDicts of batch size ``[N]`` (single transitions), or ``[N, L]`` windows of
            ``L`` consecutive steps of one env, in time order, for losses that need
            sequences (e.g. n-step returns); the keys of the stored rollouts, with their
            per-sample shapes and dtypes. May yield nothing (e.g. before ``learning_starts``).
        """
        ...

    def state_dict(self, with_data: bool = False) -> Mapping[str, Any]:
        """What a resume needs, as plain data and tensors (``torch.load(weights_only=True)``
        must read it back): counters, and with ``with_data`` (``checkpoint.save_buffer``) the
        stored data itself, so that an off-policy run resumes exactly."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into a buffer built from the same config."""
        ...


@runtime_checkable
class PrioritizedBuffer(Protocol):
    """A buffer whose sampling follows priorities set from the loss's TD errors
    (:class:`rlplat.buffers.prioritized.PrioritizedReplayBuffer`).

    Its samples carry ``index`` (:data:`rlplat.keys.SAMPLE_INDEX`, storage positions) and
    ``weight`` (:data:`rlplat.keys.IMPORTANCE_WEIGHT`, importance-sampling weights); after each
    successful update the trainer hands back the loss output's ``td_error``
    (:data:`rlplat.keys.TD_ERROR`) with the batch's ``index``.
    """

    def update_priorities(self, index: Tensor, td_error: Tensor) -> None:
        """Set the priorities of sampled transitions from their TD errors.

        Args:
            index: ``[N]`` int64 storage positions of a sample's transitions, or ``[N, L]``
                of windows (the priority goes to each window's first step), as sampled.
            td_error: ``[N]`` float ``|Q(s, a) - y|`` of each sample (of its window's first
                step), on any device.
        """
        ...


@runtime_checkable
class RunDirectoryUser(Protocol):
    """A buffer that keeps files in the run directory (memory-mapped storage); the trainer
    tells it the directory before the first rollout."""

    def use_run_directory(self, run_dir: Path) -> None:
        """Keep files under ``run_dir`` (the run's output directory), unless configured elsewhere."""
        ...
