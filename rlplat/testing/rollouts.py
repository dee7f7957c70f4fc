"""The rollout contract of :mod:`rlplat.keys` as checks: keys, shapes, dtypes, chaining."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.envs.base import space_shape
from rlplat.testing._common import Subject, shape_text


def rollout_spec(
    obs_shape: tuple[int, ...], action_space: gymnasium.Space
) -> dict[Any, tuple[tuple[int, ...], torch.dtype]]:
    """Per-step shape (after the batch dims) and dtype of every key a collector yields."""
    if isinstance(action_space, gymnasium.spaces.Discrete):
        action: tuple[tuple[int, ...], torch.dtype] = ((), torch.int64)
    else:
        action = (space_shape(action_space), torch.float32)
    flag = ((1,), torch.bool)
    return {
        keys.OBSERVATION: (obs_shape, torch.float32),
        keys.ACTION: action,
        keys.ACTION_LOG_PROB: ((), torch.float32),
        keys.NEXT_OBSERVATION: (obs_shape, torch.float32),
        keys.NEXT_REWARD: ((1,), torch.float32),
        keys.NEXT_DONE: flag,
        keys.NEXT_TERMINATED: flag,
        keys.NEXT_TRUNCATED: flag,
    }


def check_rollout(
    entry: Subject, rollout: Any, batch_size: tuple[int, int], obs_shape: tuple[int, ...], action_space: gymnasium.Space
) -> None:
    """Fail unless ``rollout`` is a ``[T, B]`` TensorDict with the keys, shapes and dtypes of
    :mod:`rlplat.keys`, finite floats and ``done == terminated | truncated``.

    Args:
        entry: The entry that produced it, named in the message.
        rollout: What it yielded.
        batch_size: The expected ``(T, B)``.
        obs_shape: The observation shape.
        action_space: The env's action space (Box: float32 ``[A]``; Discrete: int64 ``[]``).
    """
    entry.expect(isinstance(rollout, TensorDict), f"yielded {type(rollout).__name__}, not a TensorDict")
    entry.expect(
        list(rollout.batch_size) == list(batch_size),
        f"yielded a rollout of batch size {shape_text(rollout.batch_size)}; expected [T, B] = {list(batch_size)}",
    )
    present = set(rollout.keys(include_nested=True, leaves_only=True))
    for key, (shape, dtype) in rollout_spec(obs_shape, action_space).items():
        entry.expect(
            key in present, f"the rollout lacks the key {key!r} (see rlplat.keys); it has {sorted(map(str, present))}"
        )
        value = rollout[key]
        expected = [*batch_size, *shape]
        entry.expect(
            list(value.shape) == expected and value.dtype == dtype,
            f"rollout key {key!r} is {shape_text(value.shape)} {value.dtype}; "
            f"expected {expected} {dtype} (see rlplat.keys)",
        )
        if dtype.is_floating_point:
            entry.expect(bool(torch.isfinite(value).all()), f"rollout key {key!r} holds NaN or inf")
    entry.expect(
        torch.equal(rollout[keys.NEXT_DONE], rollout[keys.NEXT_TERMINATED] | rollout[keys.NEXT_TRUNCATED]),
        "('next', 'done') is not terminated | truncated",
    )


def check_chained(entry: Subject, rollout: TensorDict) -> None:
    """Fail unless, within every episode, ``("next", "observation")[t]`` is ``observation[t + 1]``."""
    done = rollout[keys.NEXT_DONE][:-1].squeeze(-1)  # [T - 1, B]
    same = (rollout[keys.NEXT_OBSERVATION][:-1] == rollout[keys.OBSERVATION][1:]).flatten(2).all(-1)
    entry.expect(
        bool(same[~done].all()),
        "within an episode ('next', 'observation') at step t differs from 'observation' at step t + 1; "
        "the next observation must be the true s_{t+1}",
    )
