"""Uniform replay buffer with storage allocated once, kept per env in time order."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict

from rlplat import keys
from rlplat.buffers.frames import EPISODE_STEP, FRAME, StackedFrames
from rlplat.registry import ConfigError, check_at_least, check_non_negative

STORAGES = ("memory", "memmap")
"""Values of ``buffer.storage``."""
MEMMAP_STORAGE = "storage"
"""Folder of the memory-mapped leaves in the memmap directory (tensordict's ``memmap`` layout)."""
MEMMAP_FRAMES = "frames_written.memmap"
"""File of the memmap directory holding the frames written to it, ``[1]`` int64: a resume
checks it against its checkpoint's frames."""


class ReplayBuffer:
    """Circular storage ``[capacity // B, B]`` of transitions, sampled uniformly.

    Transitions stay in time order per env, so a sample can be a window of
    ``sequence_length`` consecutive steps of one env (for n-step returns; windows may span
    episode ends, which the losses handle through ``done``). Updates start once
    ``learning_starts`` frames were collected; then each rollout of F frames earns
    ``replay_ratio * F`` gradient updates (fractions carry over).

    Args:
        rollout_shape: ``(T, B)`` of the collector's rollouts (supplied by rlplat).
        capacity: Transitions kept, in frames; the oldest are overwritten.
        batch_size: Samples per gradient update N.
        learning_starts: Frames collected before the first update.
        replay_ratio: Gradient updates per collected frame.
        sequence_length: Steps per sample; 1 gives batches ``[N]``, L > 1 gives ``[N, L]``.
        frame_stack: k when each observation is a stack of the last k frames on its first axis
            (Atari's ``env.frame_stack``, ``transforms.frame_stack``): each frame is then stored
            once, and both stacks of a sample rebuilt from the frames of the steps before it
            (:class:`rlplat.buffers.frames.StackedFrames`): a transition of 84x84 frames holds
            7 KB instead of 56 KB. None stores observations as they are.
        storage: ``memory``: the transitions are held in RAM (on the rollouts' device);
            ``memmap``: in memory-mapped files on disk, written as they come (the files are
            sparse: a replay the size of the disk costs what it holds), read through the page
            cache, which the OS frees under memory pressure: for replays larger than RAM. Samples
            are gathered on the CPU and moved to the rollouts' device.
        directory: Where ``memmap`` storage puts its files (created if missing); None puts
            them in ``replay/`` of the run directory (:meth:`use_run_directory`).

    Attributes:
        on_policy: False: samples come from every stored rollout.
        sequence_length: Steps per sample (the loss's ``sequence_length`` must match).

    Raises:
        ConfigError: for non-positive sizes, a negative ratio, a capacity that cannot hold
            a rollout, a sequence or a batch, or an unknown storage.
    """

    on_policy = False

    def __init__(
        self,
        rollout_shape: tuple[int, int],
        *,
        capacity: int = 1_000_000,
        batch_size: int = 256,
        learning_starts: int = 1000,
        replay_ratio: float = 1.0,
        sequence_length: int = 1,
        frame_stack: int | None = None,
        storage: str = "memory",
        directory: str | None = None,
    ) -> None:
        if storage not in STORAGES:
            raise ConfigError(f"buffer.storage={storage!r}: must be one of {', '.join(STORAGES)}")
        for key, value in (("capacity", capacity), ("batch_size", batch_size), ("sequence_length", sequence_length)):
            check_at_least(f"buffer.{key}", value)
        check_non_negative("buffer.learning_starts", learning_starts, unit="frames")
        if not 0 < replay_ratio < math.inf:
            raise ConfigError(f"buffer.replay_ratio={replay_ratio}: must be a finite number > 0 updates per frame")
        steps, num_envs = rollout_shape
        if capacity < batch_size:
            raise ConfigError(f"buffer.capacity={capacity}: must be at least buffer.batch_size={batch_size}")
        if capacity // num_envs < max(steps, sequence_length):
            raise ConfigError(
                f"buffer.capacity={capacity}: holds {capacity // num_envs} steps per env over "
                f"collector.num_envs={num_envs}, fewer than a rollout (collector.steps_per_env={steps}) "
                f"or a sequence (buffer.sequence_length={sequence_length})"
            )
        self.capacity = capacity
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.replay_ratio = replay_ratio
        self.sequence_length = sequence_length
        self.frames = 0
        self._storage: TensorDict | None = None
        self._keys: list[Any] = []  # the storage's leaf keys, nested ones as tuples
        self._flat: list[torch.Tensor] = []  # its leaves, [length * B, ...] each
        self._flat_arrays: list[np.ndarray] = []  # the same as numpy arrays, on the CPU
        self._writable: list[torch.Tensor | np.ndarray] = []  # its leaves [length, B, ...], numpy on the CPU
        self._head = 0  # next row to write
        self._rows = 0  # rows written, at most the storage length
        self._credit = 0.0  # updates earned and not yet taken
        self._updates_from = learning_starts  # frames from which rollouts earn updates
        self._stacked = None if frame_stack is None else StackedFrames(frame_stack, num_envs)
        self.storage = storage
        self.directory = None if directory is None else Path(directory)
        self._written: torch.Tensor | None = None  # memmap: frames written to the files, [1] int64 in a file
        self._sample_device: torch.device | None = None  # memmap: where samples go, when not the CPU

    def use_run_directory(self, run_dir: Path) -> None:
        """Put ``memmap`` storage in ``<run_dir>/replay`` unless ``directory`` was given."""
        if self.directory is None:
            self.directory = Path(run_dir) / "replay"

    def extend(self, rollout: TensorDict) -> None:
        """Append a ``[T, B]`` rollout, overwriting the oldest rows when full."""
        T, B = rollout.batch_size
        stored = rollout if self._stacked is None else self._stacked.split(rollout)
        if self._storage is None:
            self._use(self._allocate(stored[0].expand(self.capacity // B, B)))
        assert self._storage is not None
        if self._written is not None and self._sample_device is None:  # memmap on the CPU, samples on the device
            device = rollout.get(keys.NEXT_DONE).device
            self._sample_device = None if device.type == "cpu" else device
        length = self._storage.batch_size[0]
        if self._stacked is not None:
            rows = (self._head + np.arange(T)) % length
            old_done = self._storage.get(keys.NEXT_DONE)[torch.from_numpy(rows)].squeeze(-1).cpu().numpy()
            self._stacked.keep_finals(rollout, rows, old_done)
        first = min(T, length - self._head)  # rows before the storage wraps around
        for key, leaf in zip(self._keys, self._writable):
            value = stored.get(key)
            if isinstance(leaf, np.ndarray):  # CPU storage: numpy's row assignment costs less than torch's
                value = value.cpu().numpy()
            leaf[self._head : self._head + first] = value[:first]
            if first < T:
                leaf[: T - first] = value[first:]
        self._head = (self._head + T) % length
        self._rows = min(self._rows + T, length)
        self.frames += T * B
        if self.frames >= self._updates_from:
            self._credit += self.replay_ratio * T * B
        if self._written is not None:
            self._written[0] = self.frames

    def _allocate(self, template: TensorDict) -> TensorDict:
        """Storage shaped as ``template`` (``[length, B]``): zeros in memory, or memory-mapped
        files in :attr:`directory` (new files are sparse, reading as zeros; files a refilled
        buffer finds there are reused, and only the rows written since are ever read)."""
        if self.storage == "memory":
            return template.clone().zero_()
        folder = self._folder()
        storage = template.memmap_like(prefix=folder / MEMMAP_STORAGE, existsok=True)
        self._written = MemoryMappedTensor.zeros(1, dtype=torch.int64, filename=folder / MEMMAP_FRAMES, existsok=True)
        return storage

    def _folder(self) -> Path:
        """The memmap directory, created if missing.

        Raises:
            ConfigError: when no directory was given and no run directory is known.
        """
        if self.directory is None:
            raise ConfigError(
                "buffer.storage=memmap needs a directory for its files: set buffer.directory "
                "(rlplat-train puts them in replay/ of the run directory)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory

    def _on_device(self, batch: TensorDict) -> TensorDict:
        """``batch`` on the rollouts' device (memmap storage is on the CPU)."""
        return batch if self._sample_device is None else batch.to(self._sample_device)

    def _use(self, storage: TensorDict) -> None:
        """Hold ``storage`` ``[length, B]``, and the views of its leaves that writes and samples use."""
        self._storage = storage
        self._keys = list(storage.keys(include_nested=True, leaves_only=True))
        leaves = [storage.get(key) for key in self._keys]
        self._flat = [leaf.flatten(0, 1) for leaf in leaves]  # [length * B, ...]: env b of row t at t * B + b
        self._flat_arrays = [leaf.numpy() for leaf in self._flat] if self._flat[0].device.type == "cpu" else []
        self._writable = [leaf.numpy() if leaf.device.type == "cpu" else leaf for leaf in leaves]

    @property
    def storage_bytes(self) -> int:
        """Bytes of the storage allocated at the first :meth:`extend` (0 before), for every
        transition it can hold; final frames kept aside (``frame_stack``) not counted."""
        if self._storage is None:
            return 0
        return sum(int(leaf.numel()) * int(leaf.element_size()) for leaf in self._flat)

    def __len__(self) -> int:
        """Transitions held, in frames."""
        return 0 if self._storage is None else self._rows * self._storage.batch_size[1]

    def sample(self) -> TensorDict:
        """``batch_size`` uniform samples: ``[N]``, or ``[N, sequence_length]`` windows."""
        return self.gather(self._draw())

    def _oldest(self) -> int:
        """Row of the oldest step held (0 until the storage has wrapped around, then the head's)."""
        assert self._storage is not None
        return self._head if self._rows == self._storage.batch_size[0] else 0

    def _draw(self) -> torch.Tensor:
        """``[N]`` int64 storage positions (``row * B + env``) of the first steps of
        ``batch_size`` uniform samples, among those :meth:`gather` can serve."""
        assert self._storage is not None, "sample() before extend()"
        length, B = self._storage.batch_size
        L, N = self.sequence_length, self.batch_size
        if self._stacked is not None:
            # windows of steps in time order whose next step is held too (the newest step's next
            # observation is not yet) and, once wrapped around, whose k - 1 earlier steps are held
            low, high = (self._stacked.k - 1 if self._rows == length else 0), self._rows - L
            if high <= low:
                raise RuntimeError(f"replay buffer holds {self._rows} steps per env, too few for a sequence of {L}")
            age = torch.randint(low, high, (N,))  # rows held before each sample's first step
            env = torch.randint(B, (N,))
            return (age + self._oldest()) % length * B + env
        starts = self._rows - L + 1  # windows that do not run past the newest row
        if starts < 1:
            raise RuntimeError(f"replay buffer holds {self._rows} steps per env, fewer than a sequence of {L}")
        if L == 1:
            # one draw per sample over the (row, env) pairs held: row t of env b is t * B + b of
            # the flat leaves (rows in storage order: uniform whether it has wrapped around or not)
            return torch.randint(self._rows * B, (N,))
        rows = torch.randint(starts, (N,))
        env = torch.randint(B, (N,))
        return (rows + self._oldest()) % length * B + env

    def gather(self, position: torch.Tensor) -> TensorDict:
        """The samples whose first steps are at storage positions ``position``.

        Args:
            position: ``[N]`` int64 positions ``row * B + env`` on the CPU, each the first step
                of a window of ``sequence_length`` steps held in time order (with
                ``frame_stack``: whose next step, and k - 1 steps before, are held too).

        Returns:
            ``[N]`` transitions, or ``[N, sequence_length]`` windows.
        """
        assert self._storage is not None, "sample() before extend()"
        if self._stacked is not None:
            return self._gather_stacks(self._stacked, position)
        length, B = self._storage.batch_size
        L = self.sequence_length
        if L == 1:
            if self._flat_arrays:  # CPU storage: numpy's gather costs half of torch's at these sizes
                flat_rows = position.numpy()
                batch = [torch.from_numpy(np.take(leaf, flat_rows, axis=0)) for leaf in self._flat_arrays]
            else:
                position = position.to(self._storage.device)
                batch = [torch.index_select(leaf, 0, position) for leaf in self._flat]  # the same gather, fewer checks
            return self._on_device(TensorDict(dict(zip(self._keys, batch)), batch_size=position.shape))
        rows = (position // B).unsqueeze(1) + torch.arange(L)  # [N, L]
        index = (rows % length * B + (position % B).unsqueeze(1)).to(self._storage.device)  # into [length * B] rows
        batch = TensorDict(dict(zip(self._keys, [leaf[index] for leaf in self._flat])), batch_size=index.shape)
        return self._on_device(batch)

    def _gather_stacks(self, stacked: StackedFrames, position: torch.Tensor) -> TensorDict:
        """:meth:`gather` where frames are stored once: both stacks of each step rebuilt."""
        assert self._storage is not None
        length, B = self._storage.batch_size
        L, N = self.sequence_length, position.shape[0]
        first = position // B
        age = ((first - self._oldest()) % length).unsqueeze(1) + torch.arange(L)  # [N, L] rows held before each step
        env = (position % B).unsqueeze(1).expand(N, L)
        rows = (first.unsqueeze(1) + torch.arange(L)) % length
        device = self._storage.device
        index = (rows * B + env).to(device)
        entries = {key: leaf[index] for key, leaf in zip(self._keys, self._flat) if key not in (FRAME, EPISODE_STEP)}
        batch = TensorDict(entries, batch_size=[N, L])
        storage = self._storage
        observation, next_observation = stacked.stacks(
            storage.get(FRAME), storage.get(EPISODE_STEP), storage.get(keys.NEXT_DONE).squeeze(-1),
            rows.flatten().to(device), env.flatten().to(device), age.flatten().to(device), length,
        )  # fmt: skip
        batch.set(keys.OBSERVATION, observation.unflatten(0, (N, L)))
        batch.set(keys.NEXT_OBSERVATION, next_observation.unflatten(0, (N, L)))
        return self._on_device(batch if L > 1 else batch[:, 0])

    def batches(self) -> Iterator[TensorDict]:
        """The sampled batches earned since the last call (none before ``learning_starts``)."""
        updates = int(self._credit)
        self._credit -= updates
        for _ in range(updates):
            yield self.sample()

    def state_dict(self, with_data: bool = False) -> dict[str, Any]:
        """Counters and, ``with_data``, the stored transitions, for an exact resume; without
        them a resumed run refills the buffer.

        ``memory`` storage puts the transitions in the state, as a dict of tensors; ``memmap``
        storage puts only its directory there, after its files were written to disk
        (``fsync``): a replay larger than RAM is never read into it."""
        state: dict[str, Any] = {
            "frames": self.frames,
            "credit": self._credit,
            "head": self._head,
            "rows": self._rows,
            "updates_from": self._updates_from,
        }
        if with_data and self._storage is not None:
            if self.storage == "memmap":
                state["memmap"] = str(self._sync_files())
            else:
                state["storage"] = self._storage.to_dict()
            state["storage_shape"] = list(self._storage.batch_size)
            if self._stacked is not None:
                state["stacked"] = self._stacked.state_dict()
        return state

    def _sync_files(self) -> Path:
        """Write the memmap files' changed pages to disk; returns their directory (absolute)."""
        folder = self._folder().resolve()
        for path in sorted(folder.rglob("*.memmap")):
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)  # Linux writes a shared mapping's dirty pages back with the file's
            finally:
                os.close(descriptor)
        return folder

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; without stored transitions the buffer starts empty
        and refills: its frame count carries over, and updates start again once
        ``learning_starts`` more frames were collected (as at the run's start, so that no
        update samples a nearly empty buffer).

        ``memmap`` storage reopens the files of the directory the state names, where they
        hold what they held when it was saved: unless a later checkpoint's run wrote more to
        them, or they are gone; then the buffer refills (with a warning saying why)."""
        self.frames = int(state["frames"])
        stored = state.get("storage")
        if stored is not None:
            stored = TensorDict(stored, batch_size=state["storage_shape"])
        elif "memmap" in state:
            stored = self._reopen(Path(state["memmap"]), state["storage_shape"])
        if stored is not None:
            self._use(stored)
            if self._stacked is not None and "stacked" in state:
                self._stacked.load_state_dict(state["stacked"])
            self._head, self._rows = int(state["head"]), int(state["rows"])
            self._credit = float(state["credit"])
            self._updates_from = int(state.get("updates_from", self.learning_starts))
        else:
            self._storage, self._keys, self._head, self._rows = None, [], 0, 0
            self._flat, self._flat_arrays, self._writable = [], [], []
            self._credit, self._updates_from = 0.0, self.frames + self.learning_starts

    def _reopen(self, folder: Path, shape: list[int]) -> TensorDict | None:
        """The memmap storage in ``folder`` as a checkpoint of :attr:`frames` frames left it,
        or None (with a warning) when its files are gone or were written past that."""
        counter = folder / MEMMAP_FRAMES
        reason = None
        if not counter.is_file() or not (folder / MEMMAP_STORAGE).is_dir():
            reason = "its files are gone"
        else:
            written = MemoryMappedTensor.from_filename(counter, dtype=torch.int64, shape=torch.Size([1]))
            if int(written[0]) != self.frames:
                reason = f"they hold {int(written[0]):,} frames, written after this checkpoint's {self.frames:,}"
        if reason is not None:
            warnings.warn(
                f"the replay's memory-mapped files in {folder}: {reason}; the buffer refills "
                "(as with checkpoint.save_buffer=false)",
                stacklevel=3,
            )
            return None
        storage = TensorDict.load_memmap(folder / MEMMAP_STORAGE)
        if list(storage.batch_size) != list(shape):
            raise ValueError(f"the replay's files in {folder} hold {list(storage.batch_size)} rows, not {shape}")
        self.directory, self._written = folder, written
        return storage
