"""Waiting for a process to reach a phase, on what it does (a file it writes, a line it
prints, a library it loads), never on a fixed sleep: on a busy machine a sleep may end
before the phase is reached. The timeout only bounds a hang.

:func:`loaded` reads Linux's /proc: tests that wait on it are skipped elsewhere
(:data:`needs_proc`).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

HANG_S = 120.0
"""How long a wait may take before it counts as a hang."""

needs_proc = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads a process's state from Linux /proc")


def wait_until(
    ready: Callable[[], bool], process: subprocess.Popen | None = None, what: str = "", timeout: float = HANG_S
) -> None:
    """Return once ``ready()``; fail when ``process`` exits first, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended (exit status {process.returncode}) before {what or 'the wait'}")
        assert time.monotonic() < deadline, f"not {what or 'ready'} after {timeout:g} s"
        time.sleep(0.01)


def loaded(pid: int, library: str) -> bool:
    """Whether process ``pid`` has mapped a shared library whose file name starts with
    ``library`` (e.g. ``"libtorch"``: it is importing torch, or has), from /proc/PID/maps."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone, or not Linux
        return False
    return any(line.rsplit("/", 1)[-1].startswith(library) for line in maps.splitlines() if "/" in line)


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (one of /proc/PID/fd links to it)."""
    target = str(Path(path).resolve())
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == target:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def printed(path: Path, pattern: str) -> bool:
    """Whether the file ``path`` (a process's redirected output) has a line matching ``pattern``."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return False
    return re.search(pattern, text, re.MULTILINE) is not None
