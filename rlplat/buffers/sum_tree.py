"""A sum-tree (and min-tree) over numpy arrays, for proportional prioritized replay.

Schaul et al. 2016, "Prioritized Experience Replay", appendix B.2.1: leaf ``i`` holds the
priority ``p_i`` of storage position ``i``, each inner node the sum of its two children, so
that the root holds ``sum_i p_i`` and a draw ``u`` in ``[0, sum)`` descends to the leaf whose
prefix sum interval ``[p_0 + ... + p_{i-1}, ... + p_i)`` holds it, in one step per level. A
second tree holds minima instead of sums: the smallest priority, which the importance
weights' normalisation needs.

Every operation works on a batch at once: one numpy operation per tree level over all its
positions (no Python loop per item).
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of ``capacity`` positions, with their sum and their minimum.

    Leaves start at 0 (never drawn); positions with priority 0 are left out of the minimum.

    Args:
        capacity: Positions (leaves), at least 1.

    Attributes:
        capacity: Positions.

    Raises:
        ValueError: for a capacity below 1.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a sum-tree needs at least 1 position, not {capacity}")
        self.capacity = capacity
        self._depth = max(1, int(capacity - 1).bit_length())  # levels below the root
        self._leaves = 1 << self._depth  # first leaf's node; node n's children are 2n and 2n + 1
        self._sum = np.zeros(2 * self._leaves, dtype=np.float64)
        self._min = np.full(2 * self._leaves, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of every priority."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest positive priority (``inf`` when every priority is 0)."""
        return float(self._min[1])

    def priorities(self, positions: np.ndarray | None = None) -> np.ndarray:
        """Priorities (float64) of ``positions`` (int, any shape), or of every position (``[capacity]``, a copy)."""
        if positions is None:
            return self._sum[self._leaves : self._leaves + self.capacity].copy()
        return self._sum[self._leaves + np.asarray(positions, dtype=np.int64)]

    def update(self, positions: np.ndarray, priorities: np.ndarray | float) -> None:
        """Set the priorities of ``positions``; where a position occurs more than once, its
        last priority is kept. Then every ancestor is recomputed from its children, level by
        level (so sums never drift from the leaves').

        Args:
            positions: ``[M]`` int, in ``[0, capacity)``.
            priorities: ``[M]`` (or one value for all), finite and >= 0.

        Raises:
            ValueError: for a position out of range, or a negative or non-finite priority.
        """
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        values = np.broadcast_to(np.asarray(priorities, dtype=np.float64), positions.shape)
        if positions.size == 0:
            return
        if positions.min() < 0 or positions.max() >= self.capacity:
            low, high = positions.min(), positions.max()
            raise ValueError(f"sum-tree positions must be in [0, {self.capacity}), got {low}..{high}")
        if not np.isfinite(values).all() or values.min() < 0:
            raise ValueError("sum-tree priorities must be finite and >= 0")
        # the last occurrence of each position: the first of the reversed array
        positions, first = np.unique(positions[::-1], return_index=True)
        values = values[::-1][first]
        nodes = positions + self._leaves
        self._sum[nodes] = values
        self._min[nodes] = np.where(values > 0, values, np.inf)
        for _ in range(self._depth):  # a parent met twice gets the same value twice
            nodes = nodes >> 1
            left = nodes << 1
            self._sum[nodes] = self._sum[left] + self._sum[left + 1]
            self._min[nodes] = np.minimum(self._min[left], self._min[left + 1])

    def set_all(self, priorities: np.ndarray) -> None:
        """Set every leaf from ``[capacity]`` priorities (finite, >= 0) and rebuild both trees.

        Raises:
            ValueError: for a wrong length, or a negative or non-finite priority.
        """
        values = np.asarray(priorities, dtype=np.float64)
        if values.shape != (self.capacity,):
            raise ValueError(f"expected {self.capacity} priorities, got an array of shape {values.shape}")
        if not np.isfinite(values).all() or (values < 0).any():
            raise ValueError("sum-tree priorities must be finite and >= 0")
        self._sum[:] = 0.0
        self._min[:] = np.inf
        self._sum[self._leaves : self._leaves + self.capacity] = values
        self._min[self._leaves : self._leaves + self.capacity] = np.where(values > 0, values, np.inf)
        start = self._leaves
        for _ in range(self._depth):  # the same sums, in the same order, as update() computes
            start >>= 1
            left, right = slice(2 * start, 4 * start, 2), slice(2 * start + 1, 4 * start, 2)
            self._sum[start : 2 * start] = self._sum[left] + self._sum[right]
            self._min[start : 2 * start] = np.minimum(self._min[left], self._min[right])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The positions whose prefix-sum intervals hold ``mass`` (``[M]`` in ``[0, total)``),
        all descended at once; never a position of priority 0 (a draw that rounding puts past
        the last positive one lands on that one).

        Returns:
            ``[M]`` int64 positions.
        """
        mass = np.array(mass, dtype=np.float64)  # a copy: reduced in place on the way down
        nodes = np.ones(mass.shape, dtype=np.int64)
        tree = self._sum
        for _ in range(self._depth):
            left = nodes << 1
            left_sum = tree[left]
            right = (mass >= left_sum) & (tree[left + 1] > 0)  # an empty right subtree is never entered
            mass -= np.where(right, left_sum, 0.0)
            nodes = left + right
        return nodes - self._leaves

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` positions drawn with probability ``p_i / total``, stratified: draw ``j`` is
        uniform in the ``j``-th of ``n`` equal slices of ``[0, total)`` (Schaul et al. 2016,
        appendix B.2.1), so each batch covers the whole range of priorities.

        Args:
            n: Draws, at least 1.
            rng: The generator of the uniforms.

        Returns:
            ``[n]`` int64 positions, in ascending order of their slice.

        Raises:
            ValueError: when every priority is 0.
        """
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from a sum-tree whose priorities are all 0")
        mass = (np.arange(n) + rng.random(n)) * (total / n)
        return self.find(np.minimum(mass, np.nextafter(total, 0.0)))
