"""The sum-tree of prioritized replay against brute-force sums, minima and prefix searches."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.buffers.sum_tree import SumTree


@pytest.mark.parametrize("capacity", [1, 2, 7, 64, 1000])
def test_random_batched_updates_with_duplicates_match_a_brute_force_reference(capacity):
    rng = np.random.default_rng(capacity)
    tree, reference = SumTree(capacity), np.zeros(capacity)
    for _ in range(50):
        positions = rng.integers(0, capacity, size=int(rng.integers(1, 40)))  # duplicates at every capacity
        priorities = rng.random(positions.size) * rng.choice([0.0, 1.0, 1e3], size=positions.size)
        tree.update(positions, priorities)
        for position, priority in zip(positions, priorities):  # one at a time: the last one wins
            reference[position] = priority
        np.testing.assert_array_equal(tree.priorities(), reference)
        assert tree.total == pytest.approx(reference.sum(), rel=1e-12)
        positive = reference[reference > 0]
        assert tree.min == (positive.min() if positive.size else np.inf)
        if reference.sum() > 0:  # each mass falls in the interval [prefix, prefix + p) of its position
            mass = rng.random(64) * tree.total
            expected = np.searchsorted(np.cumsum(reference), mass, side="right")
            found = tree.find(mass)
            assert (reference[found] > 0).all()
            np.testing.assert_array_equal(found, np.minimum(expected, np.flatnonzero(reference)[-1]))


def test_set_all_builds_the_tree_that_updates_build():
    rng = np.random.default_rng(0)
    values = rng.random(300) * (rng.random(300) > 0.3)
    one, two = SumTree(300), SumTree(300)
    one.set_all(values)
    two.update(np.arange(300), values)
    assert one.total == two.total and one.min == two.min  # the same sums, added in the same order
    mass = rng.random(100) * one.total
    np.testing.assert_array_equal(one.find(mass), two.find(mass))


def test_stratified_samples_draw_one_position_per_slice_and_never_a_zero_priority():
    tree = SumTree(10)
    tree.update(np.arange(10), np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1], dtype=float))
    positions = tree.sample(5, np.random.default_rng(0))
    np.testing.assert_array_equal(positions, [1, 3, 5, 7, 9])  # 5 equal slices, one positive position each
    drawn = np.concatenate([tree.sample(64, np.random.default_rng(seed)) for seed in range(20)])
    assert set(drawn.tolist()) == {1, 3, 5, 7, 9}


def test_mass_at_the_very_end_lands_on_the_last_positive_position():
    tree = SumTree(8)
    tree.update(np.array([2, 5]), np.array([0.1, 0.2]))  # positions 6 and 7 hold 0
    np.testing.assert_array_equal(tree.find(np.array([np.nextafter(tree.total, 0), tree.total])), [5, 5])


def test_bad_input_is_refused():
    tree = SumTree(4)
    with pytest.raises(ValueError, match=r"positions must be in \[0, 4\)"):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="all 0"):
        tree.sample(3, np.random.default_rng(0))
