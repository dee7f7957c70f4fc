"""Checkpoint files: atomic, rotated, read back with weights_only, and a corrupt newest one
skipped for the previous one; env states as plain data."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from rlplat.checkpoint import (
    FORMAT,
    CheckpointError,
    CheckpointFiles,
    atomic_save,
    load_checkpoint,
    load_newest,
    periodic_checkpoints,
    rng_state,
    set_rng_state,
)
from rlplat.envs.vector import env_state, load_env_state


def state(frames: int) -> dict:
    return {"format": FORMAT, "frames": frames, "weights": torch.arange(4.0), "rng": rng_state()}


def test_round_trip_reads_plain_data_with_weights_only(tmp_path):
    path = atomic_save(state(7), tmp_path / "a.pt")
    loaded = load_checkpoint(path)
    assert loaded["frames"] == 7 and torch.equal(loaded["weights"], torch.arange(4.0))
    assert [p.name for p in tmp_path.iterdir()] == ["a.pt"]  # no temporary file left


def test_rng_state_restores_python_numpy_and_torch(tmp_path):
    saved = load_checkpoint(atomic_save(state(1), tmp_path / "a.pt"))["rng"]
    expected = (np.random.rand(), torch.rand(1).item())
    set_rng_state(saved)
    assert (np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign"])
def test_damaged_files_raise_one_clear_error(damage, tmp_path):
    path = atomic_save(state(1), tmp_path / "a.pt")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint")
    else:
        torch.save({"something": 1}, path)
    with pytest.raises(CheckpointError, match=f"checkpoint '{path}'"):
        load_checkpoint(path)


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": FORMAT, "object": np.random.default_rng(0)}, path)  # a pickled object
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path)


def test_rotation_keeps_the_newest_and_a_corrupt_newest_falls_back(tmp_path):
    files = CheckpointFiles(tmp_path, keep=2)
    for frames in (100, 200, 300):
        files.write_periodic(state(frames), frames)
    assert [frames for frames, _ in periodic_checkpoints(tmp_path)] == [300, 200]
    newest = periodic_checkpoints(tmp_path)[0][1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a crash mid-copy
    warnings = []
    path, loaded = load_newest(tmp_path, warnings.append)
    assert loaded["frames"] == 200 and path.name == "step_000000000200.pt"
    assert len(warnings) == 1 and "step_000000000300.pt" in warnings[0] and "falling back" in warnings[0]


def test_no_readable_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"no readable periodic checkpoint \(step_\*\.pt\) in '.*'$"):
        load_newest(tmp_path)
    CheckpointFiles(tmp_path, keep=1).write(state(100), "best.pt")  # killed after an evaluation, before a step_*.pt
    with pytest.raises(CheckpointError, match="it has '.*best.pt', its best evaluation's, which rlplat-eval"):
        load_newest(tmp_path)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_env_state_continues_the_same_trajectory(env_id, tmp_path):
    a = gymnasium.make(env_id)
    a.reset(seed=3)
    actions = [a.action_space.sample() for _ in range(60)]
    for action in actions[:7]:
        a.step(action)
    saved = load_checkpoint(atomic_save({"format": FORMAT, "env": env_state(a)}, tmp_path / "e.pt"))["env"]
    b = gymnasium.make(env_id)
    b.reset(seed=99)
    load_env_state(b, saved)
    for action in actions[7:]:
        step_a, step_b = a.step(action), b.step(action)
        assert np.array_equal(step_a[0], step_b[0]) and step_a[1:4] == step_b[1:4]
        if step_a[2] or step_a[3]:
            assert np.array_equal(a.reset()[0], b.reset()[0])  # the generator state came along


def test_a_checkpoint_of_another_format_names_both_formats(tmp_path):
    path = atomic_save({"format": FORMAT - 1, "frames": 0}, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=f"has format {FORMAT - 1}; this rlplat reads format {FORMAT}"):
        load_checkpoint(path)
