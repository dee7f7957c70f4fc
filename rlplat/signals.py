"""How every rlplat process answers SIGINT (Ctrl-C) and SIGTERM: one state machine, the process's
:class:`Life` (``LIFE``), the only place in rlplat where a handler is installed. Its phases:

``START_UP``
    Imports, composition, the build, with Python's own handlers: Ctrl-C stops the command with
    one line and exit status 130, having recorded nothing (a new run's directory is removed, a
    resumed run left as it was). :meth:`Life.start_up_done` ends it when training starts.
``RUNNING``
    In :meth:`Life.training` (a run's loop: ``rlplat-train``, a resume, each sweep job) the
    first signal asks the loop to stop after its rollout: it writes a checkpoint, and its MLflow
    run ends KILLED. In :meth:`Life.sweep_waits` (a sweep's main process, and the parallel
    launcher's workers between jobs) it is recorded, never raised into Hydra's or joblib's code:
    no further job starts, and the main process waits for the running jobs to checkpoint.
``STOPPING``
    After a first signal: in training, a second stops at once (the run still ends KILLED); in a
    sweep's main process, a second says it waits for the jobs, a third exits at once.
``STOPPED``
    The work ended on the signal (:meth:`Life.stop`): a sweep starts no later job
    (``resume=<sweep dir>`` does), and the process exits with :func:`exit_status` (130 for
    SIGINT, 143 for SIGTERM) after printing how to resume.

A single run goes START_UP -> RUNNING -> (STOPPING -> STOPPED). A serial sweep (the jobs in the
main process) and a parallel one (joblib's workers, which a terminal's Ctrl-C reaches too) keep
``sweep_waits`` installed around their jobs, and each job's ``training`` takes over while it
trains. Child processes the run closes ignore the signals (:func:`sigint_ignored`,
:func:`ignore_signals`). ``rlplat-eval``, ``-record`` and ``-compare`` stay in START_UP
(:func:`stopped_with_one_line`).
"""

from __future__ import annotations

import contextlib
import enum
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, Protocol

HANDLED = (signal.SIGINT, signal.SIGTERM)
STOPPED_IN_START_UP = "rlplat-train: stopped by SIGINT during start-up, before training: nothing recorded"
"""What a run stopped by Ctrl-C before training prints."""


class Phase(enum.Enum):
    """Where the process is in its life (see the module's docstring)."""

    START_UP = "start-up"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class StopTarget(Protocol):
    """What a training loop reads to stop after its rollout (:class:`rlplat.trainer.StopRequest`)."""

    signal: str | None


def exit_status(name: str) -> int:
    """The exit status of a process stopped by signal ``name``: 128 + its number (130, 143)."""
    return 128 + signal.Signals[name].value


def process_start_time() -> float:
    """``time.time()`` at this process's start (Linux /proc, 10 ms); elsewhere, this module's import."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


_IMPORTED = time.time()


class Life:
    """The process's :class:`Phase`, the first signal's name once one came in RUNNING
    (``stopped_by``), how many jobs it started (``jobs``), and its handlers."""

    def __init__(self) -> None:
        self.phase = Phase.START_UP
        self.stopped_by: str | None = None
        self.jobs = 0
        self._main_process = False  # a sweep's main process says what a first signal does
        self._waits = False  # sweep_waits() installed its handlers in this process
        self._extra = 0  # signals after the first, outside training

    def start_up_done(self) -> None:
        """START_UP -> RUNNING: exempt the objects alive now (modules, config, built parts) from
        later garbage collections (``gc.freeze``) and let the collector run again
        (:func:`rlplat.command_line.collect_after_start_up` paused it)."""
        if self.phase is Phase.START_UP:
            self.phase = Phase.RUNNING
        gc.freeze()
        gc.enable()

    def job_start(self) -> float:
        """When the job starting now started: its process's start for the first job of a
        process (imports included), else now."""
        self.jobs += 1
        return process_start_time() if self.jobs == 1 else time.time()

    def stop(self, name: str) -> None:
        """Record that signal ``name`` stopped this process's work (STOPPED)."""
        self.stopped_by, self.phase = name, Phase.STOPPED

    @contextlib.contextmanager
    def training(self, stop: StopTarget) -> Iterator[None]:
        """Inside the block, the first SIGINT or SIGTERM sets ``stop.signal`` (the loop stops
        after its rollout), a second raises KeyboardInterrupt at once; a signal that reached a
        sweep's job before (``stopped_by``) stops it at its first rollout. The previous
        handlers are restored after, and the objects frozen at the start unfrozen."""

        def handler(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if stop.signal is not None:
                raise KeyboardInterrupt(name)
            stop.signal, self.phase = name, Phase.STOPPING
            if self.stopped_by is None and self._waits:
                self.stopped_by = name  # a sweep's process: no further job starts
            print(f"\nrlplat-train: {name}: stopping after this rollout (again to stop at once)", file=sys.stderr)

        if stop.signal is None:
            stop.signal = self.stopped_by
        self.start_up_done()
        previous = {sig: signal.signal(sig, handler) for sig in HANDLED}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            gc.unfreeze()

    def sweep_waits(self, main_process: bool = False) -> None:
        """From now on, record SIGINT and SIGTERM instead of raising them (a sweep's main process,
        and the parallel launcher's workers): the first sets ``stopped_by`` (no further job
        starts; jobs in training stop on their own), a second says the process waits for the
        jobs, a third exits at once. ``main_process``: print what the first signal does."""
        self._main_process = self._main_process or main_process
        self._waits = True
        for sig in HANDLED:
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stopped_by is None:
            self.stop(name)
            if self._main_process:
                print(f"\nrlplat-train: {name}: the sweep starts no more jobs and stops when its running jobs have",
                      file=sys.stderr)  # fmt: skip
            return
        self._extra += 1
        if self._extra > 1:
            raise SystemExit(exit_status(name))
        print(f"\nrlplat-train: {name}: waiting for the jobs to end their runs (again to kill them)", file=sys.stderr)


LIFE = Life()
"""This process's life: signal handlers are per process, so there is exactly one."""


def stopped_in_start_up() -> NoReturn:
    """Report a Ctrl-C in a run's START_UP (:data:`STOPPED_IN_START_UP`); exit with status 130."""
    print(STOPPED_IN_START_UP, file=sys.stderr)
    raise SystemExit(exit_status("SIGINT"))


def stopped_with_one_line(prog: str, what_is_left: str) -> NoReturn:
    """Report a Ctrl-C in START_UP as ``<prog>: stopped by SIGINT: <what_is_left>``; exit 130."""
    print(f"{prog}: stopped by SIGINT: {what_is_left}", file=sys.stderr)
    raise SystemExit(exit_status("SIGINT"))


def interrupted_by(error: BaseException, default: str = "SIGINT") -> str:
    """The name of the signal behind ``error``: a loop's ``Interrupted`` (``.signal``), a
    second signal's KeyboardInterrupt (its message), else ``default``."""
    name = getattr(error, "signal", None) or str(error)
    return name if name in ("SIGINT", "SIGTERM") else default


def wait_forwarding_signals(process: subprocess.Popen[Any]) -> int:
    """Wait for ``process`` (started in a session of its own, so that a terminal's Ctrl-C
    does not reach it twice), passing it SIGINT and SIGTERM; returns its exit status."""
    forward = lambda sig, _frame: process.send_signal(sig)  # noqa: E731
    previous = {sig: signal.signal(sig, forward) for sig in HANDLED}
    try:
        return process.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def ignore_signals() -> None:
    """Ignore SIGINT and SIGTERM for good, in a child process its parent ends (MLflow's recorder)."""
    for sig in HANDLED:
        signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while processes are started (env subprocesses, collector workers, a local Ray
    instance): they keep ignoring it, so that a Ctrl-C stops the run, which closes them. Main
    thread only; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
