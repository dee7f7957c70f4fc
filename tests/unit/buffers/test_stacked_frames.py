"""Frame-stacked observations stored one frame per step: the rebuilt stacks are the env's."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from tensordict import TensorDict

from rlplat import keys
from rlplat.buffers import ReplayBuffer
from rlplat.buffers.frames import EPISODE_STEP, FRAME
from rlplat.envs.vector import VectorEnv
from rlplat.registry import ConfigError

K, B, T = 4, 3, 16


def stacked_cartpole() -> gymnasium.Env:
    """CartPole observations [4] stacked 4 deep ([4, 4]), the first stack padded with the reset
    observation (gymnasium's default), short random episodes: many episode ends."""
    return gymnasium.wrappers.FrameStackObservation(gymnasium.make("CartPole-v1"), K)


def rollouts(count: int, seed: int = 0) -> list[TensorDict]:
    env = VectorEnv(stacked_cartpole, B)
    generator = torch.Generator().manual_seed(seed)
    observation = env.reset(seed=seed)
    found = []
    for _ in range(count):
        steps = []
        for _ in range(T):
            action = torch.randint(2, (B,), generator=generator)
            step = env.step(action)
            done = step.terminated | step.truncated
            steps.append(
                TensorDict(
                    {
                        keys.OBSERVATION: observation,
                        keys.ACTION: action,
                        keys.NEXT: {
                            keys.OBSERVATION: step.next_observation.clone(),
                            keys.REWARD: step.reward.clone(),
                            keys.DONE: done,
                            keys.TERMINATED: step.terminated.clone(),
                            keys.TRUNCATED: step.truncated.clone(),
                        },
                    },
                    batch_size=[B],
                )
            )
            observation = step.observation.clone()
        found.append(torch.stack(steps))
    env.close()
    return found


@pytest.mark.parametrize("capacity", [1000 * B, 20 * B])  # 20 rows: the storage wraps around
def test_every_rebuilt_stack_is_the_observation_the_env_gave(capacity):
    plain = ReplayBuffer((T, B), capacity=capacity, batch_size=8, learning_starts=0)
    stacked = ReplayBuffer((T, B), capacity=capacity, batch_size=8, learning_starts=0, frame_stack=K)
    data = rollouts(4)
    assert bool(torch.cat([r[keys.NEXT_DONE] for r in data]).any()), "episodes end inside the rollouts"
    for rollout in data:
        plain.extend(rollout)
        stacked.extend(rollout)
    storage, length = stacked._storage, stacked._storage.batch_size[0]
    wrapped = stacked._rows == length
    oldest = stacked._head if wrapped else 0
    ages = range(K - 1 if wrapped else 0, stacked._rows - 1)  # every step with its history and next step held
    rows = torch.tensor([(oldest + a) % length for a in ages for _ in range(B)])
    envs = torch.tensor([b for _ in ages for b in range(B)])
    age = torch.tensor([a for a in ages for _ in range(B)])
    observation, next_observation = stacked._stacked.stacks(
        storage.get(FRAME), storage.get(EPISODE_STEP), storage.get(keys.NEXT_DONE).squeeze(-1), rows, envs, age, length
    )
    torch.testing.assert_close(observation, plain._storage.get(keys.OBSERVATION)[rows, envs], rtol=0, atol=0)
    torch.testing.assert_close(next_observation, plain._storage.get(keys.NEXT_OBSERVATION)[rows, envs], rtol=0, atol=0)


@pytest.mark.parametrize("sequence_length", [1, 3])
def test_samples_carry_both_stacks_and_store_each_frame_once(sequence_length):
    buffer = ReplayBuffer(
        (T, B), capacity=64 * B, batch_size=32, learning_starts=0, sequence_length=sequence_length, frame_stack=K
    )
    for rollout in rollouts(3):
        buffer.extend(rollout)
    batch = buffer.sample()
    shape = (32,) if sequence_length == 1 else (32, sequence_length)
    assert batch.batch_size == torch.Size(shape)
    assert batch[keys.OBSERVATION].shape == (*shape, K, 4) and batch[keys.NEXT_OBSERVATION].shape == (*shape, K, 4)
    assert FRAME not in batch and EPISODE_STEP not in batch
    stored = buffer._storage
    assert keys.OBSERVATION not in stored and keys.NEXT_OBSERVATION not in stored.keys(True)
    assert stored.get(FRAME).shape == (64, B, 4)  # one frame per step and env
    plain = ReplayBuffer((T, B), capacity=64 * B, batch_size=32, learning_starts=0, sequence_length=sequence_length)
    plain.extend(rollouts(1)[0])
    assert buffer.storage_bytes < plain.storage_bytes / 2  # 2 stacks of 4 frames per step: 1 frame


def test_the_stacked_buffer_resumes_with_its_final_frames():
    data = rollouts(3)
    buffer = ReplayBuffer((T, B), capacity=64 * B, batch_size=16, learning_starts=0, frame_stack=K)
    for rollout in data[:2]:
        buffer.extend(rollout)
    loaded = ReplayBuffer((T, B), capacity=64 * B, batch_size=16, learning_starts=0, frame_stack=K)
    loaded.load_state_dict(buffer.state_dict(with_data=True))
    buffer.extend(data[2])
    loaded.extend(data[2])
    torch.manual_seed(1)
    first = buffer.sample()
    torch.manual_seed(1)
    second = loaded.sample()
    assert (first == second).all()


def test_observations_that_are_not_stacks_of_k_frames_name_the_key():
    buffer = ReplayBuffer((T, B), capacity=64 * B, batch_size=16, learning_starts=0, frame_stack=3)
    with pytest.raises(ConfigError, match=r"buffer.frame_stack=3: the observations are \[16, 3, 4, 4\]"):
        buffer.extend(rollouts(1)[0])
    with pytest.raises(ConfigError, match="buffer.frame_stack=1: must be an integer >= 2"):
        ReplayBuffer((T, B), frame_stack=1)
