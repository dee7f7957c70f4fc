"""Conformance check of a buffer entry (:class:`rlplat.buffers.base.BufferFactory`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.buffers.base import Buffer, PrioritizedBuffer
from rlplat.testing._common import Entry, Subject, savable, shape_text, subject

PREPROCESSED = keys.STATE_VALUE
"""A key a loss's ``preprocess`` adds; a buffer must keep it like the collector's keys."""


def check_buffer(
    entry: Entry,
    kwargs: Mapping[str, Any] | None = None,
    *,
    rollout_shape: tuple[int, int] = (16, 4),
    rollouts: int = 4,
) -> None:
    """Check a buffer entry the way the trainer drives it.

    Builds the buffer through the registry with ``kwargs`` (the ``buffer`` YAML node's keys)
    and the rollout's shape rlplat supplies, then extends it with ``rollouts`` synthetic
    rollouts ``[T, B]`` (the keys of :mod:`rlplat.keys` plus ``state_value``, as after a
    loss's ``preprocess``; every value encodes the frame it belongs to) and drains
    ``batches()`` after each. Checks:

    * it implements :class:`rlplat.buffers.base.Buffer` (every missing member named);
    * at least one batch comes out; each is a TensorDict of batch size ``[N]``, or
      ``[N, L]`` when its ``sequence_length`` is L > 1, with every key of the rollout and
      each key's per-sample shape and dtype;
    * each sample is one stored transition, its keys not mixed between transitions;
      ``[N, L]`` windows are L consecutive steps of one env; an ``on_policy`` buffer serves
      only the latest rollout;
    * a :class:`rlplat.buffers.base.PrioritizedBuffer` adds ``index`` (int64) and ``weight``
      (float32 in (0, 1]) of the batch's size to each batch, and takes priorities back
      (``update_priorities`` with TD errors drawn at random);
    * ``state_dict()`` is a mapping ``torch.save`` can write.

    Args:
        entry: Registered buffer name, or the constructor itself.
        kwargs: The YAML keyword arguments (a ``name`` key is ignored); choose them so that
            batches come within ``rollouts`` rollouts (e.g. a small ``learning_starts``).
        rollout_shape: ``(T, B)`` of the synthetic rollouts, as a collector reports it.
        rollouts: Rollouts fed.

    Raises:
        AssertionError: naming the entry and what is wrong.
        ConfigError: when ``kwargs`` do not fit the constructor's signature, as in a run.
    """
    buffer_entry = subject("buffer", entry)
    supplied: dict[str, Any] = {"rollout_shape": tuple(rollout_shape)}
    with buffer_entry.running(f"the constructor ({', '.join(f'{k}={v}' for k, v in supplied.items())})"):
        buffer = buffer_entry.build(kwargs, **supplied)
    buffer_entry.conforms(buffer, Buffer)
    T, B = rollout_shape
    served = 0
    for index in range(rollouts):
        rollout = synthetic_rollout(T, B, offset=index * T * B)
        with buffer_entry.running(f"extend(rollout {shape_text(rollout.batch_size)})"):
            buffer.extend(rollout)
        with buffer_entry.running("batches()"):
            batches = list(buffer.batches())
        for batch in batches:
            _check_batch(buffer_entry, buffer, batch, rollout, oldest=index * T * B if buffer.on_policy else 0)
        served += len(batches)
    buffer_entry.expect(
        served > 0,
        f"batches() yielded nothing after {rollouts} rollouts of {T * B} frames; pass kwargs that let it serve "
        "batches sooner (e.g. a smaller learning_starts)",
    )
    savable(buffer_entry, buffer.state_dict(), "state_dict()")


def synthetic_rollout(T: int, B: int, offset: int) -> TensorDict:
    """A ``[T, B]`` rollout whose every value is a function of its frame index
    ``f = offset + t * B + b`` (exact in float32), so a sample can be traced back."""
    f = (offset + torch.arange(T * B, dtype=torch.float32)).view(T, B, 1)
    terminated = f.remainder(7) == 0
    truncated = (f.remainder(11) == 5) & ~terminated
    return TensorDict(
        {
            keys.OBSERVATION: f.expand(T, B, 3).clone(),
            keys.ACTION: f.expand(T, B, 2).clone(),
            keys.ACTION_LOG_PROB: -f.squeeze(-1),
            PREPROCESSED: f.clone(),
            keys.NEXT: {
                keys.OBSERVATION: (f + 0.5).expand(T, B, 3).clone(),
                keys.REWARD: f.clone(),
                keys.DONE: terminated | truncated,
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
            },
        },
        batch_size=[T, B],
    )


def _check_batch(buffer_entry: Subject, buffer: Buffer, batch: Any, rollout: TensorDict, oldest: int) -> None:
    length = buffer.sequence_length
    buffer_entry.expect(isinstance(batch, TensorDict), f"batches() yielded {type(batch).__name__}, not a TensorDict")
    dims = 1 if length == 1 else 2
    buffer_entry.expect(
        batch.batch_dims == dims and batch.batch_size[0] >= 1 and (dims == 1 or batch.batch_size[1] == length),
        f"batches() yielded batch size {shape_text(batch.batch_size)}; expected "
        f"{'[N]' if length == 1 else f'[N, {length}]'} (sequence_length={length})",
    )
    expected = set(rollout.keys(include_nested=True, leaves_only=True))
    if isinstance(buffer, PrioritizedBuffer):
        _check_priority_keys(buffer_entry, batch)
        expected |= {keys.SAMPLE_INDEX, keys.IMPORTANCE_WEIGHT}
        with buffer_entry.running("update_priorities(index, td_error)"):  # TD errors at random
            buffer.update_priorities(batch[keys.SAMPLE_INDEX], torch.rand(batch.batch_size[0]))
    got = set(batch.keys(include_nested=True, leaves_only=True))
    buffer_entry.expect(
        got == expected, f"a batch has the keys {sorted(map(str, got))}; expected {sorted(map(str, expected))}"
    )
    for key in expected - {keys.SAMPLE_INDEX, keys.IMPORTANCE_WEIGHT}:
        want, have = rollout[key], batch[key]
        buffer_entry.expect(
            have.shape[dims:] == want.shape[2:] and have.dtype == want.dtype,
            f"batch key {key!r} is {shape_text(have.shape)} {have.dtype}; expected "
            f"[{'N' if dims == 1 else 'N, L'}, *{shape_text(want.shape[2:])}] {want.dtype}",
        )
    _check_traceable(buffer_entry, batch, rollout, oldest)


def _check_priority_keys(buffer_entry: Subject, batch: TensorDict) -> None:
    """A prioritized buffer's batch carries int64 ``index`` and float32 ``weight`` in (0, 1]."""
    for key, dtype in ((keys.SAMPLE_INDEX, torch.int64), (keys.IMPORTANCE_WEIGHT, torch.float32)):
        value = batch.get(key, None)
        buffer_entry.expect(
            isinstance(value, torch.Tensor) and value.shape == batch.batch_size and value.dtype == dtype,
            f"a prioritized buffer's batch must carry {key!r} {shape_text(batch.batch_size)} {dtype}; it has "
            f"{shape_text(getattr(value, 'shape', []))} {getattr(value, 'dtype', None)}",
        )
    weight = batch[keys.IMPORTANCE_WEIGHT]
    buffer_entry.expect(bool(((weight > 0) & (weight <= 1)).all()), "importance weights outside (0, 1]")


def _check_traceable(buffer_entry: Subject, batch: TensorDict, rollout: TensorDict, oldest: int) -> None:
    """Every sample is one whole stored transition; windows are consecutive steps of one env."""
    f = batch[keys.OBSERVATION][..., :1]  # [N(, L), 1]
    B = rollout.batch_size[1]
    newest = float(rollout[keys.OBSERVATION].max())
    buffer_entry.expect(
        bool(((f >= oldest) & (f <= newest) & (f == f.round())).all()),
        f"a batch holds observations that were never stored{' in the latest rollout' if oldest else ''}",
    )
    whole = (
        (batch[keys.OBSERVATION] == f).all()
        and (batch[keys.ACTION] == f).all()
        and (batch[keys.ACTION_LOG_PROB] == -f.squeeze(-1)).all()
        and (batch[PREPROCESSED] == f).all()
        and (batch[keys.NEXT_OBSERVATION] == f + 0.5).all()
        and (batch[keys.NEXT_REWARD] == f).all()
        and (batch[keys.NEXT_TERMINATED] == (f.remainder(7) == 0)).all()
    )
    buffer_entry.expect(
        bool(whole), "a sample mixes keys of different transitions (e.g. one's observation with another's reward)"
    )
    if batch.batch_dims == 2:
        steps = f[:, 1:] - f[:, :-1]
        buffer_entry.expect(
            bool((steps == B).all()), "an [N, L] window is not L consecutive steps of one env, in time order"
        )
