"""rlplat-train starts the MLflow child before Hydra composes the config; the run takes it,
or it is stopped at once (tracking off), having written nothing."""

from __future__ import annotations

import sys
import types

import pytest

from rlplat.cli import train
from rlplat.hydra_ext import compose_config
from rlplat.tracking.process import TrackerProcess


def _cfg(tmp_path, enabled: bool):
    return compose_config([f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"tracking.enabled={enabled}"])


def test_a_run_that_tracks_takes_the_spare_child(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)  # as in rlplat-train's process
    spare = TrackerProcess.spare()
    tracker, _ = train.start_tracker(_cfg(tmp_path, enabled=True), spare)
    assert tracker is spare
    run_id = tracker.start("a-run", {}, {})
    tracker.end("FINISHED")
    assert run_id and tracker._process.poll() is not None


@pytest.mark.parametrize("mlflow_loaded", [False, True])
def test_a_run_that_does_not_track_stops_the_spare_child_at_once(tmp_path, monkeypatch, mlflow_loaded):
    """Tracking off, or a process with MLflow loaded already (it records in-process)."""
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)
    if mlflow_loaded:
        monkeypatch.setitem(sys.modules, "mlflow", types.ModuleType("mlflow"))
    spare = TrackerProcess.spare()
    assert train.start_tracker(_cfg(tmp_path, enabled=mlflow_loaded), spare)[0] is None
    assert spare._process.poll() is not None
    assert not (tmp_path / "mlflow.db").exists()
