"""The MLflow store adapter: one run per training job, through ``mlflow.MlflowClient``.

A tracking server that goes away during a run does not stop the training: writes that fail
because it cannot be reached are kept in order and written when it answers again (see
:class:`Tracker`), and what is still unwritten when the run ends is kept in the run
directory (:mod:`rlplat.tracking.pending`) for ``rlplat-sync`` or the sweep's end to
record. One that cannot be reached when a run starts is a config error, except for a
sweep's job (``wait_for_server``): its run is then created when the server answers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3
from filelock import FileLock
from mlflow import MlflowClient
from mlflow.entities import LifecycleStage, Metric, Param, RunStatus, RunTag
from mlflow.environment_variables import (
    MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
    MLFLOW_HTTP_REQUEST_MAX_RETRIES,
    MLFLOW_HTTP_REQUEST_TIMEOUT,
)
from mlflow.exceptions import MlflowException

from rlplat.metrics import DOWNTIME_SECONDS, TRAIN_SECONDS
from rlplat.registry import ConfigError
from rlplat.tags import RUN_DIR_TAG, WAITED_TAG
from rlplat.tracking.pending import PENDING_FILE, KeptRun, PendingRun, save_pending
from rlplat.tracking.records import write_run_file

MAX_PARAMS_PER_BATCH = 100  # MLflow's limit per log_batch call
MAX_TAGS_PER_BATCH = 100  # MLflow's limit per log_batch call
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit per log_batch call

PROBE_ATTEMPTS = 2  # requests to a tracking server when a run opens, before it is declared absent
PROBE_PAUSE_S = 0.5  # seconds between them
PROBE_TIMEOUT_S = 3  # seconds each request may wait for an answer (MLflow takes whole seconds)
WRITE_TIMEOUT_S = 2  # seconds a write during training may wait: the most a log step can be held up
END_TIMEOUT_S = 5  # seconds each write in Tracker.end may wait
END_FLUSH_S = 30.0  # seconds Tracker.end keeps trying to write what is buffered
MAX_BUFFERED = 1_000_000  # metric values kept while the server is unreachable; later ones are dropped
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # HTTP statuses MLflow itself retries
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
"""Tags of the experiments rlplat creates: MLflow 3's UI then shows them as model training,
not in its GenAI view (where training runs would be listed as "Evaluation runs")."""


def store_lock(uri: str) -> contextlib.AbstractContextManager[Any]:
    """A file lock beside an sqlite store, held while a job opens (and maybe creates) it.

    MLflow creates an sqlite store's tables and runs its migrations when a client first
    opens it; jobs of a parallel sweep doing that at once fail on "table already exists".
    Other stores (tracking servers) need no lock.
    """
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{path}.lock", timeout=300)


def warm_up(uri: str) -> None:
    """Open an sqlite store that rlplat already opened once (its file and lock file exist),
    without writing to it: MLflow then keeps the opened store for this process, so that a
    :class:`Tracker` built later starts its run at once. Anything else is left for the
    Tracker (creating a store, reaching a server): this writes nothing and raises nothing.
    """
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if not (path.is_file() and Path(f"{path}.lock").is_file()):
        return
    logging.getLogger("mlflow.store.db").setLevel(logging.WARNING)
    try:
        with store_lock(uri):
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception:  # a store in any other state: the Tracker says what is wrong
        return


@contextlib.contextmanager
def http_limits(*, retries: int, timeout_s: int) -> Iterator[None]:
    """Bound MLflow's HTTP requests made inside the block; the settings are restored after it.

    MLflow reads its documented ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``..._TIMEOUT`` and
    ``..._BACKOFF_FACTOR`` at each request, and by default retries a server that does not
    answer for minutes. The :class:`Tracker` retries on its own schedule instead, so it sets
    them only around its own requests: other MLflow users in the process (a sweep's parent
    run, user code) keep MLflow's defaults, or the user's.

    Args:
        retries: Retries MLflow makes inside one request (0: none; urllib3 logs each retry).
        timeout_s: Seconds to wait for a connection, and then for an answer.
    """
    limits = {
        MLFLOW_HTTP_REQUEST_MAX_RETRIES.name: str(retries),
        MLFLOW_HTTP_REQUEST_TIMEOUT.name: str(timeout_s),
        MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.name: "0",
    }
    saved = {name: os.environ.get(name) for name in limits}
    os.environ.update(limits)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it was raised from or while handling, and so on."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says that the tracking server could not be reached or failed for now
    (connection refused, timeout, HTTP 408/429/5xx), rather than that it rejected a request."""
    for link in _causes(error):
        if isinstance(link, requests.HTTPError) and link.response is not None:
            return link.response.status_code in TRANSIENT_STATUS
        if isinstance(link, requests.RequestException):
            return True
    return False


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` says that a request got no answer in time."""
    for link in _causes(error):
        if isinstance(link, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError subclass, but refused
            return False
        if isinstance(link, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
            return True
    return False


def why(error: BaseException) -> str:
    """A few words on why a request failed: the socket's error when there is one
    (``connection refused``), else the first line of the message."""
    if timed_out(error):
        return "no answer within the timeout"
    for link in _causes(error):
        if isinstance(link, OSError) and link.strerror:
            return link.strerror[0].lower() + link.strerror[1:]
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return lines[0][:200]


def _say_on_stderr(message: str) -> None:
    print(f"rlplat-train: {message}", file=sys.stderr, flush=True)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


@dataclass
class Backoff:
    """When to try again after consecutive failures: ``first_s`` seconds after the first,
    doubling after each further one, at most ``max_s`` apart.

    Attributes:
        first_s: Seconds between the first failure and the next attempt.
        max_s: The longest wait, in seconds.
        clock: Monotonic seconds (a fake one in tests).
        failures: Consecutive failures so far.
    """

    first_s: float = 1.0
    max_s: float = 16.0
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    next_at: float = float("-inf")

    def due(self) -> bool:
        """Whether an attempt may be made now."""
        return self.clock() >= self.next_at

    def wait_s(self) -> float:
        """Seconds until the next attempt is due (0 when it is)."""
        return max(0.0, self.next_at - self.clock())

    def failed(self) -> None:
        """Record a failed attempt: the next one is due after the (doubled) wait."""
        self.next_at = self.clock() + min(self.first_s * 2.0**self.failures, self.max_s)
        self.failures += 1

    def succeeded(self) -> None:
        """Record a successful attempt: the next one is due at once."""
        self.failures, self.next_at = 0, float("-inf")


@dataclass
class Outbox:
    """A run's writes that are waiting to be sent, oldest first.

    Attributes:
        params: Params not yet logged.
        tags: Tags not yet set (the latest value of each).
        metrics: Metric values not yet logged, in the order they were logged, each with its
            own step (frames) and timestamp.
        artifacts: Files or directories not yet uploaded, with their artifact path.
        written: Metric values written so far.
        dropped: Metric values not kept because ``MAX_BUFFERED`` were already waiting.
    """

    params: list[Param] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    artifacts: list[tuple[Path, str | None]] = field(default_factory=list)
    written: int = 0
    dropped: int = 0

    def add_metrics(self, metrics: list[Metric]) -> None:
        """Queue metric values, keeping at most ``MAX_BUFFERED``."""
        room = max(0, MAX_BUFFERED - len(self.metrics))
        self.metrics += metrics[:room]
        self.dropped += len(metrics[room:])

    def add_artifact(self, path: Path, artifact_path: str | None) -> None:
        """Queue an upload, once: the file is read when it is sent."""
        if (path, artifact_path) not in self.artifacts:
            self.artifacts.append((path, artifact_path))

    def kept(self) -> dict[str, Any]:
        """What is waiting, as the fields of a :class:`rlplat.tracking.pending.KeptRun` (plain
        values: it is written as JSON); :meth:`from_kept` reads them back."""
        return {
            "params": {param.key: param.value for param in self.params},
            "tags": dict(self.tags),
            "metrics": [(m.key, m.value, m.timestamp, m.step) for m in self.metrics],
            "artifacts": [(str(path), artifact_path) for path, artifact_path in self.artifacts],
        }

    @classmethod
    def from_kept(cls, kept: KeptRun) -> Outbox:
        """The outbox of a kept run, oldest write first, as :meth:`kept` wrote it."""
        return cls(
            params=[Param(key, value) for key, value in kept.params.items()],
            tags=dict(kept.tags),
            metrics=[Metric(key, value, timestamp, step) for key, value, timestamp, step in kept.metrics],
            artifacts=[(Path(path), artifact_path) for path, artifact_path in kept.artifacts],
        )

    def __len__(self) -> int:
        return len(self.params) + len(self.tags) + len(self.metrics) + len(self.artifacts)

    def describe(self) -> str:
        """What is waiting, in words: ``12 metric values and 1 artifact``."""
        counts = [(len(self.metrics), "metric value"), (len(self.params), "param"), (len(self.tags), "tag")]
        counts.append((len(self.artifacts), "artifact"))
        parts = [_count(n, what) for n, what in counts if n] or [_count(0, "metric value")]
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"

    def send(self, client: MlflowClient, run_id: str) -> None:
        """Write everything into run ``run_id``, oldest first, in MLflow's largest batches.

        What was written leaves the outbox at once, so that after a failure part-way only
        the rest is sent again. A batch sent again after its answer was lost is harmless:
        MLflow keeps one copy of a metric value with the same step and timestamp, and of a
        param with the same value. A file that no longer exists is skipped.

        Raises:
            MlflowException, requests.RequestException: when a request fails.
        """
        while self.params:
            client.log_batch(run_id, params=self.params[:MAX_PARAMS_PER_BATCH])
            del self.params[:MAX_PARAMS_PER_BATCH]
        tags = [RunTag(key, value) for key, value in self.tags.items()]
        for start in range(0, len(tags), MAX_TAGS_PER_BATCH):
            client.log_batch(run_id, tags=tags[start : start + MAX_TAGS_PER_BATCH])
        self.tags.clear()
        while self.metrics:
            batch = self.metrics[:MAX_METRICS_PER_BATCH]
            client.log_batch(run_id, metrics=batch)
            del self.metrics[: len(batch)]
            self.written += len(batch)
        while self.artifacts:
            path, artifact_path = self.artifacts[0]
            if path.is_dir():
                client.log_artifacts(run_id, str(path), artifact_path)
            elif path.exists():
                client.log_artifact(run_id, str(path), artifact_path)
            del self.artifacts[0]


class Tracker:
    """Records one run in MLflow: params, metrics (step = frames), artifacts, tags, status.

    At a tracking server (``http(s)://``), the constructor first checks that one answers:
    a couple of short requests, so that a wrong ``tracking.uri`` is a config error within
    seconds, before any run exists. During the run, every write goes through an
    :class:`Outbox`: a write that fails because the server cannot be reached stays in it,
    in order, and is tried again at a later write once a :class:`Backoff` wait has passed
    (one request of at most ``WRITE_TIMEOUT_S`` seconds per attempt), so that training
    goes on while the server is away. One line says when values start being buffered, and
    one when they were written. :meth:`end` tries for ``end_flush_s`` seconds more, then
    keeps what is left (the run's creation included) in the run directory's
    :data:`rlplat.tracking.pending.PENDING_FILE`, for ``rlplat-sync`` to record. A run whose
    writes waited for the server is tagged ``rlplat.tags.WAITED_TAG``. A write the
    server rejects (a changed param, a deleted run) raises.

    With ``wait_for_server`` (a sweep's job, whose sweep's parent run exists), a server that
    does not answer when the run begins is waited for rather than refused: :meth:`begin`
    keeps the run's creation with the rest of the outbox, one line says so, and the run is
    created (with its start time, then every write in order) when the server answers.

    Args:
        uri: Tracking URI, e.g. ``sqlite:////abs/outputs/mlflow.db`` or ``http://host:5000``.
        experiment: Experiment name, created when missing.
        artifact_location: Directory for a newly created experiment's artifacts.
        run_dir: The run's directory, named when values could not be recorded; by default
            the run's ``RUN_DIR_TAG`` tag.
        say: Shows the user one line (default: on stderr, after ``rlplat-train:``).
        wait_for_server: Wait for a server that does not answer when the run begins,
            instead of raising (see above).
        end_flush_s: Seconds :meth:`end` tries to write what is buffered before keeping it
            in the run directory.

    Raises:
        ConfigError: when no MLflow tracking server answers at an ``http(s)://`` ``uri``
            (unless ``wait_for_server``), or it refuses the requests.
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        artifact_location: str | None,
        *,
        run_dir: Path | None = None,
        say: Callable[[str], None] | None = None,
        wait_for_server: bool = False,
        end_flush_s: float = END_FLUSH_S,
    ) -> None:
        self.uri, self.run_dir = uri, run_dir
        self.experiment, self.artifact_location = experiment, artifact_location
        self.run_id: str | None = None
        self.outbox = Outbox()
        self.backoff = Backoff()
        self.wait_for_server, self.end_flush_s = wait_for_server, end_flush_s
        self.pending: PendingRun | None = None  # a run begun while the server was away, not created yet
        self._say = say or _say_on_stderr
        self._buffering_since: int | None = None  # Outbox.written when buffering started
        self._ended = False
        self._rejected = False  # the store refused a write: what is left is not kept to send again
        logging.getLogger("mlflow.store.db").setLevel(logging.WARNING)  # no "Creating initial tables..." lines
        with store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id: str | None = None
            try:
                self.experiment_id = self._open_experiment(experiment, artifact_location)
            except ConfigError as error:
                if not (wait_for_server and unreachable(error)):
                    raise

    def _open_experiment(self, name: str, artifact_location: str | None) -> str:
        """The experiment's id; at a server, tried :data:`PROBE_ATTEMPTS` times, briefly (once
        when it timed out, so that a server that does not answer costs PROBE_TIMEOUT_S)."""
        if not self.uri.startswith(("http://", "https://")):
            return self._experiment(name, artifact_location)
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            try:
                with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                    return self._experiment(name, artifact_location)
            except MlflowException as error:
                if attempt == PROBE_ATTEMPTS or not unreachable(error) or timed_out(error):
                    raise self._refused(error) from error
            time.sleep(PROBE_PAUSE_S)
        raise AssertionError("not reached")

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        """The experiment's id, created (tagged as a model-training experiment) when missing.

        Raises:
            ConfigError: for an experiment of that name that was deleted (MLflow keeps its
                name taken until it is restored or purged).
        """
        found = self.client.get_experiment_by_name(name)
        if found is not None and found.lifecycle_stage == LifecycleStage.DELETED:
            raise ConfigError(
                f"tracking.experiment={name!r} was deleted from tracking.uri={self.uri!r}: restore it "
                f"(mlflow experiments restore --experiment-id {found.experiment_id}) or give another name"
            )
        if found is not None:
            return found.experiment_id
        location = Path(artifact_location).resolve().as_uri() if artifact_location else None
        try:
            return self.client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS)
        except MlflowException:  # created meanwhile by a concurrent job of the same sweep
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _refused(self, error: BaseException) -> ConfigError:
        """The config error for a server that does not answer, or refuses."""
        if unreachable(error):
            return ConfigError(f"tracking.uri={self.uri!r}: no MLflow tracking server answers there ({why(error)})")
        return ConfigError(f"tracking.uri={self.uri!r}: the tracking store refused the request ({why(error)})")

    def start(
        self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str], start_time: float | None = None
    ) -> str:
        """Create the run with ``tags`` and log ``params``; returns the run id. ``start_time``
        (seconds since the epoch, as ``time.time()``): the run's start, when it began before
        the run is created (a command's start, before its metrics' timestamps); None: now.

        Raises:
            ConfigError: when the tracking server stopped answering since the constructor;
                no run was created.
        """
        if self.experiment_id is None:
            self.experiment_id = self._open_experiment(self.experiment, self.artifact_location)
        try:
            with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                run = self.client.create_run(
                    self.experiment_id,
                    start_time=None if start_time is None else round(start_time * 1000),
                    tags=dict(tags),
                    run_name=run_name,
                )
        except MlflowException as error:
            if unreachable(error):
                raise self._refused(error) from error
            raise
        self.run_id = run.info.run_id
        if self.run_dir is None and RUN_DIR_TAG in tags:
            self.run_dir = Path(tags[RUN_DIR_TAG])
        self.outbox.params += [Param(key, value) for key, value in params.items()]
        try:
            self._flush(WRITE_TIMEOUT_S)
        except BaseException:  # rejected params: the run must not stay RUNNING
            self.end("FAILED")
            raise
        return self.run_id

    def begin(
        self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str], start_time: float | None = None
    ) -> str | None:
        """:meth:`start`, for the interface of :class:`rlplat.tracking.process.TrackerProcess`,
        whose run is created while training starts: here at once (its errors are raised here).

        Returns:
            The run's id; None when the server did not answer and ``wait_for_server`` is set:
            the run is created, and :data:`RUN_FILE` written in its directory, when it answers.

        Raises:
            ConfigError: as :meth:`start`, but for an unreachable server with ``wait_for_server``.
        """
        try:
            return self.start(run_name, params, tags, start_time)
        except ConfigError as error:
            if not (self.wait_for_server and unreachable(error)):
                raise
            reason = why(error)
        begun = int((time.time() if start_time is None else start_time) * 1000)
        self.pending = PendingRun(run_name, dict(tags), begun)
        if self.run_dir is None and RUN_DIR_TAG in tags:
            self.run_dir = Path(tags[RUN_DIR_TAG])
        self.outbox.params += [Param(key, value) for key, value in params.items()]
        self._server_away()
        self._say(
            f"warning: tracking server unreachable at {self.uri} ({reason}); training goes on, and the "
            "run is created when it answers"
        )
        return None

    def started(self) -> str | None:
        """The id of the run :meth:`begin` created; None while its creation waits for the server."""
        if self.run_id is None and self.pending is None:
            raise RuntimeError("no run was begun in this tracker")
        return self.run_id

    def start_answered(self) -> bool:
        """True: :meth:`begin` created the run at once (see
        :meth:`rlplat.tracking.process.TrackerProcess.start_answered`)."""
        return True

    def attach(self, run_id: str) -> None:
        """Record into the existing run ``run_id`` as it is (its status unchanged, nothing
        read): what :meth:`end` then writes completes it."""
        self.run_id, self._ended = run_id, False

    def reopen(self, run_id: str, resumed_at: float | None = None) -> None:
        """Continue the existing run ``run_id`` (a resume): its status goes back to RUNNING;
        nothing is logged again. End it with :meth:`end` as a started run.

        Given ``resumed_at`` (``time.time()`` when the resuming process started), the time the
        run was down is added to :data:`rlplat.metrics.DOWNTIME_SECONDS`.

        Raises:
            ConfigError: when the store has no such run, it was deleted, or the tracking
                server does not answer.
        """
        try:
            with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                run = self.client.get_run(run_id)
                if run.info.lifecycle_stage == LifecycleStage.DELETED:
                    raise ConfigError(
                        f"run {run_id!r} was deleted from tracking.uri={self.uri!r}: restore it first "
                        f"(mlflow runs restore --run-id {run_id})"
                    )
                self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        except MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                raise ConfigError(f"no run {run_id!r} in tracking.uri={self.uri!r}") from error
            raise self._refused(error) from error
        self.run_id, self.experiment_id = run_id, run.info.experiment_id
        if self.run_dir is None and RUN_DIR_TAG in run.data.tags:
            self.run_dir = Path(run.data.tags[RUN_DIR_TAG])
        self._ended = False
        if resumed_at is not None:
            self._log_downtime(run, resumed_at)

    def _log_downtime(self, run: Any, resumed_at: float) -> None:
        """Log the run's downtime so far: its earlier total plus the time from the stopped
        process's end (the run's end time; without one, as after a power cut, its last logged
        metric) to ``resumed_at``; at the run's last logged step, timestamped ``resumed_at``."""
        try:
            with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                history = self.client.get_metric_history(run.info.run_id, TRAIN_SECONDS)
        except MlflowException as error:
            raise self._refused(error) from error
        ended = max([run.info.end_time or 0, run.info.start_time, *(m.timestamp for m in history)])
        down = max(0.0, resumed_at - ended / 1000)
        total = run.data.metrics.get(DOWNTIME_SECONDS, 0.0) + down
        step = max((m.step for m in history), default=0)
        self.log_metrics({DOWNTIME_SECONDS: total}, step, timestamp_ms=int(resumed_at * 1000))

    def last_step(self, key: str) -> int | None:
        """The largest step (frames) logged for metric ``key`` in the run; None when none was.

        Raises:
            ConfigError: when the tracking server does not answer.
        """
        try:
            with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                history = self.client.get_metric_history(self._started_run_id, key)
        except MlflowException as error:
            raise self._refused(error) from error
        return max((metric.step for metric in history), default=None)

    @property
    def _started_run_id(self) -> str:
        """The id of the run :meth:`start` created; every method but ``start`` records into it."""
        assert self.run_id is not None, "Tracker.start() must be called before anything is recorded"
        return self.run_id

    def _create_pending(self) -> None:
        """Create the run :meth:`begin` could not (the server answers again): its experiment
        if needed, the run with its start time and tags; write :data:`RUN_FILE` in its
        directory. The caller sets the HTTP limits; errors are raised."""
        assert self.pending is not None
        if self.experiment_id is None:
            self.experiment_id = self._experiment(self.experiment, self.artifact_location)
        run = self.client.create_run(
            self.experiment_id,
            start_time=self.pending.start_time,
            tags=self.pending.tags,
            run_name=self.pending.name,
        )
        self.run_id, self.pending = run.info.run_id, None
        if self.run_dir is not None and self.run_dir.is_dir():
            write_run_file(self.run_dir, self.run_id, self.uri, self.experiment_id)

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        """Log scalar ``metrics`` at ``step`` (frames), timestamped ``timestamp_ms`` (ms since
        the epoch; default now), in one batch (later, in order, while the tracking server is
        unreachable)."""
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        self.outbox.add_metrics([Metric(key, float(value), now, int(step)) for key, value in metrics.items()])
        self._write_soon()

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file, or a directory's contents, under ``artifact_path`` (later, while the
        tracking server is unreachable: the file is read then)."""
        self.outbox.add_artifact(Path(path), artifact_path)
        self._write_soon()

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set (or overwrite) tags on the run (later, while the tracking server is unreachable)."""
        self.outbox.tags.update(tags)
        self._write_soon()

    def _write_soon(self) -> None:
        """Send the outbox unless a retry after a failure is not due yet."""
        if self.backoff.due():
            self._flush(WRITE_TIMEOUT_S)

    def _flush(self, timeout_s: int) -> bool:
        """Try to send the outbox now, each request waiting at most ``timeout_s`` seconds;
        returns whether all of it was written.

        Raises:
            MlflowException, requests.RequestException, OSError: a write the store rejected.
        """
        created = ""
        try:
            with http_limits(retries=0, timeout_s=timeout_s):
                if self.pending is not None:
                    self._create_pending()
                    created = f"run {self.run_id} created, "
                self.outbox.send(self.client, self._started_run_id)
        except Exception as error:
            if not unreachable(error):
                raise
            buffered = self.outbox.describe()
            if self._server_away():
                self._say(f"warning: tracking server unreachable; {buffered} buffered, retrying")
            return False
        self.backoff.succeeded()
        if self._buffering_since is not None:
            written = self.outbox.written - self._buffering_since
            self._buffering_since = None
            self._say(f"tracking server reachable again; {created}{_count(written, 'buffered metric value')} written")
        return True

    def _server_away(self) -> bool:
        """An attempt failed because the server cannot be reached: the next is due after the
        backoff. Returns whether this begins a wait (the first failure since writes last went
        through): the run is then tagged :data:`WAITED_TAG`, sent with the rest."""
        self.backoff.failed()
        if self._buffering_since is not None:
            return False
        self._buffering_since = self.outbox.written
        self.outbox.tags[WAITED_TAG] = "true"
        return True

    def end(self, status: str, end_time_ms: int | None = None) -> bool:
        """Write what is buffered, then end the run with ``status``: FINISHED, FAILED, or
        KILLED (stopped early, e.g. pruned), at ``end_time_ms`` (ms since the epoch; default now).

        While the tracking server is unreachable, it keeps trying for ``end_flush_s`` seconds;
        then what is left (with the run's end, and its creation when it waited for the
        server) is kept in the run directory's :data:`PENDING_FILE` and one line says how to
        record it (``rlplat-sync``). Without a run directory, or when the store rejected a
        write, one line says what was not recorded. It never raises an ``Exception`` (it runs
        in ``finally`` blocks, where it must not hide the error that ended the run); Ctrl-C
        stops the waiting. Ending an ended run does nothing.

        Returns:
            Whether everything was recorded and the run ended (False after a first end).
        """
        if (self.run_id is None and self.pending is None) or self._ended:
            return False
        self._ended = True
        status = RunStatus.to_string(RunStatus.from_string(status))
        end_time_ms = int(time.time() * 1000) if end_time_ms is None else end_time_ms
        deadline = time.monotonic() + self.end_flush_s
        problem = self._flush_until(deadline)
        ended = self.pending is None and self._terminate(status, end_time_ms, deadline)
        recorded = ended and problem is None
        if not recorded and not self._rejected and self._keep(status, end_time_ms):
            return False
        if not recorded or self.outbox.dropped:
            self._report_loss(status, problem or "tracking server unreachable", ended)
        return recorded

    def _keep(self, status: str, end_time_ms: int) -> bool:
        """Keep what could not be written, the run's end and (when it waited) its creation in
        the run directory's :data:`PENDING_FILE`; one line says so. Returns whether it was kept."""
        if self.run_dir is None or not self.run_dir.is_dir():
            return False
        kept = KeptRun(
            self.uri,
            self.experiment,
            self.artifact_location,
            self.run_id,
            self.pending,
            status,
            end_time_ms,
            **self.outbox.kept(),
        )
        try:
            path = save_pending(self.run_dir, kept)
        except OSError as error:
            self._say(f"warning: {PENDING_FILE} could not be written in {self.run_dir} ({error})")
            return False
        parts = [self.outbox.describe()] if self.outbox else []
        parts.append("the run's creation and end" if self.pending is not None else f"the end of run {self.run_id}")
        later = "the sweep records them at its end, or" if self.wait_for_server else "record them with:"
        self._say(
            f"warning: tracking server unreachable at the end of the run: {', '.join(parts)} kept in {path}; "
            f"{later} rlplat-sync {self.run_dir}"
        )
        return True

    def _flush_until(self, deadline: float) -> str | None:
        """Send the outbox, retrying until ``deadline``; returns why it could not, or None."""
        try:
            while not self._flush(END_TIMEOUT_S):
                pause = min(self.backoff.wait_s(), deadline - time.monotonic())
                if pause <= 0:
                    return f"tracking server unreachable for {self.end_flush_s:g} s at the end of the run"
                time.sleep(pause)
        except KeyboardInterrupt:
            return "interrupted while waiting for the tracking server"
        except Exception as error:
            self._rejected = True
            return f"the tracking store refused a write ({why(error)})"
        return None

    def _terminate(self, status: str, end_time_ms: int, deadline: float) -> bool:
        """Set the run's end status and time, retrying until ``deadline`` (at least once);
        returns whether it was set."""
        try:
            while True:
                try:
                    with http_limits(retries=0, timeout_s=END_TIMEOUT_S):
                        self.client.set_terminated(self._started_run_id, status=status, end_time=end_time_ms)
                    return True
                except Exception as error:
                    if not unreachable(error) or time.monotonic() >= deadline:
                        return False
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        except KeyboardInterrupt:
            return False

    def _report_loss(self, status: str, problem: str, ended: bool) -> None:
        """One line: what was not recorded, whether the run shows RUNNING, where its files are."""
        lost = []
        if self.outbox:
            lost.append(f"{self.outbox.describe()} could not be recorded")
        if self.outbox.dropped:
            lost.append(f"{_count(self.outbox.dropped, 'metric value')} could not be kept (buffer full)")
        if not ended and self.run_id is not None:
            lost.append(f"the run could not be marked {status} (it shows RUNNING)")
        where = f"; the run's directory: {self.run_dir}" if self.run_dir is not None else ""
        run = f"run {self.run_id}" if self.run_id is not None else "the run (never created)"
        self._say(f"warning: {problem}: {'; '.join(lost)}; {run} in {self.uri}{where}")
