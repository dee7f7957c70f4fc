"""The Tracker's buffer and backoff, against a real sqlite store behind a transport that fails
on demand as an unreachable tracking server does (tests/integration/test_tracking_server.py
does it with a real server)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException, RestException

from rlplat.registry import ConfigError
from rlplat.tags import RUN_DIR_TAG, WAITED_TAG
from rlplat.tracking import TrackerCallback
from rlplat.tracking import store as tracking
from rlplat.tracking.pending import PENDING_FILE, load_pending
from rlplat.tracking.records import read_run_file
from rlplat.tracking.store import Backoff, Tracker, http_limits, unreachable
from rlplat.tracking.sync import record_kept, wait_for_server


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the module (creating one takes seconds); each test has its own run."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


class HungServer:
    """A port where connections are made (the kernel completes them) and never answered: a
    hung server. Nothing accepts them until :meth:`connections` counts them."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.uri = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []

    def connections(self) -> int:
        """How many connections were made to it so far (one per request sent, retries included)."""
        while True:
            try:
                self.accepted.append(self.listener.accept()[0])
            except BlockingIOError:
                return len(self.accepted)

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def silent_server() -> Iterator[HungServer]:
    """A hung server (connections made, never answered)."""
    server = HungServer()
    yield server
    server.close()


@pytest.fixture
def request_timeouts(silent_server: HungServer, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The timeout of each HTTP request MLflow sends to the hung server (what requests is
    given), in order."""
    seen: list[Any] = []
    request = requests.Session.request

    def recorded(self: requests.Session, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if url.startswith(silent_server.uri):
            seen.append(kwargs.get("timeout"))
        return request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", recorded)
    return seen


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FlakyClient:
    """An MlflowClient that fails like an unreachable server while ``down``, counting requests."""

    def __init__(self, client: MlflowClient) -> None:
        self.client, self.down, self.requests = client, False, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            if self.down:
                try:
                    try:
                        raise ConnectionRefusedError(111, "Connection refused")
                    except ConnectionRefusedError as refused:
                        raise requests.ConnectionError("[Errno 111] Connection refused") from refused
                except requests.ConnectionError as error:
                    raise MlflowException("API request to http://127.0.0.1:1/api failed") from error
            return method(*args, **kwargs)

        return call


@pytest.fixture
def flaky(store: str, tmp_path: Path) -> tuple[Tracker, FlakyClient, FakeClock, list[str]]:
    lines: list[str] = []
    tracker = Tracker(store, "buffer", None, run_dir=tmp_path / "run", say=lines.append)
    tracker.start("run", {"seed": "0"}, {"algo": "ppo"})
    client, clock = FlakyClient(tracker.client), FakeClock()
    tracker.client, tracker.backoff = client, Backoff(clock=clock)
    return tracker, client, clock, lines


def history(store: str, run_id: str, key: str) -> list[tuple[int, int, float]]:
    metrics = MlflowClient(tracking_uri=store).get_metric_history(run_id, key)
    return sorted((m.step, m.timestamp, m.value) for m in metrics)


def test_metrics_are_buffered_while_down_and_written_in_order_with_their_steps(flaky, store):
    tracker, client, clock, lines = flaky
    client.down = True
    tracker.log_metrics({"time/fps": 1.0, "loss/pg": 0.5}, step=256)
    assert lines == ["warning: tracking server unreachable; 2 metric values buffered, retrying"]
    requests_when_down = client.requests
    for step in (512, 768):  # the retry is not due yet: no request, no wait
        tracker.log_metrics({"time/fps": step / 256, "loss/pg": 0.5}, step=step)
    assert client.requests == requests_when_down and len(lines) == 1

    clock.now = 1.0  # first retry due, still down: backoff doubles
    tracker.log_metrics({"time/fps": 4.0, "loss/pg": 0.5}, step=1024)
    assert client.requests == requests_when_down + 1 and tracker.backoff.wait_s() == 2.0 and len(lines) == 1

    client.down = False
    clock.now = 2.5  # not due before 3.0
    tracker.log_metrics({"time/fps": 5.0, "loss/pg": 0.5}, step=1280)
    assert history(store, tracker.run_id, "time/fps") == []
    clock.now = 3.0
    tracker.log_metrics({"time/fps": 6.0, "loss/pg": 0.5}, step=1536)
    assert lines[1:] == ["tracking server reachable again; 12 buffered metric values written"]
    written = history(store, tracker.run_id, "time/fps")
    assert [(step, value) for step, _, value in written] == [(256 * i, float(i)) for i in range(1, 7)]
    tracker.end("FINISHED")
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "FINISHED"


def test_timestamps_are_those_of_the_log_calls(flaky, store, monkeypatch):
    tracker, client, clock, _ = flaky
    client.down = True
    for second, step in ((100, 256), (200, 512)):
        monkeypatch.setattr(tracking.time, "time", lambda second=second: float(second))
        tracker.log_metrics({"time/fps": 1.0}, step=step)
    client.down, clock.now = False, 10.0
    tracker.end("FINISHED")
    assert [(s, t) for s, t, _ in history(store, tracker.run_id, "time/fps")] == [(256, 100_000), (512, 200_000)]


def test_artifacts_and_tags_that_failed_are_written_at_the_end(flaky, store, tmp_path):
    tracker, client, _, lines = flaky
    checkpoint = tmp_path / "final.pt"
    checkpoint.write_bytes(b"weights")
    client.down = True
    tracker.log_artifact(checkpoint, "checkpoints")
    tracker.set_tags({"rlplat.pruned": "true"})
    assert lines == ["warning: tracking server unreachable; 1 artifact buffered, retrying"]
    assert tracker.outbox.describe() == "2 tags and 1 artifact"  # the pruned tag and rlplat.waited_for_server
    client.down = False
    tracker.end("KILLED")
    reader = MlflowClient(tracking_uri=store)
    run = reader.get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.tags["rlplat.pruned"] == "true"
    assert [a.path for a in reader.list_artifacts(tracker.run_id, "checkpoints")] == ["checkpoints/final.pt"]


def test_end_gives_up_after_its_time_and_says_what_was_lost_without_a_run_directory(flaky, store, tmp_path):
    tracker, client, _, lines = flaky
    tracker.backoff, tracker.end_flush_s = Backoff(first_s=0.05), 0.3
    client.down = True
    tracker.log_metrics({"time/fps": 1.0, "loss/pg": 0.5}, step=256)
    assert not tracker.run_dir.exists()  # nowhere to keep them
    tracker.end("FINISHED")  # does not raise
    assert lines[-1] == (
        "warning: tracking server unreachable for 0.3 s at the end of the run: 2 metric values and 1 tag could not be "
        "recorded; "
        f"the run could not be marked FINISHED (it shows RUNNING); run {tracker.run_id} in {store}; "
        f"the run's directory: {tmp_path / 'run'}"
    )
    tracker.end("FINISHED")  # a second end does nothing
    assert len(lines) == 2


def test_end_never_raises_when_a_write_is_rejected(flaky, store):
    tracker, client, _, lines = flaky

    def rejected(*args: Any, **kwargs: Any) -> None:
        raise RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad metric"})

    tracker.outbox.metrics.append(tracking.Metric("x", 1.0, 0, 1))
    client.client.log_batch = rejected
    tracker.end("FAILED")
    assert "the tracking store refused a write (INVALID_PARAMETER_VALUE: bad metric)" in lines[-1]
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "FAILED"


def test_reopen_continues_a_run_and_the_callback_skips_logged_steps(store):
    first = Tracker(store, "resume", None)
    run_id = first.start("run", {"seed": "0", "algo": "ppo"}, {})
    callback = TrackerCallback(first)
    for frames in (256, 512, 768):
        callback.on_log({"time/fps": frames / 256}, frames)
    first.end("FAILED")  # e.g. a crash after a checkpoint at 512 frames

    second = Tracker(store, "resume", None)
    second.reopen(run_id)
    reader = MlflowClient(tracking_uri=store)
    assert reader.get_run(run_id).info.status == "RUNNING"
    assert second.last_step("time/fps") == 768 and second.last_step("eval/return_mean") is None
    callback = TrackerCallback(second, after_step=second.last_step("time/fps"))
    for frames in (768, 1024):  # resumed from the 512-frame checkpoint: 768 again, then on
        callback.on_log({"time/fps": frames / 256 + 10}, frames)
    second.end("FINISHED")
    run = reader.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"seed": "0", "algo": "ppo"}
    assert [(s, v) for s, _, v in history(store, run_id, "time/fps")] == [
        (256, 1.0),
        (512, 2.0),
        (768, 3.0),
        (1024, 14.0),
    ]


def test_reopen_of_an_unknown_run_is_a_config_error(store):
    with pytest.raises(ConfigError, match=r"no run 'abc' in tracking\.uri="):
        Tracker(store, "resume", None).reopen("abc")


def test_backoff_doubles_up_to_its_maximum():
    clock = FakeClock()
    backoff = Backoff(first_s=1.0, max_s=8.0, clock=clock)
    waits = []
    for _ in range(6):
        backoff.failed()
        waits.append(backoff.wait_s())
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0] and not backoff.due()
    backoff.succeeded()
    assert backoff.due() and backoff.wait_s() == 0.0


def test_http_limits_are_restored_after_the_block(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")  # the user's own setting
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with http_limits(retries=0, timeout_s=2):
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "2"
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300" and "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


@pytest.mark.parametrize(("status", "expected"), [(503, True), (429, True), (404, False), (403, False)])
def test_http_errors_are_transient_only_for_retryable_statuses(status, expected):
    response = requests.Response()
    response.status_code = status
    assert unreachable(requests.HTTPError(response=response)) is expected


def test_a_rejected_request_is_not_unreachable():
    assert not unreachable(RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad"}))
    assert unreachable(requests.ConnectTimeout("timed out"))


def test_a_server_that_does_not_answer_is_a_config_error_after_one_timeout(silent_server, request_timeouts):
    with pytest.raises(ConfigError, match=r"no MLflow tracking server answers there \(no answer within the timeout\)"):
        Tracker(silent_server.uri, "hung", None)
    # one request, waiting PROBE_TIMEOUT_S: not tried again, nor retried by urllib3
    assert request_timeouts == [tracking.PROBE_TIMEOUT_S] and silent_server.connections() == 1


def test_a_server_that_stops_answering_holds_a_log_step_for_the_write_timeout_at_most(
    store, silent_server, request_timeouts
):
    lines: list[str] = []
    tracker = Tracker(store, "hung", None, say=lines.append)
    tracker.start("run", {}, {})
    tracker.client = MlflowClient(tracking_uri=silent_server.uri)  # the real HTTP transport, to a hung server
    tracker.log_metrics({"time/fps": 1.0}, step=256)
    # one request, waiting WRITE_TIMEOUT_S at most, not retried
    assert request_timeouts == [tracking.WRITE_TIMEOUT_S] and silent_server.connections() == 1
    assert lines == ["warning: tracking server unreachable; 1 metric value buffered, retrying"]
    tracker.log_metrics({"time/fps": 2.0}, step=512)  # the retry is not due: no request at all
    assert request_timeouts == [tracking.WRITE_TIMEOUT_S] and silent_server.connections() == 1
    assert len(tracker.outbox.metrics) == 2


def test_a_run_ended_while_down_is_kept_in_its_directory_and_recorded_later_at_its_steps_and_times(
    flaky, store, tmp_path, monkeypatch
):
    tracker, client, _, lines = flaky
    tracker.run_dir.mkdir()
    checkpoint = tracker.run_dir / "final.pt"
    checkpoint.write_bytes(b"weights")
    tracker.backoff, tracker.end_flush_s = Backoff(first_s=0.05), 0.2
    client.down = True
    for second, step in ((100, 256), (200, 512)):
        monkeypatch.setattr(tracking.time, "time", lambda second=second: float(second))
        tracker.log_metrics({"time/fps": float(step)}, step=step)
    tracker.log_artifact(checkpoint, "checkpoints")
    assert tracker.end("FINISHED", end_time_ms=300_000) is False
    kept = tracker.run_dir / PENDING_FILE
    assert lines[-1] == (
        f"warning: tracking server unreachable at the end of the run: 2 metric values, 1 tag and 1 artifact, the end "
        f"of run {tracker.run_id} kept in {kept}; record them with: rlplat-sync {tracker.run_dir}"
    )
    said: list[str] = []
    assert record_kept(kept, said.append) == tracker.run_id  # the server answers again
    assert not kept.exists()
    run = MlflowClient(tracking_uri=store).get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.end_time == 300_000
    assert run.data.tags[WAITED_TAG] == "true"
    assert [(s, t) for s, t, _ in history(store, tracker.run_id, "time/fps")] == [(256, 100_000), (512, 200_000)]
    assert [a.path for a in MlflowClient(tracking_uri=store).list_artifacts(tracker.run_id, "checkpoints")] == [
        "checkpoints/final.pt"
    ]


def test_a_sweep_jobs_run_begun_while_down_is_created_when_the_server_answers(store, tmp_path):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    lines: list[str] = []
    tracker = Tracker(store, "deferred", None, say=lines.append, wait_for_server=True)
    client, clock = FlakyClient(tracker.client), FakeClock()
    tracker.client, tracker.backoff = client, Backoff(clock=clock)
    client.down = True
    tags = {"algo": "ppo", RUN_DIR_TAG: str(run_dir)}
    assert tracker.begin("job-0", {"seed": "0"}, tags, start_time=50.0) is None
    assert tracker.started() is None and lines[0].startswith(
        f"warning: tracking server unreachable at {store} (connection refused); training goes on, and the run is "
        "created when it answers"
    )
    tracker.log_metrics({"time/fps": 1.0}, step=256, timestamp_ms=60_000)
    assert read_run_file(run_dir) == {} and len(lines) == 1
    client.down, clock.now = False, 5.0
    tracker.log_metrics({"time/fps": 2.0}, step=512, timestamp_ms=70_000)
    assert tracker.run_id is not None and tracker.started() == tracker.run_id
    assert (
        lines[1] == f"tracking server reachable again; run {tracker.run_id} created, 2 buffered metric values written"
    )
    assert read_run_file(run_dir)["run_id"] == tracker.run_id
    assert tracker.end("FINISHED")
    run = MlflowClient(tracking_uri=store).get_run(tracker.run_id)
    assert run.info.start_time == 50_000 and run.info.run_name == "job-0" and run.info.status == "FINISHED"
    assert run.data.params == {"seed": "0"} and run.data.tags[WAITED_TAG] == "true" and run.data.tags["algo"] == "ppo"
    assert [(s, t) for s, t, _ in history(store, tracker.run_id, "time/fps")] == [(256, 60_000), (512, 70_000)]


def test_a_run_never_created_is_kept_with_its_creation_and_created_once(store, tmp_path):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    lines: list[str] = []
    tracker = Tracker(store, "never", None, say=lines.append, wait_for_server=True, end_flush_s=0.1)
    client = FlakyClient(tracker.client)
    tracker.client, tracker.backoff, client.down = client, Backoff(first_s=0.05), True
    tracker.begin("job-1", {"seed": "1"}, {RUN_DIR_TAG: str(run_dir)}, start_time=10.0)
    tracker.log_metrics({"time/fps": 1.0}, step=256, timestamp_ms=11_000)
    assert tracker.end("KILLED", end_time_ms=12_000) is False
    assert lines[-1].endswith(
        f"1 metric value, 1 param and 1 tag, the run's creation and end kept in {run_dir / PENDING_FILE}; the sweep "
        f"records them at its end, or rlplat-sync {run_dir}"
    )
    kept = load_pending(run_dir / PENDING_FILE)
    assert kept.run_id is None and kept.create is not None and kept.create.start_time == 10_000
    # the server answers the creation, then goes away again: the run is not created twice
    original = Tracker.end

    def end_while_down(self: Tracker, status: str, end_time_ms: int | None = None) -> bool:
        self.client, self.end_flush_s, self.backoff = FlakyClient(self.client), 0.1, Backoff(first_s=0.05)
        self.client.down = True
        return original(self, status, end_time_ms)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Tracker, "end", end_while_down)
        with pytest.raises(ConfigError, match="it is kept"):
            record_kept(run_dir / PENDING_FILE, lines.append)
    created = read_run_file(run_dir)["run_id"]
    assert load_pending(run_dir / PENDING_FILE).run_id == created
    assert record_kept(run_dir / PENDING_FILE, lines.append) == created
    reader = MlflowClient(tracking_uri=store)
    [run] = reader.search_runs([reader.get_experiment_by_name("never").experiment_id])
    assert run.info.run_id == created and run.info.status == "KILLED" and run.info.end_time == 12_000
    assert run.data.params == {"seed": "1"} and history(store, created, "time/fps") == [(256, 11_000, 1.0)]


def test_a_sweep_end_waits_for_the_server_until_it_answers_or_gives_up(store):
    said: list[str] = []
    assert wait_for_server(store, 0.0, said.append) is None and said == []  # not a server: answers at once
    nothing = "http://127.0.0.1:9"  # the discard port: refused
    clock = FakeClock()
    assert wait_for_server(nothing, 0.5, said.append, clock=clock) == "connection refused"
    assert said == ["connection refused"]
    assert wait_for_server(nothing, 60, said.append, give_up=lambda: True) == "connection refused"
