"""Prioritized replay: sampling frequencies, importance weights, windows, resume, bad values."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from scipy import stats
from tensordict import TensorDict
from test_stacked_frames import B as STACK_B
from test_stacked_frames import K, rollouts
from test_stacked_frames import T as STACK_T

from rlplat import keys
from rlplat.buffers import ReplayBuffer
from rlplat.buffers.base import PrioritizedBuffer
from rlplat.buffers.prioritized import PrioritizedReplayBuffer
from rlplat.registry import ConfigError


def rollout(start: int, T: int, B: int) -> TensorDict:
    """observation[t, b] = 1000 * b + (start + t): the env and its own step counter."""
    t = torch.arange(start, start + T, dtype=torch.float32).view(T, 1)
    x = t + 1000.0 * torch.arange(B).view(1, B)
    return TensorDict(
        {keys.OBSERVATION: x.unsqueeze(-1), keys.NEXT: {keys.DONE: torch.zeros(T, B, 1, dtype=torch.bool)}},
        batch_size=[T, B],
    )


def filled(capacity: int = 64, B: int = 2, steps: int = 32, **kwargs) -> PrioritizedReplayBuffer:
    kwargs = {"batch_size": 16, "learning_starts": 0, **kwargs}
    buffer = PrioritizedReplayBuffer((4, B), capacity=capacity, **kwargs)
    for start in range(0, steps, 4):
        buffer.extend(rollout(start, 4, B))
    return buffer


def test_it_is_a_prioritized_buffer_whose_samples_carry_index_and_weight():
    buffer = filled()
    assert isinstance(buffer, PrioritizedBuffer) and not isinstance(
        ReplayBuffer((4, 2), capacity=64, batch_size=8), PrioritizedBuffer
    )
    batch = buffer.sample()
    assert batch[keys.SAMPLE_INDEX].dtype == torch.int64 and batch[keys.SAMPLE_INDEX].shape == (16,)
    assert batch[keys.IMPORTANCE_WEIGHT].dtype == torch.float32 and batch[keys.IMPORTANCE_WEIGHT].shape == (16,)
    # the index is the storage position row * B + env of the sample
    index = batch[keys.SAMPLE_INDEX]
    stored = buffer._storage.get(keys.OBSERVATION).flatten(0, 1)[index]
    torch.testing.assert_close(batch[keys.OBSERVATION], stored, rtol=0, atol=0)
    torch.testing.assert_close(batch[keys.IMPORTANCE_WEIGHT], torch.ones(16))  # every priority the same: weights 1


def test_sampling_frequencies_follow_the_priorities():
    """Chi-square goodness of fit of 40,960 draws against P(i) = p_i / sum p, with p_i =
    (|delta_i| + eps)^alpha; at p = 1e-4 a correct sampler fails once in 10,000 seeds."""
    buffer = filled(capacity=64, B=2, steps=32, alpha=0.7, batch_size=64)  # 64 transitions held
    td_error = torch.linspace(0.0, 3.0, 64) ** 2
    buffer.update_priorities(torch.arange(64), td_error)
    priority = (td_error.double().abs() + 1e-6) ** 0.7
    expected = (priority / priority.sum()).numpy()
    counts = np.zeros(64)
    for _ in range(640):
        counts += np.bincount(buffer.sample()[keys.SAMPLE_INDEX].numpy(), minlength=64)
    assert counts[0] == 0 or expected[0] > 0
    result = stats.chisquare(counts, counts.sum() * expected)
    assert result.pvalue > 1e-4, (result, counts[:8], (counts.sum() * expected)[:8])
    # and the draws are not uniform: the largest priority is drawn far more than the smallest
    assert counts[-1] > 20 * max(counts[1], 1)


def test_importance_weights_are_the_formulas():
    buffer = filled(capacity=64, B=2, steps=32, alpha=0.6, beta=0.4, beta_frames=128, batch_size=32)
    td_error = torch.rand(64, generator=torch.Generator().manual_seed(0)) * 5
    buffer.update_priorities(torch.arange(64), td_error)
    assert buffer.frames == 64 and buffer.beta_now == pytest.approx(0.4 + 0.6 * 64 / 128)
    batch = buffer.sample()
    priority = (td_error.double() + 1e-6) ** 0.6
    probability = priority / priority.sum()
    n_held, beta = 64, buffer.beta_now
    weight = (n_held * probability) ** -beta / ((n_held * probability) ** -beta).max()  # max over the held ones
    torch.testing.assert_close(
        batch[keys.IMPORTANCE_WEIGHT].double(), weight[batch[keys.SAMPLE_INDEX]], rtol=1e-6, atol=0
    )
    for start in range(32, 96, 4):  # beta reaches 1 after beta_frames and stays there
        buffer.extend(rollout(start, 4, 2))
    assert buffer.beta_now == 1.0


def test_new_transitions_get_the_largest_priority_so_far_and_duplicates_keep_the_last():
    buffer = filled(capacity=64, B=2, steps=8)
    buffer.update_priorities(torch.tensor([0, 1, 1]), torch.tensor([3.0, 9.0, 1.0]))
    assert buffer._tree.priorities(np.array([1]))[0] == pytest.approx((1.0 + 1e-6) ** 0.6)  # the last of position 1
    assert buffer.max_priority == pytest.approx((9.0 + 1e-6) ** 0.6)
    buffer.extend(rollout(8, 4, 2))
    new = (np.arange(8, 12)[:, None] * 2 + np.arange(2)).reshape(-1)  # rows 8-11 of both envs
    np.testing.assert_allclose(buffer._tree.priorities(new), buffer.max_priority)


@pytest.mark.parametrize("capacity", [200, 24])  # 24: 12 rows per env, the storage wraps around
def test_windows_never_run_past_the_newest_step(capacity):
    L = 5
    buffer = PrioritizedReplayBuffer((4, 2), capacity=capacity, batch_size=16, learning_starts=0, sequence_length=L)
    for start in range(0, 40, 4):
        buffer.extend(rollout(start, 4, 2))
        if buffer._rows < L:
            continue
        # old transitions unlikely, sampled ones and new ones (the largest priority so far) likely:
        # the newest rows, where a window would cross the head, are the likeliest
        held = buffer._rows * 2
        buffer.update_priorities(torch.arange(held), torch.rand(held) * 1e-3)
        newest = start + 3
        for _ in range(5):
            batch = buffer.sample()
            assert batch.batch_size == (16, L)
            step = batch[keys.OBSERVATION][..., 0] % 1000  # [N, L] each env's step counter
            assert (step[:, 1:] - step[:, :-1] == 1).all(), "windows are consecutive steps of one env"
            assert (step[:, -1] <= newest).all(), "a window ran past the newest step"
            index = batch[keys.SAMPLE_INDEX]
            assert ((index[:, 1:] - index[:, :-1]) % capacity == 2).all()  # one row (B positions) apart
            buffer.update_priorities(index, torch.full((16,), 100.0))
        assert (batch[keys.IMPORTANCE_WEIGHT] == batch[keys.IMPORTANCE_WEIGHT][:, :1]).all()


@pytest.mark.parametrize("capacity", [1000 * STACK_B, 20 * STACK_B])
def test_frame_stacks_of_prioritized_samples_are_the_observations_the_env_gave(capacity):
    plain = ReplayBuffer((STACK_T, STACK_B), capacity=capacity, batch_size=8, learning_starts=0)
    stacked = PrioritizedReplayBuffer(
        (STACK_T, STACK_B), capacity=capacity, batch_size=48, learning_starts=0, frame_stack=K
    )
    for rollout_ in rollouts(4):
        plain.extend(rollout_)
        stacked.extend(rollout_)
        held = stacked._rows * STACK_B
        stacked.update_priorities(torch.arange(held), torch.rand(held))  # the newest and oldest rows too
        batch = stacked.sample()
        index = batch[keys.SAMPLE_INDEX]
        flat = plain._storage.flatten(0, 1)
        torch.testing.assert_close(batch[keys.OBSERVATION], flat[index][keys.OBSERVATION], rtol=0, atol=0)
        torch.testing.assert_close(batch[keys.NEXT_OBSERVATION], flat[index][keys.NEXT_OBSERVATION], rtol=0, atol=0)


def test_a_resumed_buffer_samples_what_the_uninterrupted_one_samples():
    one = filled(capacity=48, B=2, steps=40, sequence_length=3)  # wrapped around
    one.update_priorities(torch.arange(48), torch.rand(48, generator=torch.Generator().manual_seed(3)))
    one.sample()
    file = io.BytesIO()
    torch.save(one.state_dict(with_data=True), file)
    file.seek(0)
    two = PrioritizedReplayBuffer((4, 2), capacity=48, batch_size=16, learning_starts=0, sequence_length=3)
    two.load_state_dict(torch.load(file, weights_only=True))
    for start in range(40, 60, 4):
        for buffer in (one, two):
            buffer.extend(rollout(start, 4, 2))
        first, second = one.sample(), two.sample()
        assert (first == second).all()
        td_error = torch.rand(16)
        for buffer, batch in ((one, first), (two, second)):
            buffer.update_priorities(batch[keys.SAMPLE_INDEX], td_error)
    assert one.max_priority == two.max_priority and one._tree.total == two._tree.total


def test_without_its_transitions_a_resumed_buffer_starts_afresh():
    one = filled()
    two = PrioritizedReplayBuffer((4, 2), capacity=64, batch_size=16, learning_starts=0)
    two.load_state_dict(one.state_dict(with_data=False))
    assert len(two) == 0 and two.frames == one.frames
    two.extend(rollout(0, 4, 2))
    assert two._tree.total == 8  # 8 new transitions at priority 1


@pytest.mark.parametrize(
    "key,value,valid",
    [
        ("alpha", -0.1, ">= 0"),
        ("beta", 1.5, r"in \[0, 1\]"),
        ("beta", float("nan"), r"in \[0, 1\]"),
        ("beta_frames", 0, ">= 1"),
        ("priority_eps", 0.0, "> 0"),
        ("alpha", "high", ">= 0"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_valid(key, value, valid):
    with pytest.raises(ConfigError, match=rf"buffer\.{key}=.*: must be .*{valid}"):
        PrioritizedReplayBuffer((4, 2), capacity=64, batch_size=8, **{key: value})


def test_td_errors_that_do_not_fit_the_batch_are_refused():
    buffer = filled()
    with pytest.raises(ValueError, match="3 values for 2 samples"):
        buffer.update_priorities(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(ValueError, match="NaN or inf"):
        buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, float("inf")]))
