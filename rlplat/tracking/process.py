"""The MLflow tracker in a process of its own, so that MLflow stays off the training's path.

Importing MLflow and opening its store take about as long as importing torch; a training
process that did both would reach its first env step seconds later, and every metric write
(a sqlite transaction, or an HTTP request) would pause its loop. :class:`TrackerProcess`
starts a child process at once, which imports MLflow and opens an existing store while the
parent imports torch and builds the parts (:meth:`TrackerProcess.spare` starts it before
the store is known: rlplat-train does so before Hydra composes the config), then runs a
:class:`rlplat.tracking.store.Tracker` for it (created at the first call, so that a config
error found by the parent's build leaves no store and no experiment behind):

* calls that answer (:meth:`TrackerProcess.start`, ``reopen``, ``last_step``) wait for the
  child's reply, and re-raise its errors (a tracking server that does not answer is a
  ``ConfigError``, as in-process); :meth:`TrackerProcess.begin` asks for the run without
  waiting, so that training starts while the child finishes loading MLflow and creates the
  run, and :meth:`TrackerProcess.started` waits for its id (or raises the error; a run that
  could not be created stops the child, and later writes are dropped);
* writes during training (``log_metrics``, ``log_artifact``, ``set_tags``) are sent without
  waiting; a write the store rejected is raised at the next call;
* :meth:`TrackerProcess.end` waits until everything is written and the run has ended; writes
  rejected meanwhile are reported on stderr.

The child runs at a lower scheduling priority (:data:`NICENESS`): on a machine with few
cores, its MLflow import and its writes yield to the training process rather than slow it.
The child ignores the signals that stop a run (a Ctrl-C reaches the whole process group: see
:mod:`rlplat.signals`): the parent
ends the run, KILLED, as it would in-process. A parent that dies without ending the run
(``kill -9``) closes the pipe, and one that closes it without ending the run sends ``close``;
the child then ends the run FAILED, so that it does not stay RUNNING, and a resume reopens it
as usual. That holds too when the parent dies while the child is still creating the run
(a new store's tables take seconds): the run is created, its id cannot be sent, and it ends
FAILED.

This module imports neither MLflow nor torch.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

from rlplat.registry import ConfigError
from rlplat.signals import LIFE, ignore_signals

START_TIMEOUT_S = 300.0  # the longest a parent waits for the child's answer (a new store's tables take seconds)
END_TIMEOUT_S = 120.0  # the longest it waits for the child to end the run (Tracker.end tries for 30 s)
NICENESS = 10
"""How much the child lowers its scheduling priority (``os.nice``; Unix): 0 is the parent's."""


class TrackingError(RuntimeError):
    """A write the tracking store rejected, or a tracker process that died; the message
    names what the store said."""


def _portable(error: BaseException) -> BaseException:
    """``error`` as the parent can unpickle it: ConfigError as it is, any other as a
    TrackingError naming its type and message."""
    if isinstance(error, ConfigError):
        return ConfigError(str(error))
    return TrackingError(f"{type(error).__name__}: {error}")


def _serve(connection: Connection) -> None:
    """The child's loop: import MLflow at once, then wait for the parent's ``open`` (the
    store's URI, the experiment); open an existing store, build the Tracker at the parent's
    first call after it (nothing is written before the parent asks: a bad config found while
    the parent builds leaves no store behind), then run the parent's calls until ``end``."""
    ignore_signals()  # the parent ends this process
    gc.disable()  # MLflow's imports would set off several full collections that free nothing
    from rlplat.tracking.store import Tracker, warm_up

    try:
        method, args, _, _ = connection.recv()
    except (EOFError, OSError):  # the parent is gone, or never needed a tracker
        return
    if method != "open":
        return
    uri, experiment, artifact_location, options = args
    warm_up(uri)
    # The imports left ~300k objects that every full garbage collection would scan (~0.15 s
    # each): exempt them from all collections, then let the collector run for the rest.
    LIFE.start_up_done()
    tracker: Tracker | None = None
    parent_gone = False  # a reply could not be sent: the calls sent before the parent died are still recorded
    while True:
        try:
            method, args, kwargs, reply = connection.recv()
        except (EOFError, OSError):  # the parent is gone without ending the run
            if tracker is not None:
                tracker.end("FAILED")
            return
        if method == "close":  # a run begun and never ended (the parent stopped abnormally) ends FAILED
            if tracker is not None:
                tracker.end("FAILED")
            return
        answer: tuple[str, Any] | None = None
        try:
            if tracker is None:
                tracker = Tracker(uri, experiment, artifact_location, **options)
            if method == "begin" or method == "reopen":
                result = (getattr(tracker, method)(*args, **kwargs), tracker.experiment_id)
            else:
                result = getattr(tracker, method)(*args, **kwargs)
            if reply:
                answer = ("ok", result)
        except BaseException as error:
            answer = ("error", _portable(error))
        if answer is not None and not parent_gone:
            try:
                connection.send(answer)
            except OSError:  # the parent died while this call ran (e.g. killed while a new store was made):
                parent_gone = True  # what it sent before is read on, and the run ends FAILED at the pipe's end
        if method == "end":
            return


class TrackerProcess:
    """A :class:`rlplat.tracking.Tracker` run by a child process; the same methods.

    Args:
        uri: Tracking URI (see :class:`rlplat.tracking.Tracker`).
        experiment: Experiment name, created when missing.
        artifact_location: Directory for a newly created experiment's artifacts.

    Raises (at :meth:`start` or :meth:`reopen`, the first calls that wait):
        ConfigError: when no MLflow tracking server answers at an ``http(s)://`` ``uri``,
            or it refuses the requests.
    """

    def __init__(self, uri: str, experiment: str, artifact_location: str | None, **options: Any) -> None:
        self._spawn()
        self.open(uri, experiment, artifact_location, **options)

    @classmethod
    def spare(cls) -> TrackerProcess:
        """A child that starts importing MLflow now, before the store is known; give it the
        store with :meth:`open`, or :meth:`discard` it."""
        tracker = cls.__new__(cls)
        tracker._spawn()
        return tracker

    def _spawn(self) -> None:
        self.uri: str | None = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self._starting = False  # begin() sent, its reply not read yet
        self._begun = False  # begin() answered: the run exists, or waits for the server
        self._start_error: BaseException | None = None  # why the run of begin() was not created
        # A plain child interpreter over a socket pair: multiprocessing's spawn would import
        # this process's main module again, and fails inside launchers' worker processes.
        ours, theirs = socket.socketpair()
        command = [sys.executable, "-m", __name__, str(theirs.fileno())]
        self._process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self._connection = Connection(ours.detach())
        self._closed = False

    def open(self, uri: str, experiment: str, artifact_location: str | None, **options: Any) -> None:
        """Give the child its store (once): it opens an existing one while this process goes
        on; the first call that waits (:meth:`start`, :meth:`reopen`) raises its errors.
        ``options``: keywords of :class:`rlplat.tracking.store.Tracker` (``wait_for_server``,
        ``end_flush_s``)."""
        if self.uri is not None:
            raise RuntimeError(f"this tracker process records to {self.uri!r} already")
        self.uri = uri
        self._send("open", uri, experiment, artifact_location, options)

    def discard(self) -> None:
        """Stop the child at once, without waiting for its imports or for the calls queued
        for it: a child never opened, or whose run could not be created, has nothing to
        record."""
        if self._closed:
            return
        self._closed = True
        self._process.kill()
        self._process.wait()
        self._connection.close()

    def _send(self, method: str, *args: Any, reply: bool = False, **kwargs: Any) -> None:
        if self._start_error is not None:
            return  # no run was created (its error was raised by started()): nothing to record into
        self._raise_reported()
        if self._closed:
            raise TrackingError(f"the tracker process has ended; {method} was not recorded")
        try:
            self._connection.send((method, args, kwargs, reply))
        except (BrokenPipeError, OSError) as error:
            raise TrackingError(f"the tracker process died ({error}); {method} was not recorded") from None

    def _call(self, method: str, *args: Any, timeout_s: float = START_TIMEOUT_S, **kwargs: Any) -> Any:
        """Send a call and wait for its reply; re-raise the child's error."""
        if self._starting:
            self.started()  # its reply comes first
        self._send(method, *args, reply=True, **kwargs)
        return self._reply(method, timeout_s)

    def _reply(self, method: str, timeout_s: float) -> Any:
        """Wait for the child's reply to ``method``; re-raise its error."""
        status, value = self._receive(method, timeout_s)
        if status == "error":
            raise value
        return value

    def _receive(self, method: str, timeout_s: float) -> tuple[str, Any]:
        """The child's next message, ``("ok", result)`` or ``("error", exception)``."""
        try:
            if not self._connection.poll(timeout_s):
                raise TrackingError(f"the tracker process did not answer {method} within {timeout_s:g} s")
            status, value = self._connection.recv()
        except (EOFError, OSError) as error:
            raise TrackingError(f"the tracker process died ({error or 'end of file'}); no answer to {method}") from None
        return status, value

    def _raise_reported(self) -> None:
        """Raise the error of a write sent earlier without waiting, if the child reported one.
        While the run of :meth:`begin` is being created its reply comes first: it is left for
        :meth:`started` (the writes' errors, if any, come after it)."""
        if self._closed or self._starting or not self._connection.poll():
            return
        status, value = self._connection.recv()
        if status == "error":
            raise value

    def start(
        self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str], start_time: float | None = None
    ) -> str | None:
        """Create the run (see :meth:`rlplat.tracking.Tracker.begin`); returns its id (None
        while its creation waits for the server)."""
        self.begin(run_name, params, tags, start_time)
        return self.started()

    def begin(
        self, run_name: str, params: Mapping[str, str], tags: Mapping[str, str], start_time: float | None = None
    ) -> None:
        """Have the child create the run (see :meth:`rlplat.tracking.Tracker.start`) without
        waiting for it; :meth:`started` returns its id. Writes sent meanwhile are recorded
        into it."""
        if self.run_id is not None or self._starting or self._begun:
            raise RuntimeError("this tracker process has begun its run already")
        self._send("begin", run_name, dict(params), dict(tags), start_time, reply=True)
        self._starting = True

    def started(self) -> str | None:
        """The id of the run asked for by :meth:`begin`, waiting until the child has created
        it; None when its creation waits for the server (``wait_for_server``: the child
        creates it when the server answers, and writes the run directory's :data:`RUN_FILE`).
        A wait cut short (Ctrl-C) can be waited for again.

        Raises:
            ConfigError: when no MLflow tracking server answers at an ``http(s)://`` uri: no
                run exists; the child is stopped, later writes are dropped, and every later
                call of this method raises the same error.
            TrackingError: for anything else the store refused; the same.
        """
        if self._start_error is not None:
            raise self._start_error
        if self._starting:
            status, value = self._receive("begin", START_TIMEOUT_S)
            self._starting = False
            if status == "error":
                self._start_error = value
                self.discard()  # no run to record into: the writes queued behind it are moot
                raise value
            self.run_id, self.experiment_id = value
            self._begun = True
        if not self._begun and self.run_id is None:
            raise RuntimeError("no run was begun in this tracker process")
        return self.run_id

    def start_answered(self) -> bool:
        """Whether :meth:`started` would return, or raise, without waiting: the child has
        answered :meth:`begin` (its answer comes before any other), or no answer is awaited."""
        if not self._starting:
            return True
        try:
            return self._connection.poll()
        except OSError:
            return True  # the child died: started() says so at once

    def reopen(self, run_id: str, resumed_at: float | None = None) -> None:
        """Continue the run ``run_id`` (see :meth:`rlplat.tracking.Tracker.reopen`)."""
        _, self.experiment_id = self._call("reopen", run_id, resumed_at)
        self.run_id = run_id

    def last_step(self, key: str) -> int | None:
        """The largest step logged for ``key`` (see :meth:`rlplat.tracking.Tracker.last_step`)."""
        return self._call("last_step", key)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log ``metrics`` at ``step`` (frames), timestamped now, without waiting."""
        values = {key: float(value) for key, value in metrics.items()}
        self._send("log_metrics", values, step, timestamp_ms=int(time.time() * 1000))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file or directory, without waiting (the file is read by the child)."""
        self._send("log_artifact", Path(path), artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set tags on the run, without waiting."""
        self._send("set_tags", dict(tags))

    def end(self, status: str) -> None:
        """Write everything sent, end the run with ``status`` and stop the child. Like
        :meth:`rlplat.tracking.Tracker.end` it never raises an ``Exception``: a child that
        fails to answer is reported on stderr."""
        if self._closed:
            return
        try:
            if self._starting:
                self.started()
            self._connection.send(("end", (status,), {}, True))
        except Exception as error:
            print(f"rlplat-train: warning: the run could not be ended in MLflow ({error})", file=sys.stderr)
            self._stop()
            return
        # The child answers the end after everything sent before it: the errors of writes sent
        # without waiting come first, then the end's own answer; then it exits.
        failed_writes, ended = [], False
        while not ended:
            try:
                answer, value = self._receive("end", END_TIMEOUT_S)
            except TrackingError as error:  # exited after a failed end, died, or did not answer
                print(f"rlplat-train: warning: the run could not be ended in MLflow ({error})", file=sys.stderr)
                break
            if answer == "ok":
                ended = True
            else:
                failed_writes.append(value)
        for rejected in failed_writes:
            print(f"rlplat-train: warning: a write to MLflow failed ({rejected})", file=sys.stderr)
        self._stop()

    def close(self) -> None:
        """Stop the child without recording anything more: nothing when no run was started;
        a run begun and not ended ends FAILED."""
        if self._closed:
            return
        with contextlib.suppress(OSError):  # a child that died already
            self._connection.send(("close", (), {}, False))
        self._stop()

    def _stop(self) -> None:
        self._closed = True
        try:
            self._process.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._connection.close()


def _exit_served() -> NoReturn:
    """Leave the child once :func:`_serve` is done, without the interpreter's teardown.

    Everything the parent sent is written and answered by then; what is left is freeing
    the objects of MLflow, SQLAlchemy and, after a new store's schema was created, Alembic's
    migrations: 0.05 s after an existing store, 0.4 s after a new one, which the parent's
    :meth:`TrackerProcess.end` would wait for. Logging's handlers and the standard streams
    are flushed first; exit handlers are not run (MLflow's own send nothing once it stops).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream closed, or a pipe whose reader left
            stream.flush()
    os._exit(0)


if __name__ == "__main__":  # the child: python -m rlplat.tracking.process FD
    if hasattr(os, "nice"):
        os.nice(NICENESS)  # MLflow's import and the store's writes yield to the training process
    from rlplat.tracking import process  # this module under its name, so that its errors unpickle in the parent

    process._serve(Connection(int(sys.argv[1])))
    process._exit_served()
