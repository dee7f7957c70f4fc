"""Prioritized experience replay, proportional variant (Schaul et al. 2016, "Prioritized
Experience Replay", section 3.3 and algorithm 1).

Transition ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k``, its priority
``p_i = (|delta_i| + eps)^alpha`` set from the TD error ``delta_i`` of its last update (a new
transition gets the largest priority so far, so that each is replayed at least once soon),
and its update weighted by ``w_i = (N * P(i))^-beta / max_j w_j``, the importance-sampling
correction of the non-uniform sampling, normalised by its maximum (over the N transitions
held, i.e. at the smallest priority) so that weights only scale updates down; beta is
annealed linearly from ``beta`` to 1 over ``beta_frames`` frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from rlplat import keys
from rlplat.buffers.replay import ReplayBuffer
from rlplat.buffers.sum_tree import SumTree
from rlplat.registry import ConfigError


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay sampled in proportion to priorities set from TD errors, with importance weights.

    A :class:`rlplat.buffers.replay.ReplayBuffer` (the same storage, windows, frame stacks
    and update credit) whose samples are drawn from a sum-tree over the storage positions
    (``row * B + env``), stratified (one draw in each of N equal slices of the priority mass), and carry
    ``index`` (``[N]`` int64 storage positions; ``[N, L]`` in windows, the priority going to
    the window's first step) and ``weight`` (``[N]`` float32 importance weights in (0, 1];
    ``[N, L]`` in windows, the same along L). A window (``sequence_length`` > 1), or a step
    whose stacks are rebuilt (``frame_stack``), is drawn only where :meth:`gather` can serve
    it: never across the newest step; its priority is kept meanwhile and counts again once
    the window fits.

    Args:
        rollout_shape: ``(T, B)`` of the collector's rollouts (supplied by rlplat).
        capacity: As :class:`ReplayBuffer`'s, and so are ``batch_size``, ``learning_starts``,
            ``replay_ratio``, ``sequence_length``, ``frame_stack``, ``storage`` and ``directory``.
        alpha: Priority exponent: ``p = (|delta| + eps)^alpha``; 0 samples uniformly.
        beta: Importance-sampling exponent at frame 0, in [0, 1]; 1 corrects fully.
        beta_frames: Frames over which beta rises linearly to 1.
        priority_eps: eps > 0, added to ``|delta|`` so that no transition has priority 0.

    Attributes:
        max_priority: The largest priority set so far (1 at first): a new transition's.
        beta_now: The importance-sampling exponent at the frames collected so far.

    Raises:
        ConfigError: for alpha < 0, beta outside [0, 1], beta_frames < 1, priority_eps <= 0
            (or any of them not a finite number), and as :class:`ReplayBuffer`.
    """

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
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_frames: int = 1_000_000,
        priority_eps: float = 1e-6,
    ) -> None:
        check_prioritized(alpha=alpha, beta=beta, beta_frames=beta_frames, priority_eps=priority_eps)
        super().__init__(
            rollout_shape,
            capacity=capacity,
            batch_size=batch_size,
            learning_starts=learning_starts,
            replay_ratio=replay_ratio,
            sequence_length=sequence_length,
            frame_stack=frame_stack,
            storage=storage,
            directory=directory,
        )
        self.alpha, self.beta = float(alpha), float(beta)
        self.beta_frames, self.priority_eps = beta_frames, priority_eps
        self.max_priority = 1.0  # of a new transition: the largest so far
        self._tree: SumTree | None = None  # over the storage positions, allocated with the storage
        self._priority = np.zeros(0)  # every position's priority, also where the tree holds 0 (masked rows)
        self._masked = np.zeros(0, dtype=np.int64)  # rows whose windows cannot be served now
        self._rng = np.random.default_rng(int(torch.randint(2**62, ()).item()))  # seeded by the run's seed

    @property
    def beta_now(self) -> float:
        """The importance-sampling exponent at the frames collected so far."""
        return min(1.0, self.beta + (1.0 - self.beta) * self.frames / self.beta_frames)

    def extend(self, rollout: TensorDict) -> None:
        """Append a ``[T, B]`` rollout; its transitions get the largest priority so far."""
        head = self._head
        super().extend(rollout)
        assert self._storage is not None
        length, B = self._storage.batch_size
        if self._tree is None:
            self._tree = SumTree(length * B)
            self._priority = np.zeros(length * B)
        T = rollout.batch_size[0]
        written = (head + np.arange(T)) % length
        self._priority[(written[:, None] * B + np.arange(B)).reshape(-1)] = self.max_priority
        self._refresh(np.concatenate([written, self._masked]))

    def _unservable_rows(self) -> np.ndarray:
        """Rows no window may start at now: the newest ``sequence_length - 1`` (``frame_stack``:
        the newest ``sequence_length``, whose next observation is not held yet, and once
        wrapped around the oldest k - 1, whose earlier frames are gone)."""
        assert self._storage is not None
        length = self._storage.batch_size[0]
        newest = self.sequence_length - (0 if self._stacked is not None else 1)
        oldest = self._stacked.k - 1 if self._stacked is not None and self._rows == length else 0
        return (self._head + np.arange(-min(newest, self._rows), oldest)) % length

    def _refresh(self, rows: np.ndarray) -> None:
        """Put the priorities of ``rows`` in the tree: 0 where no window may start now."""
        assert self._tree is not None and self._storage is not None
        B = self._storage.batch_size[1]
        self._masked = self._unservable_rows()
        rows = np.unique(np.concatenate([rows, self._masked]))
        positions = (rows[:, None] * B + np.arange(B)).reshape(-1)
        servable = ~np.isin(positions // B, self._masked)
        self._tree.update(positions, np.where(servable, self._priority[positions], 0.0))

    def sample(self) -> TensorDict:
        """``batch_size`` samples drawn with probability ``P(i) = p_i / sum p``, with ``index``
        and ``weight``: ``[N]``, or ``[N, sequence_length]`` windows.

        Raises:
            RuntimeError: before a window fits in what the buffer holds.
        """
        tree, storage = self._tree, self._storage
        if tree is None or storage is None or tree.total <= 0:
            raise RuntimeError(f"prioritized replay holds no sample of {self.sequence_length} steps yet")
        position = tree.sample(self.batch_size, self._rng)  # [N]
        # w_i / max_j w_j = (N P(i))^-beta / (N P_min)^-beta = (p_min / p_i)^beta
        weight = torch.from_numpy((tree.min / tree.priorities(position)) ** self.beta_now).float()
        first = torch.from_numpy(position)
        batch = self.gather(first)
        L = self.sequence_length
        if L == 1:
            index = first
        else:
            length, B = storage.batch_size
            index = ((first // B).unsqueeze(1) + torch.arange(L)) % length * B + (first % B).unsqueeze(1)
            weight = weight.unsqueeze(1).expand(-1, L)
        device = self._sample_device or self._flat[0].device  # the samples' device
        batch.set(keys.SAMPLE_INDEX, index.to(device))
        batch.set(keys.IMPORTANCE_WEIGHT, weight.to(device))
        return batch

    def update_priorities(self, index: Tensor, td_error: Tensor) -> None:
        """``p_i = (|td_error_i| + eps)^alpha`` for each sample's first step; where a position
        was sampled twice, the later sample's priority is kept.

        Args:
            index: ``[N]`` (or ``[N, L]``) int64 storage positions, as sampled.
            td_error: ``[N]`` TD errors (their magnitude is used), any float dtype and device.

        Raises:
            ValueError: for a td_error whose length is not the batch's, or a non-finite one.
        """
        assert self._tree is not None, "update_priorities() before extend()"
        position = (index[:, 0] if index.dim() == 2 else index).cpu().numpy()
        error = td_error.detach().reshape(-1).to(device="cpu", dtype=torch.float64).numpy()
        if error.shape != position.shape:
            raise ValueError(f"td_error has {error.size} values for {position.size} samples")
        if not np.isfinite(error).all():
            raise ValueError("td_error holds a NaN or inf: no priority can be set from it")
        priority = (np.abs(error) + self.priority_eps) ** self.alpha
        self._priority[position] = priority
        self.max_priority = max(self.max_priority, float(priority.max()))
        assert self._storage is not None
        servable = ~np.isin(position // self._storage.batch_size[1], self._masked)  # all, unless extended since
        self._tree.update(position, np.where(servable, priority, 0.0))

    def state_dict(self, with_data: bool = False) -> dict[str, Any]:
        """:meth:`ReplayBuffer.state_dict` with the sampling generator's state and, with the
        transitions, their priorities and the largest one (beta follows ``frames``)."""
        state = super().state_dict(with_data)
        state["rng"] = _generator_state(self._rng)
        if with_data and self._tree is not None:
            state["priorities"] = torch.from_numpy(self._priority.copy())
            state["max_priority"] = self.max_priority
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; without transitions the priorities start afresh too."""
        super().load_state_dict(state)
        self._rng.bit_generator.state = {
            "bit_generator": self._rng.bit_generator.state["bit_generator"],
            "state": {key: int(value) for key, value in state["rng"]["state"].items()},
            "has_uint32": int(state["rng"]["has_uint32"]),
            "uinteger": int(state["rng"]["uinteger"]),
        }
        self._tree, self._priority, self._masked, self.max_priority = None, np.zeros(0), np.zeros(0, np.int64), 1.0
        if self._storage is None or "priorities" not in state:
            return
        length, B = self._storage.batch_size
        self._priority = state["priorities"].numpy().astype(np.float64)
        if self._priority.shape != (length * B,):
            raise ValueError(f"{self._priority.size} saved priorities for a storage of {length * B} positions")
        self.max_priority = float(state["max_priority"])
        self._tree = SumTree(length * B)
        self._masked = self._unservable_rows()
        servable = ~np.isin(np.arange(length * B) // B, self._masked)
        self._tree.set_all(np.where(servable, self._priority, 0.0))


def check_prioritized(*, alpha: float, beta: float, beta_frames: int, priority_eps: float) -> None:
    """Raise a :class:`ConfigError` naming ``buffer.<key>``, its value and what is valid, for
    the first invalid prioritized-replay setting."""
    checks = (
        ("alpha", alpha, lambda v: v >= 0, "a number >= 0 (0 samples uniformly; the paper's 0.6)"),
        ("beta", beta, lambda v: 0 <= v <= 1, "a number in [0, 1] (the paper's 0.4, annealed to 1)"),
        ("beta_frames", beta_frames, lambda v: v >= 1 and float(v).is_integer(), "a whole number of frames >= 1"),
        ("priority_eps", priority_eps, lambda v: v > 0, "a number > 0 (e.g. 1e-6)"),
    )
    for key, value, valid, what in checks:
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not number or not valid(value):
            raise ConfigError(f"buffer.{key}={value!r}: must be {what}")


def _generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """A PCG64 generator's state as plain data (its 128-bit integers as strings)."""
    state = rng.bit_generator.state
    return {
        "state": {key: str(value) for key, value in state["state"].items()},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }
