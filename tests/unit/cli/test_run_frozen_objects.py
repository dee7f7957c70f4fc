"""A training run exempts the objects alive at its start from the cyclic garbage collector,
and gives them back to it when the run ends, also when the run fails."""

from __future__ import annotations

import gc

import pytest

from rlplat.cli.run import long_lived_objects_frozen


def test_objects_alive_at_the_start_are_frozen_during_the_run_and_given_back_after():
    gc.unfreeze()
    with long_lived_objects_frozen():
        assert gc.get_freeze_count() > 1000  # the modules, at least
    assert gc.get_freeze_count() == 0


def test_they_are_given_back_when_the_run_fails():
    gc.unfreeze()
    with pytest.raises(RuntimeError), long_lived_objects_frozen():
        raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0
