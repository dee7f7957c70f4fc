"""The tracker in a child process: the same records as in-process, errors where they belong,
and a run that never stays RUNNING when its training process dies."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlplat.registry import ConfigError
from rlplat.tracking import TrackerCallback
from rlplat.tracking.process import NICENESS, TrackerProcess, TrackingError
from rlplat.tracking.store import store_lock


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_a_run_recorded_through_the_process_holds_params_metrics_tags_and_artifacts(tmp_path, store):
    tracker = TrackerProcess(store, "exp", str(tmp_path / "artifacts"))
    run_id = tracker.start("a-run", {"loss.gamma": "0.99"}, {"algo": "ppo"})
    callback = TrackerCallback(tracker)
    for frames in (100, 200):
        callback.on_log({"time/fps": frames * 10.0}, frames)
    (tmp_path / "final.pt").write_bytes(b"weights")
    callback.on_checkpoint(tmp_path / "final.pt", best=False)
    tracker.set_tags({"rlplat.signal": "none"})
    tracker.end("FINISHED")
    assert tracker._process.poll() == 0  # the child has exited, and cleanly

    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "a-run"
    assert run.data.params == {"loss.gamma": "0.99"}
    assert run.data.tags["algo"] == "ppo" and run.data.tags["rlplat.signal"] == "none"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "time/fps")] == [(100, 1000.0), (200, 2000.0)]
    assert [a.path for a in client.list_artifacts(run_id, "checkpoints")] == ["checkpoints/final.pt"]
    assert tracker.experiment_id == run.info.experiment_id


def test_the_process_that_records_through_it_never_imports_mlflow(store):
    code = (
        "import sys\n"
        "from rlplat.tracking.process import TrackerProcess\n"
        f"tracker = TrackerProcess({store!r}, 'exp', None)\n"
        "tracker.start('a-run', {'p': '1'}, {})\n"
        "tracker.log_metrics({'x': 1.0}, 1)\n"
        "tracker.end('FINISHED')\n"
        "print(sorted(m for m in ('mlflow', 'sqlalchemy', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert out.stderr == ""  # the child (it shares the parent's stderr) says nothing when all goes well
    [run] = MlflowClient(tracking_uri=store).search_runs(
        [MlflowClient(tracking_uri=store).get_experiment_by_name("exp").experiment_id]
    )
    assert run.info.status == "FINISHED" and run.data.metrics == {"x": 1.0}


def test_a_tracking_server_that_does_not_answer_is_a_config_error_at_start(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    tracker = TrackerProcess(f"http://127.0.0.1:{port}", "exp", None)
    with pytest.raises(ConfigError, match=f"tracking.uri='http://127.0.0.1:{port}': no MLflow tracking server"):
        tracker.start("a-run", {}, {})
    tracker.close()
    assert tracker._process.poll() is not None


def test_a_run_begun_without_waiting_holds_what_was_sent_before_it_existed(store):
    tracker = TrackerProcess(store, "exp", None)
    tracker.begin("a-run", {"p": "1"}, {"algo": "ppo"})  # returns while the child creates the run
    tracker.log_metrics({"time/startup_s": 1.5}, 0)
    with pytest.raises(RuntimeError, match="begun its run already"):
        tracker.begin("again", {}, {})
    run_id = tracker.started()
    assert tracker.started() == run_id and tracker.experiment_id is not None
    tracker.log_metrics({"time/fps": 10.0}, 100)
    tracker.end("FINISHED")
    run = MlflowClient(tracking_uri=store).get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "a-run"
    assert run.data.params == {"p": "1"} and run.data.tags["algo"] == "ppo"
    assert run.data.metrics == {"time/startup_s": 1.5, "time/fps": 10.0}


def test_a_run_begun_at_a_server_that_does_not_answer_fails_when_its_id_is_asked_for():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tracker = TrackerProcess(f"http://127.0.0.1:{port}", "exp", None)
    tracker.begin("a-run", {}, {})  # no error yet: the child is still trying
    for _ in range(3):
        tracker.log_metrics({"x": 1.0}, 1)  # queued behind the run's creation
    with pytest.raises(ConfigError, match="no MLflow tracking server") as first:
        tracker.started()
    assert tracker._process.poll() is not None  # stopped at once, the queued writes dropped
    tracker.set_tags({"rlplat.signal": "SIGINT"})  # nothing to record into: dropped, no error
    tracker.end("FAILED")  # nothing to end, nothing raised
    with pytest.raises(ConfigError) as again:
        tracker.started()
    assert again.value is first.value  # the same error, however often it is asked


def test_a_wait_for_the_run_cut_short_can_be_waited_for_again_and_close_ends_a_run_left_open(store):
    tracker = TrackerProcess(store, "exp", None)
    tracker.begin("a-run", {}, {})
    with pytest.raises(TrackingError, match="did not answer start"):
        tracker._receive("start", 0.0)  # as a Ctrl-C would, before the child answered
    run_id = tracker.started()  # the answer is still there to be read
    tracker.close()  # the parent stops without ending its run: the child ends it FAILED, never RUNNING
    assert MlflowClient(tracking_uri=store).get_run(run_id).info.status == "FAILED"


def test_writes_the_store_rejected_are_reported_at_the_end_which_still_ends_the_run(store, capsys):
    tracker = TrackerProcess(store, "exp", None)
    run_id = tracker.start("a-run", {}, {})
    tracker.set_tags({"k" * 300: "v"})  # refused by MLflow; its error is not read before the end
    tracker.end("FINISHED")
    assert "warning: a write to MLflow failed" in capsys.readouterr().err
    assert MlflowClient(tracking_uri=store).get_run(run_id).info.status == "FINISHED"


def test_a_write_the_store_rejects_is_raised_at_the_next_call(tmp_path, store):
    tracker = TrackerProcess(store, "exp", None)
    tracker.start("a-run", {}, {})
    tracker.set_tags({"k" * 300: "v"})  # MLflow refuses tag keys over 250 characters
    with pytest.raises(TrackingError, match="MlflowException"):
        tracker.last_step("x")  # the first call after it; a write sent without waiting may be it too
    tracker.end("FAILED")


def test_a_training_process_that_dies_leaves_its_run_failed_not_running(store):
    tracker = TrackerProcess(store, "exp", None)
    run_id = tracker.start("a-run", {}, {})
    tracker.log_metrics({"x": 1.0}, 1)
    tracker._connection.close()  # as when the parent is killed: the child reads end-of-file
    assert tracker._process.wait(timeout=60) == 0
    run = MlflowClient(tracking_uri=store).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.metrics == {"x": 1.0}  # what was sent before was written


def test_a_spare_child_records_once_given_its_store_and_a_discarded_one_writes_nothing(tmp_path, store):
    spare = TrackerProcess.spare()  # importing MLflow before the store is known
    spare.open(store, "exp", None)
    with pytest.raises(RuntimeError, match="records to"):
        spare.open(store, "other", None)
    run_id = spare.start("a-run", {"p": "1"}, {})
    spare.end("FINISHED")
    assert MlflowClient(tracking_uri=store).get_run(run_id).info.status == "FINISHED"

    other = tmp_path / "other.db"
    unused = TrackerProcess.spare()
    unused.discard()  # at once, whatever the child was doing
    assert unused._process.poll() is not None and not other.exists()
    opened = TrackerProcess.spare()
    opened.open(f"sqlite:///{other}", "exp", None)
    opened.close()  # opened, never started: nothing written either
    assert opened._process.poll() is not None and not other.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the child's priority from Linux /proc")
def test_the_child_runs_at_a_lower_scheduling_priority_than_its_parent():
    """So that on a machine with few cores MLflow's import and the store's writes yield to
    the training process."""
    tracker = TrackerProcess.spare()
    try:
        expected = min(os.nice(0) + NICENESS, 19)
        deadline = time.monotonic() + 30.0
        while _niceness(tracker._process.pid) != expected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _niceness(tracker._process.pid) == expected
        assert os.nice(0) < expected  # the parent's own is unchanged
    finally:
        tracker.discard()


def _niceness(pid: int) -> int:
    """The nice value of a process (field 19 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])


def test_what_a_parent_killed_while_its_run_was_created_had_sent_is_recorded(store):
    """The child creates the run (a new store: about a second) after the parent died; the
    metrics the parent had sent meanwhile are recorded before the run ends FAILED."""
    code = (
        "import os\n"
        "from rlplat.tracking.process import TrackerProcess\n"
        f"tracker = TrackerProcess({store!r}, 'exp', None)\n"
        "tracker.begin('a-run', {}, {})\n"
        "tracker.log_metrics({'x': 1.0}, 1)\n"
        "tracker.log_metrics({'x': 2.0}, 2)\n"
        "os._exit(9)\n"  # as SIGKILL: no reply waited for, nothing ended
    )
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    deadline = time.monotonic() + 120
    while True:
        with store_lock(store):
            client = MlflowClient(tracking_uri=store)
        experiment = client.get_experiment_by_name("exp")
        runs = [] if experiment is None else client.search_runs([experiment.experiment_id])
        if runs and runs[0].info.status != "RUNNING":
            break
        assert time.monotonic() < deadline, runs
        time.sleep(0.1)
    [run] = runs
    assert run.info.status == "FAILED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "x")] == [(1, 1.0), (2, 2.0)]
