"""Memory-mapped replay storage (buffer.storage=memmap): the same samples as in memory, files
on disk, checkpoints that name the files rather than copy them, and resumes that reopen them."""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict
from test_stacked_frames import B, K, T, rollouts

from rlplat import keys
from rlplat.buffers import ReplayBuffer
from rlplat.buffers.prioritized import PrioritizedReplayBuffer
from rlplat.buffers.replay import MEMMAP_FRAMES, MEMMAP_STORAGE
from rlplat.registry import ConfigError


def pixels(start: int, steps: int = 4, envs: int = 2) -> TensorDict:
    """``[steps, envs]`` transitions of uint8 8x8 frames whose values encode the step."""
    value = (torch.arange(start, start + steps).view(steps, 1) * envs + torch.arange(envs)).to(torch.uint8)
    frames = value.view(steps, envs, 1, 1).expand(steps, envs, 8, 8).clone()
    done = torch.zeros(steps, envs, 1, dtype=torch.bool)
    return TensorDict(
        {
            keys.OBSERVATION: frames,
            keys.ACTION: value.long(),
            keys.NEXT: {keys.OBSERVATION: frames + 1, keys.REWARD: value.float().unsqueeze(-1), keys.DONE: done},
        },
        batch_size=[steps, envs],
    )


@pytest.mark.parametrize("kind", [ReplayBuffer, PrioritizedReplayBuffer])
def test_memmap_storage_samples_what_memory_storage_samples(kind, tmp_path):
    settings = {"capacity": 40, "batch_size": 8, "learning_starts": 0, "sequence_length": 2}
    torch.manual_seed(0)  # a prioritized buffer's generator is seeded from torch's
    memory = kind((4, 2), **settings)
    torch.manual_seed(0)
    mapped = kind((4, 2), **settings, storage="memmap", directory=str(tmp_path / "replay"))
    for start in range(0, 48, 4):  # wraps around
        memory.extend(pixels(start))
        mapped.extend(pixels(start))
        torch.manual_seed(start)
        first = memory.sample()
        torch.manual_seed(start)
        second = mapped.sample()
        assert (first == second).all()
    assert second[keys.OBSERVATION].dtype == torch.uint8
    files = sorted(p.relative_to(tmp_path / "replay").as_posix() for p in (tmp_path / "replay").rglob("*.memmap"))
    assert f"{MEMMAP_STORAGE}/observation.memmap" in files and MEMMAP_FRAMES in files


def test_a_checkpoint_names_the_files_and_a_resume_reopens_them(tmp_path):
    settings = {"capacity": 40, "batch_size": 8, "learning_starts": 0, "storage": "memmap"}
    one = PrioritizedReplayBuffer((4, 2), **settings, directory=str(tmp_path / "replay"))
    for start in range(0, 28, 4):
        one.extend(pixels(start))
    one.update_priorities(torch.arange(8), torch.arange(8.0))
    state = one.state_dict(with_data=True)
    assert "storage" not in state and state["memmap"] == str((tmp_path / "replay").resolve())
    file = io.BytesIO()
    torch.save(state, file)
    assert file.tell() < 10_000  # counters and 40 priorities, no transition
    file.seek(0)
    two = PrioritizedReplayBuffer((4, 2), **settings)  # no directory: the checkpoint's
    two.load_state_dict(torch.load(file, weights_only=True))
    for start in range(28, 48, 4):
        for buffer in (one, two):
            buffer.extend(pixels(start))
        first, second = one.sample(), two.sample()
        assert (first == second).all()


def test_files_written_past_the_checkpoint_or_gone_refill_the_buffer_with_a_warning(tmp_path):
    settings = {"capacity": 40, "batch_size": 8, "learning_starts": 8, "storage": "memmap"}
    one = ReplayBuffer((4, 2), **settings, directory=str(tmp_path / "replay"))
    one.extend(pixels(0))
    state = one.state_dict(with_data=True)
    one.extend(pixels(4))  # after the checkpoint
    two = ReplayBuffer((4, 2), **settings, directory=str(tmp_path / "replay"))
    with pytest.warns(UserWarning, match="they hold 16 frames, written after this checkpoint's 8; the buffer refills"):
        two.load_state_dict(state)
    assert len(two) == 0 and two.frames == 8
    two.extend(pixels(4))  # writes into the same files again
    assert len(two) == 8
    state["memmap"] = str(tmp_path / "elsewhere")
    with pytest.warns(UserWarning, match="its files are gone"):
        ReplayBuffer((4, 2), **settings).load_state_dict(state)


def test_frame_stacks_are_stored_once_per_step_in_the_files(tmp_path):
    memory = ReplayBuffer((T, B), capacity=64 * B, batch_size=16, learning_starts=0, frame_stack=K)
    mapped = ReplayBuffer(
        (T, B), capacity=64 * B, batch_size=16, learning_starts=0, frame_stack=K, storage="memmap", directory=tmp_path
    )
    for rollout in rollouts(2):
        memory.extend(rollout)
        mapped.extend(rollout)
    torch.manual_seed(0)
    first = memory.sample()
    torch.manual_seed(0)
    assert (first == mapped.sample()).all()
    assert (tmp_path / MEMMAP_STORAGE / "frame.memmap").stat().st_size == 64 * B * 4 * 4  # [64, B, 4] float32


def test_storage_values_and_a_missing_directory_are_config_errors():
    with pytest.raises(ConfigError, match="buffer.storage='disk': must be one of memory, memmap"):
        ReplayBuffer((4, 2), capacity=40, batch_size=8, storage="disk")
    buffer = ReplayBuffer((4, 2), capacity=40, batch_size=8, storage="memmap")
    with pytest.raises(ConfigError, match="set buffer.directory"):
        buffer.extend(pixels(0))
