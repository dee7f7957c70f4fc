"""The run directory's record of its MLflow run, written once the tracker process has
created the run (training starts meanwhile and waits for it only once the run can be
resumed), and a creation that failed reported where it is noticed."""

from __future__ import annotations

import json
import socket
import time

import pytest
from mlflow import MlflowClient

from rlplat.checkpoint import CHECKPOINT_DIR
from rlplat.registry import ConfigError
from rlplat.tracking.process import START_TIMEOUT_S, TrackerProcess
from rlplat.tracking.records import RUN_FILE, RunRecord


def absent_server() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there once closed


def answered(tracker: TrackerProcess) -> None:
    """Wait until the tracker process has answered its run's creation (it imports MLflow first)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not tracker.start_answered():
        assert time.monotonic() < deadline, "the tracker process did not answer"
        time.sleep(0.01)


def test_the_record_names_the_run_at_the_first_log_step_after_its_creation_without_waiting(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerProcess(store, "exp", None)
    tracker.begin("a-run", {}, {})
    record = RunRecord(tracker, tmp_path, store)
    assert not tracker.start_answered()  # the child is still importing MLflow
    record.on_log({"time/fps": 1.0}, 100)  # returns at once: training does not wait for the run
    record.on_checkpoint(tmp_path / "best.pt", best=True)  # nor at an evaluation, with no periodic checkpoint yet
    assert not (tmp_path / RUN_FILE).exists() and not record.written
    answered(tracker)
    record.on_log({"time/fps": 1.0}, 200)
    written = json.loads((tmp_path / RUN_FILE).read_text())
    assert written == {"run_id": tracker.run_id, "tracking_uri": store, "experiment_id": tracker.experiment_id}
    assert record.run_exists(finished=True)
    tracker.end("FINISHED")
    assert MlflowClient(tracking_uri=store).get_run(written["run_id"]).info.status == "FINISHED"


@pytest.mark.parametrize("hook", ["log step", "best.pt", "final.pt"])
def test_once_the_run_can_be_resumed_a_hook_waits_for_the_run_and_writes_the_record(tmp_path, hook):
    """A periodic checkpoint is what a resume reads: the run directory must name its run
    from then on. final.pt (the end) always waits."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerProcess(store, "exp", None)
    tracker.begin("a-run", {}, {})
    record = RunRecord(tracker, tmp_path, store)
    if hook != "final.pt":
        (tmp_path / CHECKPOINT_DIR).mkdir()
        (tmp_path / CHECKPOINT_DIR / "step_1024.pt").write_bytes(b"")  # only its name is read here
    assert not tracker.start_answered()  # the child is still importing MLflow
    if hook == "log step":
        record.on_log({"time/fps": 1.0}, 1024)
    else:
        record.on_checkpoint(tmp_path / hook, best=hook == "best.pt")
    assert json.loads((tmp_path / RUN_FILE).read_text())["run_id"] == tracker.run_id
    tracker.end("FINISHED")


def test_a_run_that_could_not_be_created_is_raised_at_the_first_log_step_after_the_answer(tmp_path, capsys):
    uri = absent_server()
    tracker = TrackerProcess(uri, "exp", None)
    tracker.begin("a-run", {}, {})
    record = RunRecord(tracker, tmp_path, uri)
    answered(tracker)
    with pytest.raises(ConfigError, match="no MLflow tracking server"):
        record.on_log({"time/fps": 1.0}, 100)
    assert not record.run_exists(finished=False)  # the error is on its way up: nothing more
    assert "warning" not in capsys.readouterr().err  # said once, by the error itself
    assert not (tmp_path / RUN_FILE).exists()


def test_a_failed_creation_noticed_only_at_the_end_is_raised_or_reported(tmp_path, capsys):
    uri = absent_server()
    for finished in (True, False):
        tracker = TrackerProcess(uri, "exp", None)
        tracker.begin("a-run", {}, {})
        record = RunRecord(tracker, tmp_path, uri)
        if finished:  # training ended normally: the run's absence is the error
            with pytest.raises(ConfigError, match="no MLflow tracking server"):
                record.run_exists(finished=True)
        else:  # training stopped for another reason, being raised: this one is only reported
            assert not record.run_exists(finished=False)
            assert "warning: the run was not recorded in MLflow" in capsys.readouterr().err
        assert tracker._process.poll() is not None and not (tmp_path / RUN_FILE).exists()
