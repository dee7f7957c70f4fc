"""Record what runs kept while their tracking server was away (:mod:`rlplat.tracking.pending`):
``rlplat-sync`` calls :func:`sync`, a sweep's end and a sweep's resume :func:`record_kept_runs`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from rlplat.registry import ConfigError
from rlplat.tracking.pending import load_pending, pending_files, save_pending
from rlplat.tracking.records import write_run_file
from rlplat.tracking.store import PROBE_TIMEOUT_S, Backoff, Outbox, Tracker, http_limits, unreachable, why

KEPT_END_FLUSH_S = 10.0  # seconds recording one kept run may wait for a server that stops answering


def record_kept(path: Path, say: Callable[[str], None] | None = None) -> str:
    """Record one :data:`~rlplat.tracking.pending.PENDING_FILE`: create its run when it never
    was (with its start time and tags; the run directory's :data:`RUN_FILE` is written), write
    its params, tags, metric values (at their steps and times) and artifacts, and end it with
    its status and end time. The file is removed once everything is recorded; a server that
    stops answering meanwhile leaves it (the run, once created, is not created twice).
    ``say`` shows a line (default: the tracker's, on stderr).

    Returns:
        The run's id.

    Raises:
        ConfigError: the file cannot be read; no tracking server answers at its URI; the store
            refused a write (the file is kept).
    """
    kept = load_pending(path)
    run_dir = Path(path).parent
    tracker = Tracker(kept.uri, kept.experiment, kept.artifact_location, run_dir=run_dir, say=say,
                      end_flush_s=KEPT_END_FLUSH_S)  # fmt: skip
    if kept.run_id is None:
        assert kept.create is not None, "a kept run has an id or its creation"
        run_id = tracker.start(kept.create.name, {}, kept.create.tags, start_time=kept.create.start_time / 1000)
        write_run_file(run_dir, run_id, kept.uri, str(tracker.experiment_id))
        kept.run_id, kept.create = run_id, None
        save_pending(run_dir, kept)  # a second try must not create it again
    else:
        tracker.attach(kept.run_id)
    tracker.outbox = Outbox.from_kept(kept)
    if not tracker.end(kept.status, end_time_ms=kept.end_time):
        raise ConfigError(f"{path}: not all of it was recorded in {kept.uri} (see above); it is kept")
    Path(path).unlink(missing_ok=True)
    return kept.run_id


@dataclass
class Synced:
    """What :func:`record_kept_runs` did.

    Attributes:
        recorded: The run ids recorded, one per kept file.
        failed: The kept files left, each with why.
    """

    recorded: list[str] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)


def record_kept_runs(root: Path, say: Callable[[str], None] | None = None) -> Synced:
    """Record every kept run under ``root`` (a run or sweep directory, or a folder of them),
    oldest file first (:func:`record_kept`)."""
    synced = Synced()
    for path in pending_files(root):
        try:
            synced.recorded.append(record_kept(path, say))
        except ConfigError as error:
            synced.failed.append((path, str(error)))
    return synced


def wait_for_server(
    uri: str,
    timeout_s: float,
    on_wait: Callable[[str], None],
    give_up: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Wait until the tracking server at ``uri`` answers, for at most ``timeout_s`` seconds
    (tries 1, 2, 4, ... 16 s apart); ``on_wait(why)`` is called once, when the first try
    fails; ``give_up()`` true stops the wait (checked each second). A store that is not a
    server answers at once.

    Returns:
        None once it answers; else why it did not (the last failure).
    """
    if not uri.startswith(("http://", "https://")):
        return None
    client, backoff = MlflowClient(tracking_uri=uri), Backoff(clock=clock)
    deadline, said = clock() + timeout_s, False
    while True:
        try:
            with http_limits(retries=0, timeout_s=PROBE_TIMEOUT_S):
                client.search_experiments(max_results=1)
            return None
        except MlflowException as error:
            if not unreachable(error):
                return why(error)
            reason = why(error)
        if not said:
            on_wait(reason)
            said = True
        backoff.failed()
        if clock() + backoff.wait_s() > deadline:
            return reason
        while backoff.wait_s() > 0:
            if give_up():
                return reason
            time.sleep(min(1.0, backoff.wait_s()))


def sync(roots: Sequence[Path], wait_s: float, say: Callable[[str], None], show: Callable[[str], None]) -> bool:
    """What ``rlplat-sync`` does: wait up to ``wait_s`` seconds for the tracking server of every
    run kept under ``roots`` (:func:`wait_for_server`; 0: try once), then record each run
    (:func:`record_kept`), oldest file first.

    Args:
        roots: Run or sweep directories, or folders of them.
        wait_s: Seconds to wait for a server that does not answer.
        say: Shows a notice or an error (a server waited for or not answering, a run not recorded).
        show: Shows each run recorded, or that nothing was kept.

    Returns:
        True when nothing is kept any more; False when a server did not answer or refused a write.
    """
    files = [path for root in roots for path in pending_files(root)]
    if not files:
        show(f"nothing to record: no run under {', '.join(map(str, roots))} kept anything")
        return True
    for uri in sorted({load_pending(path).uri for path in files}):
        waiting = lambda why, uri=uri: say(f"waiting up to {wait_s:g} s for the tracking server at {uri} ({why})")
        problem = wait_for_server(uri, wait_s, waiting if wait_s > 0 else lambda why: None)
        if problem is not None:
            say(f"error: no MLflow tracking server answers at {uri} ({problem}): nothing recorded; run rlplat-sync "
                "again once it answers (wait=SECONDS waits for it)")  # fmt: skip
            return False
    kept = 0
    for path in files:
        try:
            show(f"recorded run {record_kept(path, say)}")
        except ConfigError as error:
            say(f"error: {path} was not recorded: {error}")
            kept += 1
    return kept == 0
