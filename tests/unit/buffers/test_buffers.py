"""Rollout and replay buffers: sizes, ordering, sampling windows, update credit."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlplat.buffers import ReplayBuffer, RolloutBuffer
from rlplat.registry import ConfigError


def rollout(start: int, T: int, B: int) -> TensorDict:
    """x[t, b] = 100 * b + (start + t): the env's own step counter."""
    t = torch.arange(start, start + T, dtype=torch.float32).view(T, 1)
    return TensorDict({"x": t + 100.0 * torch.arange(B).view(1, B)}, batch_size=[T, B])


def test_rollout_buffer_covers_every_sample_once_per_epoch():
    buffer = RolloutBuffer((4, 3), epochs=2, minibatch_size=4)
    buffer.extend(rollout(0, 4, 3))
    batches = list(buffer.batches())
    assert len(batches) == 6 and all(b.batch_size == torch.Size([4]) for b in batches)
    first_epoch = torch.cat([b["x"] for b in batches[:3]]).sort().values
    torch.testing.assert_close(first_epoch, rollout(0, 4, 3)["x"].flatten().sort().values)


def test_a_null_minibatch_size_is_the_whole_rollout_in_one_update():
    buffer = RolloutBuffer((4, 3), epochs=1, minibatch_size=None)
    buffer.extend(rollout(0, 4, 3))
    [batch] = list(buffer.batches())
    assert batch.batch_size == torch.Size([12])


@pytest.mark.parametrize("num_envs", [2, 16])
def test_a2c_and_reinforce_update_once_per_rollout_whatever_its_size(num_envs, tmp_path):
    """Their presets give the whole rollout (buffer.minibatch_size=null), not a number of frames
    that is one rollout of the preset's collector only."""
    from conftest import make_trainer

    for algo, steps in (("a2c", 5), ("reinforce", 500)):
        overrides = [f"algo={algo}", "env=cartpole", "tracking.enabled=false", f"collector.num_envs={num_envs}"]
        trainer = make_trainer(overrides, tmp_path)
        try:
            assert trainer.parts.buffer.minibatch_size == num_envs * steps
        finally:
            trainer.parts.close()


def test_rollout_buffer_rejects_minibatch_larger_than_rollout():
    with pytest.raises(ConfigError, match=r"buffer.minibatch_size=99: must be in \[1, 12\]"):
        RolloutBuffer((4, 3), minibatch_size=99)


def test_replay_starts_after_learning_starts_and_pays_replay_ratio():
    buffer = ReplayBuffer((2, 2), capacity=100, batch_size=3, learning_starts=8, replay_ratio=0.75)
    counts = []
    for i in range(4):
        buffer.extend(rollout(2 * i, 2, 2))  # 4 frames each
        counts.append(len(list(buffer.batches())))
    assert counts == [0, 3, 3, 3]  # nothing before 8 frames; then 0.75 updates per new frame
    assert len(buffer) == 16


@pytest.mark.parametrize("with_data", [True, False])
def test_a_replay_buffer_resumed_without_its_transitions_refills_to_learning_starts(with_data):
    """With its transitions a loaded buffer goes on as before; without them it waits for
    ``learning_starts`` new frames, as at a run's start (an n-step sample needs its window)."""
    buffer = ReplayBuffer((2, 2), capacity=100, batch_size=3, learning_starts=8, replay_ratio=0.75, sequence_length=2)
    for i in range(3):
        buffer.extend(rollout(2 * i, 2, 2))
        list(buffer.batches())
    buffer.extend(rollout(6, 2, 2))  # its 3 updates not yet taken
    loaded = ReplayBuffer((2, 2), capacity=100, batch_size=3, learning_starts=8, replay_ratio=0.75, sequence_length=2)
    loaded.load_state_dict(buffer.state_dict(with_data=with_data))
    assert loaded.frames == 16
    counts = [len(list(loaded.batches()))]
    for i in range(4, 7):
        loaded.extend(rollout(2 * i, 2, 2))
        counts.append(len(list(loaded.batches())))
    assert counts == ([3, 3, 3, 3] if with_data else [0, 0, 3, 3])


def test_replay_windows_are_consecutive_steps_of_one_env_across_wraparound():
    buffer = ReplayBuffer((2, 2), capacity=12, batch_size=12, learning_starts=0, sequence_length=3)
    for i in range(7):  # 6 rows per env; wraps around after three rollouts
        buffer.extend(rollout(2 * i, 2, 2))
    window = buffer.sample()["x"]  # [N, 3]
    assert window.shape == (12, 3)
    steps = window % 100
    torch.testing.assert_close(steps[:, 1:] - steps[:, :-1], torch.ones(12, 2))  # consecutive
    assert (window // 100 == (window[:, :1] // 100)).all()  # one env per window
    assert steps.min() >= 8 and steps.max() <= 13  # only the 6 newest steps per env remain


@pytest.mark.parametrize("rollouts,held", [(2, range(0, 4)), (7, range(8, 14))], ids=["filling", "wrapped"])
def test_replay_samples_every_held_transition_and_nothing_else(rollouts, held):
    """Single steps drawn uniformly over the (row, env) pairs held: before the storage is full
    (no unwritten row) and after it wrapped around (only the newest rows)."""
    buffer = ReplayBuffer((2, 2), capacity=12, batch_size=10, learning_starts=0)
    for i in range(rollouts):  # 6 rows per env; wraps around after three rollouts
        buffer.extend(rollout(2 * i, 2, 2))
    assert buffer.sample()["x"].shape == (10,)
    x = torch.cat([buffer.sample()["x"] for _ in range(400)])
    expected = {100.0 * b + t for b in range(2) for t in held}
    values, counts = torch.unique(x, return_counts=True)
    assert set(values.tolist()) == expected
    assert counts.min() > 4000 / len(expected) / 2  # uniform: each about N / pairs times


def test_replay_capacity_too_small_for_a_rollout_is_found_at_construction():
    with pytest.raises(ConfigError, match=r"buffer.capacity=4: holds 2 steps per env .*collector.steps_per_env=4"):
        ReplayBuffer((4, 2), capacity=4, batch_size=2, learning_starts=0)


def test_replay_capacity_below_batch_size():
    with pytest.raises(ConfigError, match="buffer.capacity=100: must be at least buffer.batch_size=256"):
        ReplayBuffer((1, 1), capacity=100, batch_size=256)
